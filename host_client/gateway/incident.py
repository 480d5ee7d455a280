"""What the gateway hands to a terminal lane: one incident (a fault on one node, or its recovery).

Both inputs (probes' GPU events and Alertmanager alerts) become incidents, so grouping, routing, delivery and
recovery tracking do not care where a fault was seen.
"""

from __future__ import annotations

from sentinel_core.alarm import NORMAL


class Incident:
    __slots__ = (
        "key",
        "level",
        "rack",
        "host",
        "kind",
        "text",
        "labels",
        "source",
        "recovery",
        "phrase_zh",
        "phrase_en",
        "scope",
        "attach",
        "ident",
    )

    def __init__(
        self,
        key,
        level,
        *,
        rack,
        host,
        kind,
        text,
        labels=None,
        source="gpu_event",
        recovery=False,
        phrase_zh=None,
        phrase_en=None,
    ):
        _fill(
            self, key, level, rack, host, kind, text, labels, source, recovery, phrase_zh, phrase_en, None, False, None
        )

    def text_for(self, language):
        t = self.text
        if callable(t):
            # built when first needed: a debounced GPU that attaches to its node's alarm is never spoken
            t = self.text = t()
        if isinstance(t, dict):
            return t.get(language) or t.get("en") or next(iter(t.values()))
        return t

    def __repr__(self):
        return "Incident(%s %s%s)" % (self.key, self.level, " recovery" if self.recovery else "")


def _fill(
    inc, key, level, rack, host, kind, text, labels, source, recovery, phrase_zh, phrase_en, scope, attach, ident
):
    """Every slot of an incident, in one place: Incident() and gpu_incident() both fill theirs here."""
    inc.key = key  # names the incident; a recovery carries the key of what it clears
    inc.level = level  # P0 / P1 / NORMAL
    inc.rack = rack or ""
    inc.host = host or ""
    inc.kind = kind  # event type or alertname: what a summary says happened
    inc.text = text  # the words for this incident alone: a str, {"zh": ..., "en": ...}, or a
    #                             function returning one (called once, when the words are needed)
    inc.labels = labels or {}
    inc.source = source
    inc.recovery = recovery
    inc.phrase_zh = phrase_zh or kind
    inc.phrase_en = phrase_en or kind
    # scope: the debounce key this incident falls under when that differs from its own key (one GPU of a node's
    # rack:host:type). attach: the debounce suppressed it; a lane adds it to the alarm already standing for its
    # scope instead of sending a new one, so that alarm is not cleared while this GPU is still bad.
    inc.scope = scope
    inc.attach = attach
    # ident: what names this occurrence of the incident on every gateway alike (Alertmanager: fingerprint and
    # startsAt; GPU events: the key and its first-seen window). The alarm id is derived from it (lane.py), so
    # N gateways sending the same incident send the same id and the terminal shows it once. None: the lane
    # uses the key and the time window of its arrival.
    inc.ident = ident
    return inc


_new = object.__new__


def gpu_incident(key, level, rack, host, kind, text, labels, recovery, phrase_zh, phrase_en, scope, attach, ident):
    """What Incident(key, level, rack=rack, host=host, kind=kind, text=text, labels=labels, source="gpu_event",
    recovery=recovery, phrase_zh=phrase_zh, phrase_en=phrase_en) gives, with scope, attach and ident then set: the
    GPU event path's incident, built without the class call (CPython 3.11 packs a keyword call to a class into a
    tuple and a dict and enters __init__ through C; docs/PERFORMANCE.md). tests/test_gateway_lane.py compares
    every slot with the constructor's."""
    return _fill(
        _new(Incident),
        key,
        level,
        rack,
        host,
        kind,
        text,
        labels,
        "gpu_event",
        recovery,
        phrase_zh,
        phrase_en,
        scope,
        attach,
        ident,
    )


def recovery_of(key, *, rack, host, kind, text, labels=None, source="gpu_event", phrase_zh=None, phrase_en=None):
    return Incident(
        key,
        NORMAL,
        rack=rack,
        host=host,
        kind=kind,
        text=text,
        labels=labels,
        source=source,
        recovery=True,
        phrase_zh=phrase_zh,
        phrase_en=phrase_en,
    )
