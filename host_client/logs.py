"""The one log dialect of every GPU Sentinel daemon (gateway, probe, emulator, remedy): structured records on stderr,
one JSON object per line with an ISO-8601 UTC time (or a text line for humans), and errors put in words.

The whole API a daemon needs (the dialect: docs/GATEWAY.md, "Logs"; a new daemon adopts it with these three):

    log = setup("sentinel.remedy", fmt="json", level="info")      # once, in the CLI (--log-format json|text)
    log_event(log, "node_drained", logging.WARNING, node="gpu-worker-08", reason="XID 79")
    log_event(log, "gateway_unreachable", logging.WARNING, error=error_words(e))
    log.info("prose is fine too: %s", x)                            # a record without an event name

A JSON line: {"ts": "2026-12-06T03:00:00.123Z", "severity": "warning", "logger": "sentinel.remedy",
"event": "node_drained", "node": "gpu-worker-08", ...}; a prose record has "message" instead of "event". A text
line: `2026-12-06T03:00:00.123Z WARNING node_drained node="gpu-worker-08" ...`. Event names are snake_case and stable
(tests, docs and alert rules grep them); values are JSON. An error is never logged as a raw exception repr: pass it
through error_words(); a record logged with exc_info (a bug) also carries its traceback.
"""

from __future__ import annotations

import errno
import http.client
import json
import logging
import re
import socket
import ssl
import sys
import urllib.error
from datetime import datetime, timezone

__all__ = ["FORMATS", "JsonFormatter", "TextFormatter", "error_words", "iso_time", "log_event", "setup"]

FORMATS = ("json", "text")
_EVENT_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


def iso_time(created: float) -> str:
    """An epoch time as ISO-8601 UTC with milliseconds and a Z: what every log line starts with."""
    return datetime.fromtimestamp(created, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def log_event(logger: logging.Logger, event: str, severity: int = logging.INFO, /, **fields) -> None:
    """One structured record: a stable snake_case event name and its fields (JSON values)."""
    if logger.isEnabledFor(severity):
        logger.log(severity, event, extra={"fields": fields})


def _record_fields(record) -> dict | None:
    return getattr(record, "fields", None)


def _head(record) -> dict:
    d = {"ts": iso_time(record.created), "severity": record.levelname.lower(), "logger": record.name}
    f = _record_fields(record)
    msg = record.getMessage()
    if f is None and not _EVENT_NAME.match(msg):
        d["message"] = msg
    else:
        d["event"] = msg  # log.info("gateway_stopped"): an event without fields
        d.update(f or {})
    if record.exc_info and record.exc_info[1] is not None:
        d.setdefault("error", error_words(record.exc_info[1]))
    return d


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (ISO-8601 UTC), severity, logger, then event and its fields (or message)."""

    def format(self, record):
        d = _head(record)
        if record.exc_info:
            d["traceback"] = self.formatException(record.exc_info)
        return json.dumps(d, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """`--log-format text`: the same record for a human, `TIME LEVEL event key=value ...` on one line."""

    def format(self, record):
        d = _head(record)
        head = "%s %s" % (d.pop("ts"), d.pop("severity").upper())
        d.pop("logger")
        words = d.pop("message", None)
        event = d.pop("event", None)
        tail = " ".join("%s=%s" % (k, json.dumps(v, ensure_ascii=False, default=str)) for k, v in d.items())
        line = " ".join(x for x in (head, event or words, tail) if x)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup(name: str, *, fmt: str = "json", level: str | int = "info", stream=None) -> logging.Logger:
    """The daemon's logger `name` writing to stream (stderr) in fmt ("json" or "text"); its records do not reach
    the root logger. Returns the logger; modules log to logging.getLogger(name) or a child of it."""
    if fmt not in FORMATS:
        raise ValueError("log format must be json or text, got %r" % fmt)
    h = logging.StreamHandler(stream if stream is not None else sys.stderr)
    h.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    log = logging.getLogger(name)
    log.handlers[:] = [h]
    log.setLevel(getattr(logging, level.upper()) if isinstance(level, str) else level)
    log.propagate = False
    return log


# the network's errors in the words transport.describe uses; any other OSError keeps the system's own words
_ERRNO_WORDS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset",
    errno.ECONNABORTED: "connection aborted",
    errno.EHOSTUNREACH: "no route to host",
    errno.ENETUNREACH: "network is unreachable",
    errno.ETIMEDOUT: "timed out",
    errno.EPIPE: "the other end closed the connection",
}


def error_words(e: BaseException) -> str:
    """An error as an operator reads it: "connection refused", "timed out", "HTTP 503 Service Unavailable",
    "No such file or directory: /dev/kmsg" (the system's words); never a class name and a repr such as
    `URLError: <urlopen error [Errno 111] Connection refused>`."""
    if isinstance(e, urllib.error.HTTPError):
        return ("HTTP %d %s" % (e.code, e.reason or "")).strip()
    if isinstance(e, urllib.error.URLError):
        r = e.reason
        return error_words(r) if isinstance(r, BaseException) else str(r)
    if isinstance(e, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(e, socket.gaierror):
        return "host name not found (%s)" % (e.strerror or "no address")
    if isinstance(e, http.client.RemoteDisconnected):
        return "connection closed without an answer"
    if isinstance(e, ssl.SSLError):
        return "TLS failed: %s" % (e.reason or e.strerror or "handshake error").lower().replace("_", " ")
    if isinstance(e, http.client.HTTPException):
        return "bad HTTP answer" + (": %s" % e if str(e) else "")
    if isinstance(e, OSError):
        words = _ERRNO_WORDS.get(e.errno or -1) or e.strerror or str(e) or "system error"
        name = e.filename
        return "%s: %s" % (words, name) if name else words
    text = str(e)
    if isinstance(e, KeyError) and e.args:
        return "missing %s" % e.args[0]
    return text or type(e).__name__
