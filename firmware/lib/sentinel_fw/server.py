# The HTTP server on microdot: the same endpoints as the emulator. Every signed POST goes through the core's
# Receiver (via Sentinel.handle_http) so the board and the emulator answer byte for byte alike.
#
# No route at all: microdot hands every request it finds no route for to the 404 error handler, and that handler is
# the one entry point; Sentinel.handle_http tells the endpoints apart (unknown paths and wrong methods, OPTIONS
# included, with the same JSON answers as the emulator). A route would hold a URL pattern, a compiled regex and a
# dict per path segment in the heap for good, and matching it built a match, an argument dict and keyword arguments
# in every request's largest step.
#
# The handler is a module-level `async def` function on purpose: microdot asks inspect.iscoroutinefunction()
# whether to await a handler, and MicroPython answers False for closures and bound methods, which then fail (500).
# So the running Sentinel is held in a module global (there is one terminal per board).
from microdot import Microdot, Request, Response

from sentinel_fw.app import log

JSON = "application/json"
TEXT = "text/plain; version=0.0.4; charset=utf-8"
TOO_LARGE = b'{"ok": false, "error": "too_large", "message": "body too large"}'

_sentinel = None


class _Answer(Response):
    """A response microdot writes as its own Response would, byte for byte, without its per-answer machinery.

    microdot's Response copies the headers into a case-insensitive dict with a lower-case key map, complete() looks
    names up through it (a new lower-case string per lookup), and write() formats each line through str.format and
    builds a class for the body's iterator: ~1 KB per answer, allocated between the handler and the first write,
    the request's largest step. Here the headers are a plain dict filled in microdot's order (Content-Type given,
    Content-Length added by Response.complete(), which works on a plain dict), so the lines come out in the order
    microdot writes them on each interpreter. microdot's TestClient reads status_code, reason, headers and
    body_iter(), all kept."""

    # microdot's type stubs declare a str reason, a NoCaseDict of headers and a bytes body; microdot itself takes
    # None (its default reason), a plain dict and a generator, hence the ignores.
    def __init__(self, body, status, ctype):
        self.status_code = status
        self.reason = None  # pyright: ignore[reportAttributeAccessIssue]
        self.headers = {"Content-Type": ctype}  # pyright: ignore[reportAttributeAccessIssue]
        self.body = body
        self.is_head = False

    async def write(self, stream):
        body = self.body
        try:
            await stream.awrite(b"HTTP/1.0 200 OK\r\n" if self.status_code == 200 else
                                ("HTTP/1.0 %d N/A\r\n" % self.status_code).encode())
            self.complete()  # after the status line: its Content-Length is not part of the handler's step
            h = self.headers
            for k in h:
                await stream.awrite(("%s: %s\r\n" % (k, h[k])).encode())
            await stream.awrite(b"\r\n")
            if self.is_head:
                return
            if isinstance(body, bytes):
                await stream.awrite(body)
                return
            # The status and metrics pages: a generator of text pieces, each written as it comes.
            for piece in body:  # pyright: ignore[reportGeneralTypeIssues]
                await stream.awrite(piece.encode())
        except OSError:
            pass  # the client has gone (reset, timeout): handle_request closes the connection next all the same
        finally:
            if not isinstance(body, bytes):
                body.close()  # its cleanup runs now (the metrics module is dropped), not whenever it is collected
            # What the request changed goes to flash once its answer is out (_any told handle_http to leave it): the
            # open file and the state's pieces no longer sit beside the request in its largest step. A failure is
            # logged and the connection still closed; the net task writes a dirty state again within half a second.
            try:
                _sentinel.persist()
            except Exception as e:  # noqa: BLE001
                log("writing the state failed: %s: %s" % (type(e).__name__, e))


# The status and metrics pages are generators of text pieces: microdot writes each piece as it comes (a response
# without Content-Length, over HTTP/1.0 and closed at the end, as every microdot response is), so the board never
# holds a whole page. handle_http answers the same documents in one piece.
async def _any(request, path=None):
    s = _sentinel
    p = request.path
    if request.method == "GET" or request.method == "HEAD":
        if p == "/api/v1/status":
            return _Answer(s.status_parts(s.clock.now()), 200, JSON)
        if p == "/metrics":
            return _Answer(s.metrics_parts(s.clock.now()), 200, TEXT)
    status, body = s.handle_http(request.method, p, request.headers, request.body or b"", False)
    return _Answer(body, status, JSON)


async def _too_large(request):
    return _Answer(TOO_LARGE, 413, JSON)


def make_app(sentinel, max_body=2048):
    """The microdot application serving sentinel (a sentinel_fw.app.Sentinel)."""
    global _sentinel
    _sentinel = sentinel
    # microdot refuses larger bodies itself (413) before they take heap; the Receiver checks its own limit too.
    Request.max_content_length = max_body
    Request.max_body_length = max_body
    web = Microdot()
    # OPTIONS too goes to handle_http, as the emulator sends it to the core: microdot's own answer would list the
    # methods of routes there are none of.
    web.options_handler = None  # pyright: ignore[reportAttributeAccessIssue]
    web.errorhandler(404)(_any)
    web.errorhandler(413)(_too_large)
    return web
