"""The gateway's own HTTP front: asyncio (uvloop when installed), HTTP/1.1 keep-alive, written for the ingest path.

Why not waitress: profiled under the storm (bench/bench_gateway_rfc.py, py-spy), waitress spent about 170 us of
CPU per request in its own dispatch (task queue, thread hand-off, WSGI environ) before the gateway did anything,
three times the gateway's own work, and per request it reached 0.4-0.6x the RFC's Go gateway. Here a request is
parsed from the connection's buffer in the event loop and handed straight to the Gateway: no thread hand-off, no
environ, one write per answer.

Durability is kept: an event that created an alarm is answered only once that alarm is on disk. The handler runs
in the loop, collects the (persister, gen) it must wait for, and the answer is sent when the persister's thread
reports the write (Persister.add_waiter), or 503 if it fails or takes longer than persist_wait_s. Requests of one
connection are answered in order; other connections go on meanwhile.

Endpoints: POST /api/v1/gpu_event, /api/v1/alertmanager, /api/v1/grafana; GET /healthz, /metrics. Limits: headers
16 KiB (431), body gateway.max_body (413, Content-Length required: 411 for chunked), idle keep-alive 60 s.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import time

from .ingest import BodyError, decode_body

log = logging.getLogger("sentinel.gateway")

MAX_HEAD = 16384
IDLE_S = 60.0
_REASONS = {100: "Continue", 200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            411: "Length Required", 413: "Payload Too Large", 422: "Unprocessable Entity",
            431: "Request Header Fields Too Large", 503: "Service Unavailable"}
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode   # built once, not per answer
_STATUS_LINE = {code: ("HTTP/1.1 %d %s\r\n" % (code, reason)).encode() for code, reason in _REASONS.items()}


def _head(status, ctype, n, close=False, extra=b""):
    line = _STATUS_LINE.get(status) or ("HTTP/1.1 %d Error\r\n" % status).encode()
    return b"".join((line, b"Content-Type: ", ctype, b"\r\nContent-Length: ", str(n).encode(),
                     b"\r\nConnection: close\r\n" if close else b"\r\n", extra, b"\r\n"))


class _Conn(asyncio.Protocol):
    __slots__ = ("front", "transport", "buf", "busy", "closing", "last")

    def __init__(self, front):
        self.front = front
        self.transport = None
        self.buf = bytearray()
        self.busy = False          # an answer is waiting for its alarm to reach the disk
        self.closing = False
        self.last = time.monotonic()

    def connection_made(self, transport):
        self.transport = transport
        self.front.conns.add(self)

    def connection_lost(self, exc):
        self.front.conns.discard(self)
        self.closing = True

    def data_received(self, data):
        self.last = time.monotonic()
        self.buf += data
        if not self.busy:
            self._process()

    def _process(self):
        buf = self.buf
        while buf and not self.busy and not self.closing:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    self._fail(431, "request_header_too_large", "request head over %d bytes" % MAX_HEAD)
                return
            if end > MAX_HEAD:
                self._fail(431, "request_header_too_large", "request head over %d bytes" % MAX_HEAD)
                return
            head = bytes(buf[:end]).decode("latin-1")
            nl = head.find("\r\n")
            parts = (head if nl < 0 else head[:nl]).split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                self._fail(400, "bad_request", "malformed request line")
                return
            method, target, version = parts
            # the few headers that matter, found in one lower-cased copy of the head instead of a loop per line
            low = head.lower()
            length = 0
            i = low.find("\r\ncontent-length:")
            if i >= 0:
                j = low.find("\r\n", i + 17)
                v = low[i + 17:j if j >= 0 else len(low)].strip()
                if not v.isdigit():
                    self._fail(400, "bad_request", "Content-Length must be a number")
                    return
                length = int(v)
            if "\r\ntransfer-encoding:" in low:
                self._fail(411, "length_required", "send the body with a Content-Length, not chunked")
                return
            if version == "HTTP/1.0":
                close = "\r\nconnection: keep-alive" not in low
            else:
                close = "\r\nconnection: close" in low
            expect = "\r\nexpect: 100-continue" in low
            if length > self.front.max_body:
                self._fail(413, "too_large", "body must be 0..%d bytes (Content-Length)" % self.front.max_body,
                           source=self.front.source_of(target))
                return
            total = end + 4 + length
            if len(buf) < total:
                if expect and len(buf) == end + 4:
                    self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return
            body = bytes(buf[end + 4:total])
            del buf[:total]
            self.front.handle(self, method, target.split("?", 1)[0], body, close)

    def answer(self, status, payload, close=False, ctype=b"application/json", extra=b""):
        if self.closing:
            return
        out = payload if isinstance(payload, bytes) else _ENCODE(payload).encode("utf-8", "backslashreplace")
        self.transport.write(_head(status, ctype, len(out), close, extra) + out)
        if close:
            self.closing = True
            self.transport.close()

    def resume(self):
        self.busy = False
        if self.buf and not self.closing:
            self._process()

    def _fail(self, status, code, message, source=None):
        if source is not None:
            status, answer = self.front.gw.refuse(source, status, code, message)
        else:
            answer = {"ok": False, "error": code, "message": message}
        self.buf.clear()
        self.answer(status, answer, close=True)


class IngestFront:
    """Serves one Gateway over asyncio. run() blocks until stop() (or SIGTERM handled by the caller)."""

    def __init__(self, gw, config):
        self.gw = gw
        self.cfg = config
        self.max_body = config.max_body
        self.conns = set()
        self.loop = None
        self.server = None
        self.port = None
        self._stopped = None
        self.ingest = {"/api/v1/gpu_event": ("gpu_event", lambda b, w: gw.gpu_event(b, waits=w)),
                       "/api/v1/alertmanager": ("alertmanager", lambda b, w: gw.alertmanager(b, waits=w)),
                       "/api/v1/grafana": ("grafana", lambda b, w: gw.alertmanager(b, source="grafana", waits=w))}

    def source_of(self, path):
        h = self.ingest.get(path.split("?", 1)[0])
        return h[0] if h else None

    # ---- requests -----------------------------------------------------------------------------------------

    def handle(self, conn, method, path, body, close):
        h = self.ingest.get(path)
        if h is not None:
            if method != "POST":
                conn.answer(405, {"ok": False, "error": "method_not_allowed", "message": "use POST"}, close,
                            extra=b"Allow: POST\r\n")
                return
            source, fn = h
            try:
                obj = decode_body(body)
            except BodyError as e:
                status, answer = self.gw.refuse(source, e.status, e.code, str(e))
                conn.answer(status, answer, close)
                return
            waits = []
            try:
                status, answer = fn(obj, waits)
            except Exception as e:  # noqa: BLE001 - one bad request must not take the server down
                log.exception("ingest_error", extra={"fields": {"source": source, "error": str(e)}})
                conn.answer(500, {"ok": False, "error": "internal", "message": "internal error"}, close)
                return
            if not waits:
                conn.answer(status, answer, close)
                return
            self._after_durable(conn, source, status, answer, close, waits)
            return
        if path == "/healthz" and method == "GET":
            conn.answer(200, self.gw.health(), close)
        elif path == "/metrics" and method == "GET":
            conn.answer(200, self.gw.metrics_text().encode(), close, ctype=b"text/plain; version=0.0.4")
        elif path in ("/healthz", "/metrics"):
            conn.answer(405, {"ok": False, "error": "method_not_allowed", "message": "use GET"}, close,
                        extra=b"Allow: GET\r\n")
        else:
            conn.answer(404, {"ok": False, "error": "not_found", "message": "no such endpoint"}, close)

    def _after_durable(self, conn, source, status, answer, close, waits):
        """Answer once every (persister, gen) is on disk; 503 if one fails or takes over persist_wait_s."""
        conn.busy = True
        loop = self.loop
        state = {"left": len(waits), "done": False}

        def finish(ok):
            if state["done"]:
                return
            if not ok:
                state["done"] = True
                timer.cancel()
                st, ans = self.gw.not_durable_answer(source)
                conn.answer(st, ans, close)
                conn.resume()
                return
            state["left"] -= 1
            if state["left"] == 0:
                state["done"] = True
                timer.cancel()
                conn.answer(status, answer, close)
                conn.resume()

        def from_thread(ok):
            loop.call_soon_threadsafe(finish, ok)

        timer = loop.call_later(self.cfg.persist_wait_s, finish, False)
        for p, gen in waits:
            p.add_waiter(gen, from_thread)

    # ---- lifecycle ----------------------------------------------------------------------------------------

    async def _main(self, host, port, ready=None):
        self.loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self.server = await self.loop.create_server(lambda: _Conn(self), host, port, backlog=1024,
                                                    reuse_address=True)
        self.port = self.server.sockets[0].getsockname()[1]
        if ready is not None:
            ready()
        sweeper = self.loop.create_task(self._sweep())
        try:
            await self._stopped.wait()
        finally:
            sweeper.cancel()
            self.server.close()
            for c in list(self.conns):
                if c.transport is not None:
                    c.transport.close()
            await self.server.wait_closed()

    async def _sweep(self):
        while True:
            await asyncio.sleep(10)
            limit = time.monotonic() - IDLE_S
            for c in list(self.conns):
                if c.last < limit and not c.busy and c.transport is not None:
                    c.transport.close()

    def run(self, host, port, ready=None):
        # Everything built at start lives to the end: out of the collector's way, and collections rarer, since a
        # request allocates a few hundred short-lived objects and creates no cycles
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 20, 50)
        try:
            import uvloop
        except ImportError:
            uvloop = None
        if uvloop is not None:
            uvloop.run(self._main(host, port, ready))
        else:
            asyncio.run(self._main(host, port, ready))

    def stop(self):
        if self.loop is not None and self._stopped is not None:
            self.loop.call_soon_threadsafe(self._stopped.set)
