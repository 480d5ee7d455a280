"""Alertmanager's webhook (version "4") and Grafana unified alerting's (version "1") -> incidents.

Grafana's contact-point webhook sends the same shape as Alertmanager (it embeds Alertmanager): `alerts[]` with
`status`, `labels`, `annotations`, `startsAt`, `fingerprint`, plus Grafana's own top-level fields (`orgId`,
`title`, `state`, `message`) and per-alert URLs and `values`, which are ignored. Both map the same way.

One notification carries a group of alerts; each becomes one incident keyed by its fingerprint, and the lane's
grouping folds them, so a notification of fifty alerts is one alarm and one summary, not fifty utterances.
Firing -> an alarm at the level the severity label maps to, text from the first annotation present; resolved -> the
NORMAL recovery for the same key.

Each incident's `ident` is fingerprint + startsAt: the same on every Alertmanager of an HA pair (they share the
alert, its fingerprint and its start), so every gateway derives the same alarm id from it (lane.py) and the
terminal's replay memory answers the copies as duplicates; a later firing of the same alert has a new startsAt.
"""

from __future__ import annotations

import hashlib

from sentinel_core.alarm import NORMAL

from .events import EventError
from .incident import Incident

RESOLVED_TEXT = {"zh": "%s 已恢复正常", "en": "Resolved: %s"}
MAX_ALERTS = 1000
VERSIONS = {"4": "alertmanager", "1": "grafana"}
LANGS = ("zh", "en")


def _labels(obj, where):
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise EventError("bad_field", "%s must be an object of strings" % where)
    out = {}
    for k, v in obj.items():
        if not isinstance(v, str):
            raise EventError("bad_field", "%s.%s must be a string" % (where, k))
        out[str(k)] = v
    return out


def fingerprint(labels: dict) -> str:
    """For a sender that leaves the fingerprint out: a stable hash of the label set."""
    h = hashlib.sha256()
    for k in sorted(labels):
        h.update(k.encode() + b"\xff" + labels[k].encode() + b"\xff")
    return h.hexdigest()[:16]


def _first(labels, names):
    for n in names:
        v = labels.get(n)
        if v:
            return v
    return ""


def _host(labels, names):
    v = _first(labels, names)
    # instance is host:port for most exporters (dcgm-exporter's :9400): the port says nothing to a human.
    if v and v.count(":") == 1:
        v = v.split(":", 1)[0]
    return v


def parse_webhook(body, cfg, language: str = "zh") -> list:
    """Validate a webhook body; returns a list of Incidents (firing and resolved), in the notification's order."""
    if not isinstance(body, dict):
        raise EventError("bad_body", "the body must be a JSON object", 400)
    version = body.get("version")
    if version is not None and version not in VERSIONS:
        raise EventError(
            "unsupported_version",
            'webhook version %r; this gateway speaks Alertmanager\'s "4" and Grafana\'s "1"' % (version,),
        )
    alerts = body.get("alerts")
    if not isinstance(alerts, list):
        raise EventError("missing_field", "alerts must be a list")
    if len(alerts) > MAX_ALERTS:
        raise EventError(
            "too_many_alerts",
            "%d alerts in one notification, at most %d (set max_alerts in the "
            "Alertmanager receiver)" % (len(alerts), MAX_ALERTS),
            413,
        )
    common = _labels(body.get("commonLabels"), "commonLabels")
    out = []
    for i, a in enumerate(alerts):
        where = "alerts[%d]" % i
        if not isinstance(a, dict):
            raise EventError("bad_field", "%s must be an object" % where)
        status = a.get("status", body.get("status"))
        if status not in ("firing", "resolved"):
            raise EventError("bad_field", '%s.status must be "firing" or "resolved"' % where)
        labels = dict(common)
        labels.update(_labels(a.get("labels"), where + ".labels"))
        ann = _labels(a.get("annotations"), where + ".annotations")
        fp = a.get("fingerprint")
        if fp is None or fp == "":
            fp = fingerprint(labels)
        elif not isinstance(fp, str) or len(fp) > 64:
            raise EventError("bad_field", "%s.fingerprint must be a short string" % where)
        starts = a.get("startsAt", "")
        if not isinstance(starts, str) or len(starts) > 64:
            raise EventError("bad_field", "%s.startsAt must be a timestamp string" % where)
        name = labels.get("alertname") or "alert"
        rack = _first(labels, cfg.am_rack_labels)
        host = _host(labels, cfg.am_host_labels)
        text = _first(ann, cfg.am_text_annotations)
        if not text:
            text = "%s %s %s" % (name, rack, host) if (rack or host) else name
        text = " ".join(text.split())  # annotations are often multi-line; speech and the wire want one line
        # summary_zh / summary_en beside summary: each terminal speaks its own language (sentinel-remedy sends both)
        by_lang = {
            lang: " ".join(_first(ann, [a + "_" + lang for a in cfg.am_text_annotations]).split()) for lang in LANGS
        }
        if all(by_lang.values()):
            text = by_lang
        sev = labels.get(cfg.am_severity_label, "").lower()
        level = cfg.am_levels.get(sev, cfg.am_default_level)
        inc_labels = dict(labels)
        inc_labels.update({"rack": rack, "host": host, "event_type": name})
        key = "am:" + fp
        if status == "firing":
            inc = Incident(
                key, level, rack=rack, host=host, kind=name, text=text, labels=inc_labels, source="alertmanager"
            )
        else:
            rt = {lang: tpl % (text[lang] if isinstance(text, dict) else text) for lang, tpl in RESOLVED_TEXT.items()}
            inc = Incident(
                key,
                NORMAL,
                rack=rack,
                host=host,
                kind=name,
                text=rt,
                labels=inc_labels,
                source="alertmanager",
                recovery=True,
            )
        inc.ident = "%s@%s" % (key, starts)
        out.append(inc)
    return out
