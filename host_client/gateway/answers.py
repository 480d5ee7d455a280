"""The gateway front's answers as bytes: the status line and head, the JSON body (the C encoder called directly, a
template for the answer nearly every event gets), and the one place that decides an answer is a plain 200."""

from __future__ import annotations

import http
import json

JSON = b"application/json"
WWW_AUTH = b'WWW-Authenticate: Bearer realm="sentinel-gateway"\r\n'
ALLOW_POST = b"Allow: POST\r\n"
ALLOW_GET = b"Allow: GET\r\n"


def reason(code: int) -> str:
    """The standard reason phrase (RFC 9110, as the standard library spells it)."""
    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return "Unknown"


def _no_default(o):
    raise TypeError("%s is not JSON serializable" % type(o).__name__)


# The C encoder, built once and called directly: JSONEncoder.encode builds a closure and a chunk list per call. No
# circular-reference markers: an answer is a fresh tree of dicts, lists and scalars.
_C_MAKE = getattr(json.encoder, "c_make_encoder", None)  # the C accelerator; None where _json is not built
_C_ENCODE = (
    _C_MAKE(None, _no_default, json.encoder.encode_basestring, None, ":", ",", False, False, True) if _C_MAKE else None
)
_PY_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def encode_json(obj) -> str:
    """What json.dumps(obj, ensure_ascii=False, separators=(",", ":")) writes."""
    if _C_ENCODE is None:
        return _PY_ENCODE(obj)
    return "".join(_C_ENCODE(obj, 0))


_ESC = json.encoder.encode_basestring  # what encode_json writes a string with (C where built)
_ANSWER = ("ok", "key", "level", "result")
_ANSWER_ROUTED = _ANSWER + ("terminals",)


def encode_answer(a) -> str:
    """An event's answer, {"ok": true, "key", "level", "result"[, "terminals": {one terminal: its outcome}]}, as
    encode_json writes it (tests/test_gateway_server.py compares them), from a template: the common answer without
    the encoder's per-call set-up. Anything else goes through encode_json."""
    if type(a) is dict:
        keys = tuple(a)
        # _ESC takes a str (a str enum's value too) and raises TypeError for anything else: then the encoder
        try:
            if keys == _ANSWER:
                ok, key, level, result = a.values()
                if ok is True:
                    return '{"ok":true,"key":%s,"level":%s,"result":%s}' % (_ESC(key), _ESC(level), _ESC(result))
            elif keys == _ANSWER_ROUTED:
                ok, key, level, result, terms = a.values()
                if ok is True and type(terms) is dict and len(terms) == 1:
                    ((name, fate),) = terms.items()
                    return '{"ok":true,"key":%s,"level":%s,"result":%s,"terminals":{%s:%s}}' % (
                        _ESC(key),
                        _ESC(level),
                        _ESC(result),
                        _ESC(name),
                        _ESC(fate),
                    )
        except TypeError:
            pass
    return encode_json(a)


_STATUS_LINE = {s.value: ("HTTP/1.1 %d %s\r\n" % (s.value, s.phrase)).encode() for s in http.HTTPStatus}
CONTINUE = _STATUS_LINE[100] + b"\r\n"
# the answer nearly every request gets (200, JSON, keep-alive): one bytes format, no join
_JSON_200 = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"


def encode(status, payload, close=False, ctype=JSON, extra=b"") -> bytes:
    """The whole answer: head and body. payload: bytes as they are, else JSON. close: the answer ends the connection
    (Connection: close). A 200 in JSON on a connection that stays open, with no extra field, is the plain 200:
    decided here and nowhere else."""
    body = payload if type(payload) is bytes else encode_answer(payload).encode("utf-8", "backslashreplace")
    if status == 200 and not close and ctype is JSON and not extra:
        return _JSON_200 % (len(body), body)
    line = _STATUS_LINE.get(status) or ("HTTP/1.1 %d %s\r\n" % (status, reason(status))).encode()
    return b"".join(
        (
            line,
            b"Content-Type: ",
            ctype,
            b"\r\nContent-Length: ",
            str(len(body)).encode(),
            b"\r\nConnection: close\r\n" if close else b"\r\n",
            extra,
            b"\r\n",
            body,
        )
    )


def refusal(status, code, message, *, close=True, extra=b"") -> bytes:
    """{"ok": false, "error": code, "message": message} with its status."""
    return encode(status, {"ok": False, "error": code, "message": message}, close, JSON, extra)
