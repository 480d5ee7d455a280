"""The emulator's HTTP face: a flask app whose signed endpoints are answered by the core's Receiver (through the
engine thread), plus the unsigned status, metrics and snapshot pages. Served by emulator.front (the core's request
grammar, deadlines and a connection bound that sheds the oldest slow socket), never flask's dev server.

Paths are routed as sent: no merged slashes (no 308 for //send_msg), no decoding, no automatic OPTIONS answers;
what the board answers 405 (POST /api/v1/status, PUT /metrics) is 405 here too.
"""

import json

from flask import Flask, Response, request

from emulator import page
from emulator.front import Front
from emulator.metrics import render_metrics
from sentinel_core.receiver import ENDPOINTS

# A body larger than this is not read at all; the core refuses anything over its own max_body (2 KB) with 413.
READ_LIMIT = 64 * 1024
_JSON = "application/json"
_ALL = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
# The board's bytes for a wrong method on its unsigned pages (sentinel_fw.app.handle_http).
_USE_GET = b'{"ok": false, "error": "method_not_allowed", "message": "use GET"}'


def _answer(status, obj):
    return Response(json.dumps(obj, ensure_ascii=False), status=status, mimetype=_JSON)


def create_app(cfg, engine=None):
    """The flask app for one terminal. engine: a started emulator.engine.Engine; None builds a headless one
    (no voice) and starts it, for callers that only want the HTTP terminal."""
    if engine is None:
        from emulator.engine import Engine

        engine = Engine(cfg).start()
    app = Flask("sentinel_emulator")
    app.url_map.merge_slashes = False
    app.url_map.strict_slashes = False
    app.config["MAX_CONTENT_LENGTH"] = None
    app.extensions["sentinel_engine"] = engine
    max_body = engine.receiver.max_body

    def use_get():
        return Response(_USE_GET, status=405, mimetype=_JSON)

    @app.route("/api/v1/status", methods=_ALL, provide_automatic_options=False)
    def status():
        if request.method not in ("GET", "HEAD"):
            return use_get()
        view = engine.view
        if view is None:
            return _answer(503, {"ok": False, "error": "starting", "message": "the terminal is starting"})
        snap = dict(view.snapshot)
        snap["emulator"] = {
            "voice": view.voice,
            "frame": view.frame.seq if view.frame else None,
            "width": engine.width,
            "height": engine.height,
            "engine_error": engine.error,
        }
        return _answer(200, snap)

    @app.route("/metrics", methods=_ALL, provide_automatic_options=False)
    def metrics():
        if request.method not in ("GET", "HEAD"):
            return use_get()
        body = render_metrics(engine)
        return Response(body, status=200, mimetype="text/plain", content_type="text/plain; version=0.0.4")

    @app.route("/snapshot.png", methods=["GET"], provide_automatic_options=False)
    def snapshot():
        view = engine.view
        if view is None or view.frame is None:
            return _answer(503, {"ok": False, "error": "starting", "message": "no frame rendered yet"})
        try:
            scale = int(request.args.get("scale", "16"))
        except ValueError:
            return _answer(400, {"ok": False, "error": "bad_query", "message": "scale must be an integer 1..64"})
        if not 1 <= scale <= 64:
            return _answer(400, {"ok": False, "error": "bad_query", "message": "scale must be an integer 1..64"})
        return Response(view.frame.png(scale), status=200, mimetype="image/png")

    # The terminal in a browser tab (emulator/page.py: the page, and who may press its buttons).
    ui_token = page.new_token()
    app.extensions["sentinel_ui_token"] = ui_token

    def _raw(answer):
        status, ctype, body = answer
        return Response(body, status=status, content_type=ctype, headers={"Cache-Control": "no-store"})

    @app.route("/", methods=["GET"], provide_automatic_options=False)
    def index():
        return _raw(page.index(ui_token, request.remote_addr, request.headers.get("Host"), cfg.get("host")))

    @app.route("/ui/view.json", methods=["GET"])
    def ui_view():
        return _raw(page.view(engine))

    @app.route("/ui/press", methods=["POST"])
    def ui_press():
        body = request.stream.read(page.MAX_PRESS_BODY + 1)
        return _raw(
            page.press(
                engine,
                ui_token,
                dict(request.headers.items()),
                body,
                configured_host=cfg.get("host"),
                act=lambda kind: ui_act(engine, kind),
            )
        )

    @app.route("/api/v1/<path:rest>", methods=_ALL, provide_automatic_options=False)
    def core(rest):
        # Everything else under /api/v1 is the core's to answer (including its 404 and 405).
        length = request.content_length
        if length is not None and length > READ_LIMIT:
            # not read (emulator.front): refused by its size alone, and counted through the glue
            result = engine.refused(engine.receiver.too_large(length))
            return Response(result.body_bytes(), status=result.status, mimetype=_JSON)
        body = request.stream.read(READ_LIMIT + 1)
        headers = dict(request.headers.items())
        if not engine.alive:
            return _answer(
                503,
                {
                    "ok": False,
                    "error": "engine_down",
                    "message": "the terminal's engine has stopped; restart the emulator",
                },
            )
        result = engine.handle_request(request.method, "/api/v1/" + rest, headers, body)
        if result is None:
            return _answer(503, {"ok": False, "error": "busy", "message": "the terminal did not answer in time; retry"})
        return Response(result.body_bytes(), status=result.status, mimetype=_JSON)

    routed = app.wsgi_app

    def as_sent(environ, start_response):
        # werkzeug strips the leading slashes of a path (//api/v1/send_msg would reach send_msg); the board routes
        # the path as sent, where a doubled slash is no endpoint.
        path = environ.get("PATH_INFO", "")
        if "//" in path:
            return _raw_answer(start_response, "404 Not Found", "not_found", "no such endpoint")
        # A body over the limit is not read (emulator.front): a POST to a signed endpoint goes on to the core, which
        # refuses it by its size (and counts it); anything else is refused here, as the board refuses any such head.
        length = environ.get("CONTENT_LENGTH")
        if length and int(length) > max_body and not (environ["REQUEST_METHOD"] == "POST" and path in ENDPOINTS):
            result = engine.refused(engine.receiver.too_large(int(length)))
            return _raw_answer(start_response, "413 Content Too Large", "too_large", result.answer["message"])
        return routed(environ, start_response)

    app.wsgi_app = as_sent

    @app.errorhandler(404)
    def not_found(_e):
        return _answer(404, {"ok": False, "error": "not_found", "message": "no such endpoint"})

    @app.errorhandler(405)
    def not_allowed(_e):
        return _answer(405, {"ok": False, "error": "method_not_allowed", "message": "method not allowed here"})

    return app


def _raw_answer(start_response, status, code, message):
    body = json.dumps({"ok": False, "error": code, "message": message}).encode()
    start_response(status, [("Content-Type", _JSON), ("Content-Length", str(len(body)))])
    return [body]


def ui_act(engine, kind):
    """A press from the browser page, applied in the engine thread as the window's button applies it."""
    engine.press_event(kind, by="page")


class Server:
    """The app behind emulator.front.Front in a background thread; port 0 picks a free port (tests).
    max_connections and the deadlines are Front's (docs/EMULATOR.md). The port is bound at construction; app may
    be None then and mount()ed before start(), so the CLI binds before it builds anything that writes state."""

    def __init__(self, app, host, port, threads=8, **front):
        front.setdefault("max_body", READ_LIMIT)
        self.front = Front(app, host, port, threads=threads, **front)
        self.host = host
        self.port = self.front.port

    @property
    def url(self):
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "http://%s:%d" % (host, self.port)

    def mount(self, app):
        self.front.app = app
        return self

    def start(self):
        self.front.start()
        return self

    def run(self):
        self.front.run()

    def stop(self):
        self.front.stop()
