"""The gateway's own HTTP front: asyncio on uvloop (the gateway extra), HTTP/1.1 keep-alive, for the ingest path.

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
import os
import time

import uvloop  # the gateway extra; its loop does the socket work in C

from .ingest import BodyError, decode_body

log = logging.getLogger("sentinel.gateway")

MAX_HEAD = 16384
IDLE_S = 60.0
_REASONS = {100: "Continue", 200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed",
            411: "Length Required", 413: "Payload Too Large", 422: "Unprocessable Entity",
            431: "Request Header Fields Too Large", 503: "Service Unavailable"}


def _no_default(o):
    raise TypeError("%s is not JSON serializable" % type(o).__name__)


# The C encoder, built once and called directly: JSONEncoder.encode builds a closure and a chunk list per call, a
# fifth of an answer's cost. No circular-reference markers: an answer is a fresh tree of dicts, lists and scalars.
_C_ENCODE = json.encoder.c_make_encoder(None, _no_default, json.encoder.encode_basestring, None, ":", ",", False,
                                        False, True) if json.encoder.c_make_encoder else None
_PY_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _ENCODE(obj) -> str:  # noqa: N802 - a constant-like callable, as before
    if _C_ENCODE is None:
        return _PY_ENCODE(obj)
    return "".join(_C_ENCODE(obj, 0))


WWW_AUTH = b'WWW-Authenticate: Bearer realm="sentinel-gateway"\r\n'
_STATUS_LINE = {code: ("HTTP/1.1 %d %s\r\n" % (code, reason)).encode() for code, reason in _REASONS.items()}


_JSON = b"application/json"
# the answer nearly every request gets (200, JSON, keep-alive): one bytes format, no join
_JSON_200 = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"


def _head(status, ctype, n, *, close=False, extra=b""):
    line = _STATUS_LINE.get(status) or ("HTTP/1.1 %d Error\r\n" % status).encode()
    return b"".join((line, b"Content-Type: ", ctype, b"\r\nContent-Length: ", str(n).encode(),
                     b"\r\nConnection: close\r\n" if close else b"\r\n", extra, b"\r\n"))


class _Conn(asyncio.Protocol):
    __slots__ = ("front", "home", "transport", "buf", "busy", "closing", "last", "fd")

    def __init__(self, front, home):
        self.front = front
        self.home = home           # the _Loop whose thread serves this connection
        self.transport = None
        self.fd = -1               # the socket, for answers sent with the GIL released (_write)
        self.buf = bytearray()
        self.busy = False          # an answer is waiting for its alarm to reach the disk
        self.closing = False
        self.last = time.monotonic()

    def connection_made(self, transport):
        self.transport = transport
        self.home.conns.add(self)
        sock = transport.get_extra_info("socket")
        self.fd = sock.fileno() if sock is not None else -1

    def connection_lost(self, exc):
        self.home.conns.discard(self)
        self.closing = True
        self.fd = -1

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
            # bytes throughout: one copy of the head, one lower-cased copy to find the few headers that matter
            head = bytes(buf[:end])
            nl = head.find(b"\r\n")
            parts = (head if nl < 0 else head[:nl]).split(b" ")
            if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
                self._fail(400, "bad_request", "malformed request line")
                return
            method, target, version = parts
            low = head.lower()
            length = 0
            i = low.find(b"\r\ncontent-length:")
            if i >= 0:
                j = low.find(b"\r\n", i + 17)
                v = low[i + 17:j if j >= 0 else len(low)].strip()
                if not v.isdigit():
                    self._fail(400, "bad_request", "Content-Length must be a number")
                    return
                length = int(v)
            if b"\r\ntransfer-encoding:" in low:
                self._fail(411, "length_required", "send the body with a Content-Length, not chunked")
                return
            if version == b"HTTP/1.0":
                close = b"\r\nconnection: keep-alive" not in low
            else:
                close = b"\r\nconnection: close" in low
            expect = b"\r\nexpect: 100-continue" in low
            auth = None
            if self.front.auth:
                i = low.find(b"\r\nauthorization:")
                if i >= 0:
                    j = low.find(b"\r\n", i + 16)
                    auth = head[i + 16:j if j >= 0 else len(head)].decode("latin-1").strip()
            method = method.decode("latin-1")
            target = target.decode("latin-1")
            if length > self.front.max_body:
                src = self.front.source_of(target)
                if src is not None and self.front.auth:
                    denied = self.front.gw.check_auth(src, auth)
                    if denied is not None:
                        self.buf.clear()
                        self.answer(denied[0], denied[1], close=True, extra=WWW_AUTH)
                        return
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
            self.front.handle(self, method=method, path=target.split("?", 1)[0], body=body, close=close, auth=auth)

    def answer(self, status, payload, *, close=False, ctype=_JSON, extra=b""):
        if self.closing:
            return
        out = payload if isinstance(payload, bytes) else _ENCODE(payload).encode("utf-8", "backslashreplace")
        if status == 200 and not close and not extra and ctype is _JSON:
            self._write(_JSON_200 % (len(out), out))
            return
        self.transport.write(_head(status, ctype, len(out), close=close, extra=extra) + out)
        if close:
            self.closing = True
            self.transport.close()

    def _write(self, data):
        """Send an answer. uvloop's transport.write makes its send() holding the GIL, and on loopback a send does
        the kernel's TCP work for both ends (a quarter of a request's time, profiled): os.write on the socket makes
        the same call with the GIL released, so the other event loop's thread runs Python meanwhile. Whatever the
        kernel does not take at once (or anything, while the transport still has bytes queued) goes through the
        transport, which keeps the order and waits for the socket to drain."""
        # Only while the transport is open: once it closes (idle reaper, peer reset), its fd may be closed and the
        # number reused by a connection another loop thread accepts, and an answer must never reach another client.
        if self.fd >= 0 and not self.transport.is_closing() and not self.transport.get_write_buffer_size():
            try:
                n = os.write(self.fd, data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                self.fd = -1
                n = 0
            if n == len(data):
                return
            data = data[n:]
        self.transport.write(data)

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


class _Loop:
    """One event loop in its own thread, accepting on its own SO_REUSEPORT socket of the shared port."""

    def __init__(self):
        self.loop = None
        self.stopped = None
        self.conns = set()
        self.thread = None


class IngestFront:
    """Serves one Gateway over asyncio. run() blocks until stop() (or SIGTERM handled by the caller).

    io_loops event loops, each in its own thread with its own listening socket on the port (SO_REUSEPORT: the
    kernel spreads connections over them). uvloop reads and waits with the GIL released; answers are sent with
    os.write, which releases it too (_Conn._write; uvloop's own transport.write holds it). So one loop's recv/send
    (on loopback the kernel does both ends' TCP work inside send) runs while another loop's thread runs the
    gateway's Python: the two cores of a small gateway host both work. Measured under the wrk storm, two loops beat
    one and three (the Python is one GIL's worth). The Gateway is thread-safe (its locks are those the WSGI front's
    threads use)."""

    def __init__(self, gw, config, io_loops=None):
        self.gw = gw
        self.cfg = config
        self.max_body = config.max_body
        self.auth = gw.auth_required      # the ingest endpoints require a bearer token ([ingest], config.py)
        self.io_loops = max(1, int(io_loops or getattr(config, "io_loops", 2)))
        self.loops = []
        self.port = None
        self.ingest = {"/api/v1/gpu_event": ("gpu_event", gw.gpu_event),
                       "/api/v1/alertmanager": ("alertmanager", lambda b, w: gw.alertmanager(b, "alertmanager", w)),
                       "/api/v1/grafana": ("grafana", lambda b, w: gw.alertmanager(b, "grafana", w))}

    def source_of(self, path):
        h = self.ingest.get(path.split("?", 1)[0])
        return h[0] if h else None

    # ---- requests -----------------------------------------------------------------------------------------

    def handle(self, conn, *, method, path, body, close, auth=None):
        h = self.ingest.get(path)
        if h is not None:
            if method != "POST":
                conn.answer(405, {"ok": False, "error": "method_not_allowed", "message": "use POST"}, close=close,
                            extra=b"Allow: POST\r\n")
                return
            source, fn = h
            if self.auth:
                denied = self.gw.check_auth(source, auth)
                if denied is not None:
                    conn.answer(denied[0], denied[1], close=close, extra=WWW_AUTH)
                    return
            try:
                obj = decode_body(body)
            except BodyError as e:
                status, answer = self.gw.refuse(source, e.status, e.code, str(e))
                conn.answer(status, answer, close=close)
                return
            waits = []
            try:
                status, answer = fn(obj, waits)
            except Exception as e:  # noqa: BLE001 - one bad request must not take the server down
                log.exception("ingest_error", extra={"fields": {"source": source, "error": str(e)}})
                conn.answer(500, {"ok": False, "error": "internal", "message": "internal error"}, close=close)
                return
            if not waits:
                conn.answer(status, answer, close=close)
                return
            self._after_durable(conn, source=source, status=status, answer=answer, close=close, waits=waits)
            return
        if path == "/healthz" and method == "GET":
            conn.answer(200, self.gw.health(), close=close)
        elif path == "/metrics" and method == "GET":
            conn.answer(200, self.gw.metrics_text().encode(), close=close, ctype=b"text/plain; version=0.0.4")
        elif path in ("/healthz", "/metrics"):
            conn.answer(405, {"ok": False, "error": "method_not_allowed", "message": "use GET"}, close=close,
                        extra=b"Allow: GET\r\n")
        else:
            conn.answer(404, {"ok": False, "error": "not_found", "message": "no such endpoint"}, close=close)

    def _after_durable(self, conn, *, source, status, answer, close, waits):
        """Answer once every (persister, gen) is on disk; 503 if one fails or takes over persist_wait_s."""
        conn.busy = True
        loop = conn.home.loop
        state = {"left": len(waits), "done": False}

        def finish(*, ok):
            if state["done"]:
                return
            if not ok:
                state["done"] = True
                timer.cancel()
                st, ans = self.gw.not_durable_answer(source)
                conn.answer(st, ans, close=close)
                conn.resume()
                return
            state["left"] -= 1
            if state["left"] == 0:
                state["done"] = True
                timer.cancel()
                conn.answer(status, answer, close=close)
                conn.resume()

        def from_thread(ok):
            loop.call_soon_threadsafe(lambda: finish(ok=ok))

        timer = loop.call_later(self.cfg.persist_wait_s, lambda: finish(ok=False))
        for p, gen in waits:
            p.add_waiter(gen, from_thread)

    # ---- lifecycle ----------------------------------------------------------------------------------------

    def _socket(self, host, port):
        import socket

        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if self.io_loops > 1:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind((host, port))
        s.listen(1024)
        s.setblocking(False)
        return s

    async def _main(self, home, sock, started):
        home.loop = asyncio.get_running_loop()
        home.stopped = asyncio.Event()
        server = await home.loop.create_server(lambda: _Conn(self, home), sock=sock)
        started.set()
        sweeper = home.loop.create_task(self._sweep(home))
        try:
            await home.stopped.wait()
        finally:
            sweeper.cancel()
            server.close()
            for c in list(home.conns):
                if c.transport is not None:
                    c.transport.close()
            await server.wait_closed()

    async def _sweep(self, home):
        while True:
            await asyncio.sleep(10)
            limit = time.monotonic() - IDLE_S
            for c in list(home.conns):
                if c.last < limit and not c.busy and c.transport is not None:
                    c.transport.close()

    def _loop_thread(self, home, sock, started):
        uvloop.run(self._main(home, sock, started))

    def run(self, host, port, ready=None):
        import threading

        # Everything built at start lives to the end: out of the collector's way, and collections rarer, since a
        # request allocates a few hundred short-lived objects and creates no cycles
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 20, 50)
        first = self._socket(host, port)
        self.port = first.getsockname()[1]
        socks = [first] + [self._socket(host, self.port) for _ in range(self.io_loops - 1)]
        self.loops = [_Loop() for _ in socks]
        starts = []
        for i, (home, sock) in enumerate(zip(self.loops, socks, strict=True)):
            started = threading.Event()
            starts.append(started)
            home.thread = threading.Thread(target=self._loop_thread, args=(home, sock, started),
                                           name="http-%d" % i, daemon=True)
            home.thread.start()
        for st in starts:
            st.wait(10)
        if ready is not None:
            ready()
        for home in self.loops:
            home.thread.join()

    def stop(self):
        for home in self.loops:
            if home.loop is not None and home.stopped is not None:
                home.loop.call_soon_threadsafe(home.stopped.set)
