"""The gateway's structured log: one record per event name with its fields, rendered as JSON or text lines, and
the level each lane and worker event is logged at."""

from __future__ import annotations

import json
import logging

logger = logging.getLogger("sentinel.gateway")


def log_event(event: str, severity: int = logging.INFO, /, **fields) -> None:
    """One structured record: the event name plus fields; the formatter renders JSON or text."""
    if logger.isEnabledFor(severity):
        logger.log(severity, event, extra={"fields": fields})


class JsonFormatter(logging.Formatter):
    def format(self, record):
        d = {"ts": round(record.created, 3), "severity": record.levelname.lower(), "event": record.getMessage()}
        d.update(getattr(record, "fields", {}) or {})
        if record.exc_info:
            d["exc"] = self.formatException(record.exc_info)
        return json.dumps(d, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record):
        f = getattr(record, "fields", {}) or {}
        tail = " ".join("%s=%s" % (k, json.dumps(v, ensure_ascii=False, default=str)) for k, v in f.items())
        return "%s %s %s %s" % (self.formatTime(record), record.levelname, record.getMessage(), tail)


def lane_log(event, **fields):
    log_event(event, logging.WARNING if event in ("alarm_dropped", "alarm_undeliverable") else logging.INFO, **fields)


_ERRORS = frozenset(("alarm_dead_letter", "persist_failed", "dead_letter_unsaved", "worker_error"))
_WARNINGS = frozenset(("terminal_unreachable", "alarm_refused", "heartbeat_failed"))


def worker_log(event, **fields):
    lvl = (
        logging.ERROR
        if event in _ERRORS
        else logging.WARNING
        if event in _WARNINGS
        else (logging.DEBUG if event == "delivery_retry" else logging.INFO)
    )
    log_event(event, lvl, **fields)
