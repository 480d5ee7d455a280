"""The emulator's HTTP face: a flask app whose signed endpoints are answered by the core's Receiver (through the
engine thread), plus the unsigned status, metrics and snapshot pages. Served by waitress, never flask's dev server.
"""

import json
import threading

from flask import Flask, Response, request

from emulator import page
from emulator.metrics import render_metrics

# A body larger than this is not read at all; the core refuses anything over its own max_body (2 KB) with 413.
READ_LIMIT = 64 * 1024
_JSON = "application/json"


def _answer(status, obj):
    return Response(json.dumps(obj, ensure_ascii=False), status=status, mimetype=_JSON)


def create_app(cfg, engine=None):
    """The flask app for one terminal. engine: a started emulator.engine.Engine; None builds a headless one
    (no voice) and starts it, for callers that only want the HTTP terminal."""
    if engine is None:
        from emulator.engine import Engine  # noqa: PLC0415

        engine = Engine(cfg).start()
    app = Flask("sentinel_emulator")
    app.config["MAX_CONTENT_LENGTH"] = None
    app.extensions["sentinel_engine"] = engine
    max_body = engine.receiver.max_body

    @app.route("/api/v1/status", methods=["GET"])
    def status():
        view = engine.view
        if view is None:
            return _answer(503, {"ok": False, "error": "starting", "message": "the terminal is starting"})
        snap = dict(view.snapshot)
        snap["emulator"] = {"voice": view.voice, "frame": view.frame.seq if view.frame else None,
                            "width": engine.width, "height": engine.height, "engine_error": engine.error}
        return _answer(200, snap)

    @app.route("/metrics", methods=["GET"])
    def metrics():
        body = render_metrics(engine)
        return Response(body, status=200, mimetype="text/plain", content_type="text/plain; version=0.0.4")

    @app.route("/snapshot.png", methods=["GET"])
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

    @app.route("/", methods=["GET"])
    def index():
        return _raw(page.index(ui_token, request.remote_addr, request.headers.get("Host"), cfg.get("host")))

    @app.route("/ui/view.json", methods=["GET"])
    def ui_view():
        return _raw(page.view(engine))

    @app.route("/ui/press", methods=["POST"])
    def ui_press():
        body = request.stream.read(page.MAX_PRESS_BODY + 1)
        return _raw(page.press(engine, ui_token, dict(request.headers.items()), body, cfg.get("host"),
                               lambda kind: ui_act(engine, kind)))

    @app.route("/api/v1/<path:rest>", methods=["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
    def core(rest):
        # Everything else under /api/v1 is the core's to answer (including its 404 and 405).
        length = request.content_length
        if length is not None and length > READ_LIMIT:
            body = b"x" * (max_body + 1)  # not read: the core refuses it by its size alone
        else:
            body = request.stream.read(READ_LIMIT + 1)
        headers = dict(request.headers.items())
        if not engine.alive:
            return _answer(503, {"ok": False, "error": "engine_down",
                                 "message": "the terminal's engine has stopped; restart the emulator"})
        result = engine.handle_request(request.method, "/api/v1/" + rest, headers, body)
        if result is None:
            return _answer(503, {"ok": False, "error": "busy",
                                 "message": "the terminal did not answer in time; retry"})
        return Response(result.body_bytes(), status=result.status, mimetype=_JSON)

    @app.errorhandler(404)
    def not_found(_e):
        return _answer(404, {"ok": False, "error": "not_found", "message": "no such endpoint"})

    @app.errorhandler(405)
    def not_allowed(_e):
        return _answer(405, {"ok": False, "error": "method_not_allowed", "message": "method not allowed here"})

    return app


def ui_act(engine, kind):
    """A press from the browser page, applied in the engine thread as the window's button applies it."""
    engine.press_event(kind)


class Server:
    """waitress serving the app in a background thread; port 0 picks a free port (tests)."""

    def __init__(self, app, host, port, threads=8):
        from waitress.server import create_server  # noqa: PLC0415

        self.server = create_server(app, host=host, port=port, threads=threads, ident="gpu-sentinel-emulator",
                                    channel_timeout=30, connection_limit=200, clear_untrusted_proxy_headers=True)
        self.host = host
        self.port = int(self.server.effective_port)
        self._thread = None
        self._stopped = False

    @property
    def url(self):
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "http://%s:%d" % (host, self.port)

    def start(self):
        self._thread = threading.Thread(target=self.server.run, name="waitress", daemon=True)
        self._thread.start()
        return self

    def run(self):
        self.server.run()

    def stop(self):
        srv = self.server

        def close_all():
            # Runs inside waitress's loop thread: closing there (not from here) avoids a select() on a closed fd;
            # with its map empty the loop returns.
            for obj in list(srv._map.values()):
                try:
                    obj.close()
                except OSError:
                    pass

        if self._stopped:
            return
        self._stopped = True
        # The requests in progress finish first: a waitress worker wakes the loop through the trigger when its task
        # ends, and a trigger closed under it is a write to a closed (or, worse, reused) file descriptor (seen as
        # an EBADF in a test's teardown).
        srv.task_dispatcher.shutdown(timeout=2)
        if self._thread is not None and self._thread.is_alive():
            srv.trigger.pull_trigger(close_all)
            self._thread.join(2.0)
        else:
            close_all()
