# The HTTP server on microdot: the same endpoints as the emulator. Every request goes to Sentinel.handle_http, the
# core's Receiver for the signed POSTs, so the board and the emulator answer byte for byte alike; wrong methods
# (OPTIONS included) and unknown paths get the core's JSON answers too.
#
# The handlers are module-level `async def` functions on purpose: microdot asks inspect.iscoroutinefunction()
# whether to await a handler, and MicroPython answers False for closures and bound methods, which then fail (500).
# So the running Sentinel is held in a module global (there is one terminal per board).
from microdot import Microdot, Request, Response

from sentinel_fw.app import log

JSON = {"Content-Type": "application/json"}
TEXT = {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
PATHS = ("/api/v1/send_msg", "/api/v1/ack", "/api/v1/heartbeat", "/api/v1/status", "/metrics")
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
TOO_LARGE = b'{"ok": false, "error": "too_large", "message": "body too large"}'

_sentinel = None


class _Answer(Response):
    """microdot's Response, and once it has been written, what the request changed goes to flash: the open file and
    the state's pieces then no longer sit beside the request in its largest step. A failure is logged and the
    connection still closed; the net task writes a dirty state again within half a second."""

    async def write(self, stream):
        try:
            await Response.write(self, stream)
        finally:
            try:
                _sentinel.persist()
            except Exception as e:  # noqa: BLE001
                log("writing the state failed: %s: %s" % (type(e).__name__, e))


# The status and metrics pages are generators of text pieces: microdot writes each piece as it comes (a response
# without Content-Length, over HTTP/1.0 and closed at the end, as every microdot response is), so the board never
# holds a whole page. handle_http answers the same documents in one piece.
async def _endpoint(request):
    s = _sentinel
    p = request.path
    if request.method == "GET" or request.method == "HEAD":  # microdot sends no body for a HEAD
        if p == "/api/v1/status":
            return Response(s.status_parts(s.clock.now()), 200, JSON)
        if p == "/metrics":
            return Response(s.metrics_parts(s.clock.now()), 200, TEXT)
    status, body = s.handle_http(request.method, p, request.headers, request.body or b"", False)
    return _Answer(body, status, JSON)


async def _too_large(request):
    return Response(TOO_LARGE, 413, JSON)


def make_app(sentinel, max_body=2048):
    """The microdot application serving sentinel (a sentinel_fw.app.Sentinel)."""
    global _sentinel
    _sentinel = sentinel
    # microdot refuses larger bodies itself (413) before they take heap; the Receiver checks its own limit too.
    Request.max_content_length = max_body
    Request.max_body_length = max_body
    web = Microdot()
    # OPTIONS goes to the routes like any method, as the emulator sends it to the core: microdot's own answer
    # would list methods instead of the core's 405.
    web.options_handler = None  # pyright: ignore[reportAttributeAccessIssue]
    for path in PATHS:
        web.route(path, methods=METHODS)(_endpoint)
    web.errorhandler(404)(_endpoint)
    web.errorhandler(413)(_too_large)
    return web
