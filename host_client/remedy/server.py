"""sentinel-remedy's HTTP front: a WSGI application served by waitress (no HTTP framing of ours). The signed
endpoints are answered by the core's Receiver, as a terminal answers an alarm; /healthz and /metrics are plain GETs.

POST /api/v1/incident       an incident from the gateway (feed.py), queued for the worker
POST /api/v1/resume         {"id", "node"}: the operator's resume (sentinel-remedy resume NODE)
POST /api/v1/reset_breaker  {"id"}: close the latched breaker (sentinel-remedy reset-breaker)
"""

from __future__ import annotations

import json
import time

from sentinel_core.errors import ProtocolError
from sentinel_core.keyring import KeyRing
from sentinel_core.receiver import Receiver, register

from .feed import MAX_BODY, PATH_INCIDENT, parse_incident

PATH_RESUME = "/api/v1/resume"
PATH_RESET = "/api/v1/reset_breaker"


def _parse_resume(obj):
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str) or not isinstance(obj.get("node"), str):
        raise ProtocolError(422, "bad_field", 'a resume is {"id": ..., "node": NODE}')
    if not 0 < len(obj["node"]) <= 64:
        raise ProtocolError(422, "bad_field", "node must be 1..64 characters")
    return obj


def _parse_reset(obj):
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise ProtocolError(422, "bad_field", 'a reset is {"id": ...}')
    return obj


register(PATH_INCIDENT, "incident", parse_incident)
register(PATH_RESUME, "resume", _parse_resume)
register(PATH_RESET, "reset_breaker", _parse_reset)


def make_app(remedy, cfg):
    receiver = Receiver(KeyRing({cfg.key_id: cfg.secret}), max_body=MAX_BODY)

    def app(environ, start_response):
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/")

        def answer(status, obj, ctype="application/json"):
            body = obj.encode() if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False).encode()
            reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large"}.get(status, "")
            start_response("%d %s" % (status, reason), [("Content-Type", ctype), ("Content-Length", str(len(body)))])
            return [body]

        if path == "/healthz" and method == "GET":
            h = remedy.health()
            return answer(200 if h["ok"] else 503, h)
        if path == "/metrics" and method == "GET":
            return answer(200, remedy.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return answer(400, {"ok": False, "error": "bad_length", "message": "Content-Length is not a number"})
        if length > MAX_BODY:
            r = receiver.too_large(length)
            return answer(r.status, r.answer)
        body = environ["wsgi.input"].read(length) if length else b""
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
        if environ.get("CONTENT_TYPE"):
            headers["content-type"] = environ["CONTENT_TYPE"]
        r = receiver.handle(method, path, headers, body, time.time(), commit=False)
        if r.status != 200 or r.duplicate or r.payload is None:
            return answer(r.status, r.answer)
        if path == PATH_INCIDENT:
            remedy.submit(r.payload["incident"])
            receiver.commit(r)
            return answer(200, {"ok": True, "queued": True, "mode": cfg.mode})
        if path == PATH_RESUME:
            ok, message = remedy.resume(r.payload["node"])
        elif path == PATH_RESET:
            ok, message = remedy.reset_breaker()
        else:
            return answer(404, {"ok": False, "error": "not_found", "message": "no such endpoint"})
        receiver.commit(r)
        return answer(200, {"ok": ok, "message": message})

    return app
