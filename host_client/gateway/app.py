"""The HTTP face of the gateway: a flask app factory, served by waitress (cli.py)."""

from __future__ import annotations

import json

from flask import Flask, Response

from .config import Config
from .ingest import BodyError, decode_body
from .service import Gateway

EXT = "sentinel_gateway"
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    503: "Service Unavailable",
}


def _json(status, obj):
    return Response(json.dumps(obj, ensure_ascii=False), status=status, mimetype="application/json")


def create_app(config, *, clients=None, start=True, gateway=None, on_delivered=None) -> Flask:
    """config: a Config (or a dict, validated the same way as the TOML file). clients: optional {terminal: client}
    replacing AlarmClient (tests). start: start the delivery workers now. on_delivered(terminal, item, ack): called
    after each delivery (tests, accounting)."""
    if isinstance(config, dict):
        config = Config.from_dict(config)
    gw = gateway or Gateway(config, clients=clients, on_delivered=on_delivered)
    app = Flask("sentinel_gateway")
    app.extensions[EXT] = gw
    limit = config.max_body

    @app.get("/healthz")
    def healthz():
        return _json(200, gw.health())

    @app.get("/metrics")
    def metrics():
        return Response(gw.metrics_text(), mimetype="text/plain; version=0.0.4")

    @app.errorhandler(404)
    def not_found(_e):
        return _json(404, {"ok": False, "error": "not_found", "message": "no such endpoint"})

    @app.errorhandler(405)
    def not_allowed(_e):
        return _json(405, {"ok": False, "error": "method_not_allowed", "message": "wrong method for this endpoint"})

    # The two ingest endpoints are the hot path of a storm: they are answered straight from WSGI, skipping flask's
    # request machinery (about a third of the per-request cost); everything else goes through flask.
    flask_wsgi = app.wsgi_app
    handlers = {
        "/api/v1/gpu_event": ("gpu_event", gw.gpu_event),
        "/api/v1/alertmanager": ("alertmanager", gw.alertmanager),
        "/api/v1/grafana": ("grafana", lambda body: gw.alertmanager(body, source="grafana")),
    }

    def ingest(source, handle, environ):
        if gw.auth_required:
            denied = gw.check_auth(source, environ.get("HTTP_AUTHORIZATION"))
            if denied is not None:
                return denied
        try:
            n = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            n = -1
        if n < 0 or n > limit:
            return gw.refuse(source, 413, "too_large", "body must be 0..%d bytes (Content-Length)" % limit)
        raw = environ["wsgi.input"].read(n) if n else b""
        try:
            obj = decode_body(raw)
        except BodyError as e:
            return gw.refuse(source, e.status, e.code, str(e))
        return handle(obj)

    def wsgi(environ, start_response):
        h = handlers.get(environ.get("PATH_INFO"))
        if h is None:
            return flask_wsgi(environ, start_response)
        if environ.get("REQUEST_METHOD") != "POST":
            status, answer = 405, {"ok": False, "error": "method_not_allowed", "message": "use POST"}
        else:
            status, answer = ingest(h[0], h[1], environ)
        out = json.dumps(answer, ensure_ascii=False).encode("utf-8", "backslashreplace")
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(out)))]
        if status == 405:
            headers.append(("Allow", "POST"))
        elif status == 401:
            headers.append(("WWW-Authenticate", 'Bearer realm="sentinel-gateway"'))
        start_response("%d %s" % (status, _REASONS.get(status, "Error")), headers)
        return [out]

    app.wsgi_app = wsgi
    if start:
        gw.start()
    return app


def gateway_of(app) -> Gateway:
    return app.extensions[EXT]
