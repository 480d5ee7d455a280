# The HTTP server on microdot: the same endpoints as the emulator. Every signed POST goes through the core's
# Receiver (via Sentinel.handle_http) so the board and the emulator answer byte for byte alike.
#
# The handlers are module-level `async def` functions on purpose: microdot asks inspect.iscoroutinefunction()
# whether to await a handler, and MicroPython answers False for closures and bound methods, which then fail (500).
# So the running Sentinel is held in a module global (there is one terminal per board).
from microdot import Microdot, Request, Response

JSON = {"Content-Type": "application/json"}
TEXT = {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
SIGNED = ("/api/v1/send_msg", "/api/v1/ack", "/api/v1/heartbeat")
NOT_FOUND = b'{"ok": false, "error": "not_found", "message": "no such endpoint"}'
TOO_LARGE = b'{"ok": false, "error": "too_large", "message": "body too large"}'

_sentinel = None


async def _signed(request):
    status, body = _sentinel.handle_http(request.method, request.path, request.headers, request.body or b"")
    return Response(body, status, JSON)


# The status and metrics pages are generators of text pieces: microdot writes each piece as it comes (a response
# without Content-Length, over HTTP/1.0 and closed at the end, as every microdot response is), so the board never
# holds a whole page. handle_http answers the same documents in one piece.
async def _status(request):
    if request.method != "GET":
        status, body = _sentinel.handle_http(request.method, "/api/v1/status", request.headers, b"")
        return Response(body, status, JSON)
    return Response(_sentinel.status_parts(_sentinel.clock.now()), 200, JSON)  # pyright: ignore[reportArgumentType]


async def _metrics(request):
    from sentinel_fw import metrics
    return Response(metrics.parts(_sentinel, _sentinel.clock.now()), 200, TEXT)  # pyright: ignore[reportArgumentType]


async def _not_found(request):
    return Response(NOT_FOUND, 404, JSON)


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
    for path in SIGNED:
        web.route(path, methods=["POST", "GET", "PUT", "DELETE"])(_signed)
    web.route("/api/v1/status", methods=["GET", "POST"])(_status)
    web.route("/metrics", methods=["GET"])(_metrics)
    web.errorhandler(404)(_not_found)
    web.errorhandler(413)(_too_large)
    return web
