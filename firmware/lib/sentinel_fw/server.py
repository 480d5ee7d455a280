# The HTTP server on microdot: the same endpoints as the emulator. Every signed POST goes through the core's
# Receiver (via Sentinel.handle_http) so the board and the emulator answer byte for byte alike.
#
# One route takes every path and Sentinel.handle_http tells the endpoints apart (unknown paths and wrong methods
# included, with the same JSON answers): each microdot route holds a URL pattern, a compiled regex and a dict per
# path segment in the heap for good, and is tried against every request.
#
# The handler is a module-level `async def` function on purpose: microdot asks inspect.iscoroutinefunction()
# whether to await a handler, and MicroPython answers False for closures and bound methods, which then fail (500).
# So the running Sentinel is held in a module global (there is one terminal per board).
from microdot import Microdot, Request, Response

JSON = {"Content-Type": "application/json"}
TEXT = {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
NOT_FOUND = b'{"ok": false, "error": "not_found", "message": "no such endpoint"}'
TOO_LARGE = b'{"ok": false, "error": "too_large", "message": "body too large"}'
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH"]

_sentinel = None


# The status and metrics pages are generators of text pieces: microdot writes each piece as it comes (a response
# without Content-Length, over HTTP/1.0 and closed at the end, as every microdot response is), so the board never
# holds a whole page. handle_http answers the same documents in one piece.
async def _any(request, path=None):
    s = _sentinel
    p = request.path
    if request.method == "GET" or request.method == "HEAD":
        if p == "/api/v1/status":
            return Response(s.status_parts(s.clock.now()), 200, JSON)  # pyright: ignore[reportArgumentType]
        if p == "/metrics":
            return Response(s.metrics_parts(s.clock.now()), 200, TEXT)  # pyright: ignore[reportArgumentType]
    status, body = s.handle_http(request.method, p, request.headers, request.body or b"")
    return Response(body, status, JSON)


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
    web.route("/<path:path>", methods=METHODS)(_any)
    web.errorhandler(404)(_not_found)  # "/" alone, which no pattern with a segment matches
    web.errorhandler(413)(_too_large)
    return web
