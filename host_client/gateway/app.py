"""The HTTP face of the gateway: a flask app factory, served by waitress (cli.py)."""

from __future__ import annotations

import json

from flask import Flask, Response, request

from .config import Config
from .service import Gateway

EXT = "sentinel_gateway"


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

    def body():
        n = request.content_length
        if n is not None and n > limit:
            return None, _json(413, {"ok": False, "error": "too_large",
                                     "message": "body is %d bytes, at most %d" % (n, limit)})
        raw = request.get_data(cache=False)
        if len(raw) > limit:
            return None, _json(413, {"ok": False, "error": "too_large", "message": "body over %d bytes" % limit})
        try:
            return json.loads(raw.decode("utf-8")), None
        except UnicodeDecodeError:
            return None, _json(400, {"ok": False, "error": "bad_encoding", "message": "body is not valid UTF-8"})
        except ValueError as e:
            return None, _json(400, {"ok": False, "error": "bad_json", "message": "malformed JSON: %s" % e})

    @app.post("/api/v1/gpu_event")
    def gpu_event():
        obj, err = body()
        if err is not None:
            gw._count(gw.rejected, ("gpu_event", "bad_json"))
            return err
        status, answer = gw.gpu_event(obj)
        return _json(status, answer)

    @app.post("/api/v1/alertmanager")
    def alertmanager():
        obj, err = body()
        if err is not None:
            gw._count(gw.rejected, ("alertmanager", "bad_json"))
            return err
        status, answer = gw.alertmanager(obj)
        return _json(status, answer)

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

    if start:
        gw.start()
    return app


def gateway_of(app) -> Gateway:
    return app.extensions[EXT]
