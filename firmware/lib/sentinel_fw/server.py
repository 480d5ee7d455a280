# The HTTP server on microdot: the same endpoints as the emulator. Every signed POST goes through the core's
# Receiver (via Sentinel.handle_http) so the board and the emulator answer byte for byte alike.
from microdot import Microdot, Request, Response

JSON = {"Content-Type": "application/json"}
SIGNED = ("/api/v1/send_msg", "/api/v1/ack", "/api/v1/heartbeat")


def make_app(sentinel, max_body=2048):
    # microdot refuses larger bodies itself (413) before they take heap; the Receiver checks its own limit too.
    Request.max_content_length = max_body
    Request.max_body_length = max_body
    web = Microdot()

    async def signed(request):
        status, body = sentinel.handle_http(request.method, request.path, request.headers, request.body or b"")
        return Response(body, status, JSON)

    for path in SIGNED:
        web.route(path, methods=["POST", "GET", "PUT", "DELETE"])(signed)

    @web.get("/api/v1/status")
    async def status(request):
        status_code, body = sentinel.handle_http("GET", "/api/v1/status", request.headers, b"")
        return Response(body, status_code, JSON)

    @web.errorhandler(404)
    async def not_found(request):
        return Response(b'{"ok": false, "error": "not_found", "message": "no such endpoint"}', 404, JSON)

    @web.errorhandler(413)
    async def too_large(request):
        return Response(b'{"ok": false, "error": "too_large", "message": "body too large"}', 413, JSON)

    return web
