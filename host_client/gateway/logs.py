"""The gateway's structured log: its logger, one record per event name with its fields (the dialect and formatters
are host_client/logs.py's, shared by every daemon), and the level each lane and worker event is logged at."""

from __future__ import annotations

import logging

from host_client.logs import JsonFormatter, TextFormatter
from host_client.logs import log_event as _log_event

__all__ = ["JsonFormatter", "TextFormatter", "lane_log", "log_event", "logger", "worker_log"]

logger = logging.getLogger("sentinel.gateway")


def log_event(event: str, severity: int = logging.INFO, /, **fields) -> None:
    """One structured record of the gateway: the event name plus fields."""
    _log_event(logger, event, severity, **fields)


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
