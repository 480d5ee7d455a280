"""The gateway's own HTTP front: an epoll loop (select.epoll, standard library) per thread, HTTP/1.1 keep-alive,
for the ingest path.

Why not waitress: profiled under the storm (bench/bench_gateway_rfc.py, py-spy), waitress spent about 170 us of
CPU per request in its own dispatch (task queue, thread hand-off, WSGI environ) before the gateway did anything,
three times the gateway's own work, and per request it reached 0.4-0.6x the RFC's Go gateway. Why not asyncio on
uvloop (this front until issue 12's last round): answering a constant 200 under the same storm, in the same run,
the two fronts' speed is the same within this machine's noise (16.7k and 23.6k requests/s for uvloop, 20.1k and
23.1k for this loop), but asyncio, uvloop and what they import held 3 MB more (peak RSS 28.0 against 24.9 MB), and
the memory target is the one a small Python process misses first. Here a request is parsed from the connection's
buffer in the loop's thread and handed straight to the Gateway: no thread hand-off, no environ. The answer is
sent by the native sender's thread (_nativesend.c: without the GIL, in order, closes after the last answer; the
loop writes what a full socket hands back), or by the loop itself where the extension is not built.

Durability is kept: an event that created an alarm is answered only once that alarm is on disk. The handler runs
in the loop, collects the (persister, gen) it must wait for, and the answer is sent when the persister's thread
reports the write (Persister.add_waiter, handed to the loop through its wake-up pipe), or 503 if it fails or takes
longer than persist_wait_s. Requests of one connection are answered in order; other connections go on meanwhile.

Endpoints: POST /api/v1/gpu_event, /api/v1/alertmanager, /api/v1/grafana; GET /healthz, /metrics. Limits: headers
16 KiB (431), body gateway.max_body (413, Content-Length required: 411 for chunked), idle keep-alive 60 s.
"""

from __future__ import annotations

import collections
import errno
import gc
import itertools
import json
import logging
import os
import select
import socket
import threading
import time

from .ingest import BodyError, decode_body

try:
    from ._nativesend import Sender as NativeSender
except ImportError:  # not built (no C compiler where it was installed): the loop's thread sends its answers
    NativeSender = None

log = logging.getLogger("sentinel.gateway")

MAX_HEAD = 16384
IDLE_S = 60.0
SWEEP_S = 10.0  # how often idle keep-alive connections are looked for
ACCEPT_PAUSE_S = 0.1  # accept() out of descriptors: how long to stop accepting before trying again
_OUT_OF_SOCKETS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
_HOLD_HEAD = MAX_HEAD + 4  # with gateway.max_body: the most a connection holds unparsed (one whole request)
# Answer bytes one connection may hand the native sender before the loop waits until the sender has done them (sent
# or handed back): a client that pipelines thousands of requests and never reads would otherwise have every request
# in the loop's buffer answered before the sender reports that the socket is full (8.9 MB held for one such client
# in tests/test_gateway_server.py). The loop's own sends stop at the first one the socket does not take.
_NATIVE_WINDOW = 65536
_RECV = 65536
_IN = select.EPOLLIN if hasattr(select, "epoll") else select.POLLIN
_OUT = select.EPOLLOUT if hasattr(select, "epoll") else select.POLLOUT
# readable, or the peer hung up / the socket failed: recv() tells which
_IN_ERR = _IN | (select.EPOLLHUP | select.EPOLLERR if hasattr(select, "epoll") else select.POLLHUP | select.POLLERR)
_REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


def _no_default(o):
    raise TypeError("%s is not JSON serializable" % type(o).__name__)


# The C encoder, built once and called directly: JSONEncoder.encode builds a closure and a chunk list per call, a
# fifth of an answer's cost. No circular-reference markers: an answer is a fresh tree of dicts, lists and scalars.
_C_ENCODE = (
    json.encoder.c_make_encoder(None, _no_default, json.encoder.encode_basestring, None, ":", ",", False, False, True)
    if json.encoder.c_make_encoder
    else None
)
_PY_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _ENCODE(obj) -> str:  # noqa: N802 - a constant-like callable, as before
    if _C_ENCODE is None:
        return _PY_ENCODE(obj)
    return "".join(_C_ENCODE(obj, 0))


_ESC = json.encoder.encode_basestring  # what _ENCODE writes a string with (C where built)
_ANSWER = ("ok", "key", "level", "result")
_ANSWER_ROUTED = _ANSWER + ("terminals",)


def _encode_answer(a) -> str:
    """An event's answer, {"ok": true, "key", "level", "result"[, "terminals": {one terminal: its outcome}]}, as
    the text _ENCODE gives it (tests/test_gateway_server.py compares them), from a template: 0.8 against 2.2 us
    per answer in a tight loop. Anything else goes through _ENCODE."""
    if type(a) is dict:
        keys = tuple(a)
        if keys == _ANSWER:
            ok, key, level, result = a.values()
            if ok is True and type(key) is str and type(level) is str and type(result) is str:
                return '{"ok":true,"key":%s,"level":%s,"result":%s}' % (_ESC(key), _ESC(level), _ESC(result))
        elif keys == _ANSWER_ROUTED:
            ok, key, level, result, terms = a.values()
            if (
                ok is True
                and type(key) is str
                and type(level) is str
                and type(result) is str
                and type(terms) is dict
                and len(terms) == 1
            ):
                ((name, fate),) = terms.items()
                if isinstance(name, str) and isinstance(fate, str):  # an outcome is a str enum
                    return '{"ok":true,"key":%s,"level":%s,"result":%s,"terminals":{%s:%s}}' % (
                        _ESC(key),
                        _ESC(level),
                        _ESC(result),
                        _ESC(name),
                        _ESC(fate),
                    )
    return _ENCODE(a)


WWW_AUTH = b'WWW-Authenticate: Bearer realm="sentinel-gateway"\r\n'
_STATUS_LINE = {code: ("HTTP/1.1 %d %s\r\n" % (code, reason)).encode() for code, reason in _REASONS.items()}


_JSON = b"application/json"
# the answer nearly every request gets (200, JSON, keep-alive): one bytes format, no join
_JSON_200 = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"


def _head(status, ctype, n, *, close=False, extra=b""):
    line = _STATUS_LINE.get(status) or ("HTTP/1.1 %d Error\r\n" % status).encode()
    return b"".join(
        (
            line,
            b"Content-Type: ",
            ctype,
            b"\r\nContent-Length: ",
            str(n).encode(),
            b"\r\nConnection: close\r\n" if close else b"\r\n",
            extra,
            b"\r\n",
        )
    )


# A keep-alive client sends the same head again and again but for Content-Length (a probe, Alertmanager, wrk): the
# parse of a head is kept, keyed by its exact bytes, and a repeat costs one dict lookup. Bounded: heads up to 1 KiB,
# at most 256 of them per front (cleared when full, so a client that varies its heads costs only the normal parse).
_HEAD_MEMO = 256
_HEAD_MEMO_MAX = 1024
_CHUNKED = "chunked"  # not a 400: 411, said where the parse is used


def _parse_head(head, *, with_auth):
    """A request head (bytes, without its blank line) as (method, path, length, close, expect, auth), or the 400
    message (a str) for a head that breaks the grammar (_CHUNKED for a chunked body). Bytes throughout: one
    lower-cased copy to find the few headers that matter."""
    nl = head.find(b"\r\n")
    parts = (head if nl < 0 else head[:nl]).split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return "malformed request line"
    method, target, version = parts
    low = head.lower()
    length = 0
    i = low.find(b"\r\ncontent-length:")
    if i >= 0:
        j = low.find(b"\r\n", i + 17)
        v = low[i + 17 : j if j >= 0 else len(low)].strip()
        if not v.isdigit():
            return "Content-Length must be a number"
        length = int(v)
    if b"\r\ntransfer-encoding:" in low:
        return _CHUNKED
    if version == b"HTTP/1.0":
        close = b"\r\nconnection: keep-alive" not in low
    else:
        close = b"\r\nconnection: close" in low
    expect = b"\r\nexpect: 100-continue" in low
    auth = None
    if with_auth:
        i = low.find(b"\r\nauthorization:")
        if i >= 0:
            j = low.find(b"\r\n", i + 16)
            auth = head[i + 16 : j if j >= 0 else len(head)].decode("latin-1").strip()
    return method.decode("latin-1"), target.decode("latin-1").split("?", 1)[0], length, close, expect, auth


class FrontStatus:
    __slots__ = (
        "connections",
        "accept_failures",
        "accept_failing",
        "accept_error",
        "sender",
        "send_queued",
        "sends_held",
    )

    def __init__(
        self, *, connections, accept_failures, accept_failing, accept_error, sender="loop", send_queued=0, sends_held=0
    ):
        self.connections = connections
        self.accept_failures = accept_failures
        self.accept_failing = accept_failing
        self.accept_error = accept_error
        self.sender = sender  # "native": the C extension's thread sends the answers; "loop": the loop's
        self.send_queued = send_queued  # answers (and closes) handed to the native sender, not yet done
        self.sends_held = sends_held  # answers the socket did not take whole (a client not reading): handed back


class _Conn:
    """One client connection, served by one _Loop's thread: the bytes it sent and not yet parsed (buf), the bytes
    of answers the socket has not taken yet (out), and whether an answer waits for its alarm to reach the disk."""

    __slots__ = (
        "front",
        "home",
        "sock",
        "fd",
        "buf",
        "out",
        "busy",
        "closing",
        "last",
        "paused",
        "tag",
        "native",
        "fenced",
        "handed",
        "seq",
    )

    def __init__(self, front, home, sock):
        self.front = front
        self.home = home  # the _Loop whose thread serves this connection
        self.sock = sock
        self.fd = sock.fileno()
        self.buf = bytearray()
        self.out = None  # answer bytes the socket did not take at once (a bytearray), in order
        self.busy = False  # an answer is waiting for its alarm to reach the disk
        self.closing = False
        self.last = time.monotonic()
        self.paused = False  # not read from: a whole request waits here while an answer is pending
        self.tag = next(_TAGS)  # names this connection in what the native sender hands back
        self.native = home.sender is not None  # answers go to the native sender (until it hands one back)
        self.fenced = False  # out holds what the sender handed back; more may follow until the fence does
        self.handed = 0  # answer bytes handed to the native sender since it last did all of them
        self.seq = 0  # over the window: the sender's number of the last item handed over

    def readable(self):
        try:
            data = self.sock.recv(_RECV)  # the GIL is released for the syscall
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        if not data:  # the client closed its end: nothing more to read or answer
            self.close()
            return
        self.last = time.monotonic()
        self.buf += data
        if not self.busy and self.out is None:
            self._process()
        if (
            len(self.buf) > self.front.max_body + _HOLD_HEAD
            and self.fd >= 0
            and (self.busy or self.out is not None or self.handed > _NATIVE_WINDOW)
        ):
            # A client that sends and does not wait for its answers (or never reads them): what it sent beyond one
            # whole request stays in the kernel, and TCP tells it to wait, until this connection's answers are out.
            self.paused = True
            self.home.watch(self)

    def writable(self):
        out = self.out
        if out is None or self.fenced:
            return
        try:
            n = self.sock.send(out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        del out[:n]
        if out:
            return
        self.out = None
        if self.closing:
            self.close()
            return
        if not self.busy:
            self._process()  # requests that arrived while the answers were queued
        self._rearm()

    def _process(self):
        buf = self.buf
        while buf and not self.busy and not self.closing and self.out is None and self.handed <= _NATIVE_WINDOW:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    self._fail(431, "request_header_too_large", "request head over %d bytes" % MAX_HEAD)
                return
            if end > MAX_HEAD:
                self._fail(431, "request_header_too_large", "request head over %d bytes" % MAX_HEAD)
                return
            head = bytes(buf[:end])
            front = self.front
            parsed = front.heads.get(head)
            if parsed is None:
                parsed = _parse_head(head, with_auth=front.auth)
                if type(parsed) is tuple and len(head) <= _HEAD_MEMO_MAX:
                    if len(front.heads) >= _HEAD_MEMO:
                        front.heads.clear()
                    front.heads[head] = parsed
            if type(parsed) is not tuple:
                if parsed is _CHUNKED:
                    self._fail(411, "length_required", "send the body with a Content-Length, not chunked")
                else:
                    self._fail(400, "bad_request", parsed)
                return
            method, path, length, close, expect, auth = parsed
            if length > front.max_body:
                src = front.source_of(path)
                if src is not None and front.auth:
                    denied = front.gw.check_auth(src, auth)
                    if denied is not None:
                        self.buf.clear()
                        self.answer(denied[0], denied[1], close=True, extra=WWW_AUTH)
                        return
                self._fail(413, "too_large", "body must be 0..%d bytes (Content-Length)" % front.max_body, source=src)
                return
            total = end + 4 + length
            if len(buf) < total:
                if expect and len(buf) == end + 4:
                    self._write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return
            body = bytes(buf[end + 4 : total])
            del buf[:total]
            front.handle(self, method=method, path=path, body=body, close=close, auth=auth)

    def answer(self, status, payload, *, close=False, ctype=_JSON, extra=b""):
        if self.closing:
            return
        out = payload if isinstance(payload, bytes) else _encode_answer(payload).encode("utf-8", "backslashreplace")
        if status == 200 and not close and not extra and ctype is _JSON:
            self._write(_JSON_200 % (len(out), out))
            return
        self._write(_head(status, ctype, len(out), close=close, extra=extra) + out)
        if close:
            self.closing = True
            if self.out is None:
                self.close()

    def _write(self, data):
        """Send an answer: one send() with the GIL released; what the socket does not take at once is kept, in
        order, and sent when the loop sees the socket writable (no further request of this connection is parsed
        meanwhile, so a client that sends and never reads holds at most one answer's bytes here)."""
        if self.fd < 0:
            return
        if self.out is not None:
            self.out += data
            return
        if self.native:
            home = self.home
            try:
                home.sender.send(self.fd, data, self.tag)
            except MemoryError:
                self.close()  # the answer cannot be queued: the client sees the connection end and retries
                return
            self.handed += len(data)
            if self.handed > _NATIVE_WINDOW:
                # no more of its requests until the sender has done this one (and so everything before it)
                self.seq = home.sender.enqueued
                home.throttled.add(self)
            return
        try:
            n = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            self.close()
            return
        if n < len(data):
            self.out = bytearray(data[n:])
            self.home.watch(self)

    def close(self):
        """Once, from the loop's thread: the socket is closed and forgotten, and nothing is sent on it again (an
        answer whose alarm reaches the disk later finds closing set and is dropped)."""
        self.closing = True
        if self.fd < 0:
            return
        home = self.home
        home.forget(self)
        self.fd = -1
        self.out = None
        if home.sender is not None:
            # closed by the sender, after the answers queued before: the number names no other connection while
            # an answer for this one waits
            home.close_later(self.sock.detach())
            return
        try:
            self.sock.close()
        except OSError:
            pass

    def resume(self):
        self.busy = False
        if self.buf and not self.closing and self.out is None:
            self._process()
        self._rearm()

    def _rearm(self):
        """Reading paused, and what was read has been answered down to less than one request: read again."""
        if (
            self.paused
            and self.fd >= 0
            and (
                len(self.buf) <= self.front.max_body + _HOLD_HEAD
                or not (self.busy or self.out is not None or self.handed > _NATIVE_WINDOW)
            )
        ):
            self.paused = False
            self.home.watch(self)

    def _fail(self, status, code, message, source=None):
        if source is not None:
            status, answer = self.front.gw.refuse(source, status, code, message)
        else:
            answer = {"ok": False, "error": code, "message": message}
        self.buf.clear()
        self.answer(status, answer, close=True)


_TAGS = itertools.count(1)


class _Loop:
    """One thread's event loop: its own SO_REUSEPORT listening socket of the shared port, an epoll (poll where
    there is none) over it and its connections, a wake-up pipe for callbacks from other threads (a persister
    reporting a write), and the deadlines of the answers waiting for the disk, in a FIFO (they all wait the same
    persist_wait_s, so the first is always the earliest)."""

    def __init__(self, front, sock, *, native_send=True):
        self.front = front
        self.sock = sock
        # answers are sent by a thread of the C extension's, without the GIL (_nativesend.c says why)
        self.sender = NativeSender() if native_send and NativeSender is not None else None
        self._closes = []  # descriptors the sender could not take to close yet (MemoryError)
        self.throttled = set()  # connections over _NATIVE_WINDOW, waiting for the sender
        self.conns = {}  # fd -> _Conn
        self.calls = collections.deque()  # callbacks handed over from other threads
        self.timers = collections.deque()  # (deadline, callback), in deadline order
        self.stopped = False
        self.thread = None
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._woken = False
        self.accept_failing = False  # accept() failed for want of descriptors or memory, none taken since
        self.accept_failures = 0  # such episodes
        self.accept_error = None
        self._closed = False
        self._pipe_lock = threading.Lock()
        if hasattr(select, "epoll"):
            self.poller = select.epoll()
            self._scale = 1.0  # epoll.poll takes seconds, poll.poll milliseconds
        else:  # pragma: no cover - not Linux
            self.poller = select.poll()
            self._scale = 1000.0
        self.poller.register(sock.fileno(), _IN)
        self.poller.register(self._rfd, _IN)
        self._sfd = self.sender.fileno() if self.sender is not None else -1
        if self.sender is not None:
            self.poller.register(self._sfd, _IN)

    # ---- from any thread -------------------------------------------------------------------------------------

    def call_soon_threadsafe(self, fn):
        """fn() runs in the loop's thread, soon. After the loop has ended it never runs (nobody is left to answer),
        and the wake-up pipe is never written once closed: its number could already name another file."""
        with self._pipe_lock:
            if self._closed:
                return
            self.calls.append(fn)
            if not self._woken:
                self._woken = True
                try:
                    os.write(self._wfd, b"x")
                except (BlockingIOError, InterruptedError):
                    pass  # the pipe is full: the loop is awake anyway

    def stop(self):
        self.stopped = True
        self.call_soon_threadsafe(lambda: None)

    # ---- the loop's own thread -------------------------------------------------------------------------------

    def call_later(self, delay, fn):
        self.timers.append((time.monotonic() + delay, fn))

    def watch(self, conn):
        """Wait for what the connection needs: to read (unless paused), to write (while answers are queued)."""
        self.poller.modify(conn.fd, (0 if conn.paused else _IN) | (0 if conn.out is None or conn.fenced else _OUT))

    def close_later(self, fd):
        try:
            self.sender.close(fd)
        except MemoryError:
            self._closes.append(fd)

    def _returned(self):
        """What the native sender could not send: a client that does not read (the rest, and what follows, is
        written from here when its socket is writable), or one that went away (its connection is closed)."""
        conns = self.conns
        for fd, tag, err, data in self.sender.returned():
            c = conns.get(fd)
            if c is None or c.tag != tag:
                continue  # closed meanwhile (its descriptor may already name a new connection)
            if err > 0:
                c.close()  # the peer went away (or the sender ran out of memory)
            elif err < 0:  # the fence: nothing more of this connection's can come back
                c.fenced = False
                self.watch(c)
            else:
                if c.native:
                    # From now on this loop writes the connection's answers itself, after what the sender hands
                    # back: the fence tells when that is all
                    c.native = False
                    c.fenced = True
                    try:
                        self.sender.fence(fd, tag)
                    except MemoryError:
                        c.close()
                        continue
                if c.out is None:
                    c.out = bytearray(data)
                else:
                    c.out += data
                self.watch(c)

    def _resume_throttled(self):
        """Connections whose answers the sender has all done (sent, or handed back: then out is set) read and
        answer again. True while some still wait."""
        done = self.sender.done
        ready = [c for c in self.throttled if c.seq <= done]
        for c in ready:
            self.throttled.discard(c)
            c.handed = 0
            if c.fd < 0:
                continue
            if c.buf and not c.busy and not c.closing and c.out is None:
                c._process()
            c._rearm()
        return bool(self.throttled)

    def forget(self, conn):
        self.conns.pop(conn.fd, None)
        try:
            self.poller.unregister(conn.fd)
        except (OSError, KeyError, ValueError):
            pass

    def _accept(self):
        front = self.front
        while True:
            try:
                s, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno not in _OUT_OF_SOCKETS:
                    continue  # that one connection failed (ECONNABORTED, ...): take the next
                # Out of descriptors or buffers: the listening socket stays readable, so waiting on it would spin.
                # Stop accepting for a moment, say so once per episode, and keep serving those connected.
                self.accept_error = "%s (%d connections open)" % (e.strerror or e, len(self.conns))
                if not self.accept_failing:
                    self.accept_failing = True
                    self.accept_failures += 1
                    log.warning(
                        "accept_paused",
                        extra={"fields": {"error": str(e), "retry_s": ACCEPT_PAUSE_S, "connections": len(self.conns)}},
                    )
                self.poller.modify(self.sock.fileno(), 0)
                self.call_later(ACCEPT_PAUSE_S, self._resume_accept)
                return
            if self.accept_failing:
                self.accept_failing = False
                log.warning("accept_resumed", extra={"fields": {"connections": len(self.conns) + 1}})
            s.setblocking(False)
            try:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            c = _Conn(front, self, s)
            self.conns[c.fd] = c
            self.poller.register(c.fd, _IN)

    def _resume_accept(self):
        if not self.stopped:
            self.poller.modify(self.sock.fileno(), _IN)

    def run(self, started):
        lfd = self.sock.fileno()
        rfd = self._rfd
        conns = self.conns
        calls = self.calls
        timers = self.timers
        poll = self.poller.poll
        scale = self._scale
        sender = self.sender
        sfd = self._sfd
        sweep_at = time.monotonic() + SWEEP_S
        started.set()
        try:
            while not self.stopped:
                now = time.monotonic()
                wait = sweep_at - now
                if timers:
                    wait = min(wait, timers[0][0] - now)
                if calls:
                    wait = 0
                if self.throttled and self._resume_throttled():
                    wait = min(wait, 0.0005)  # some still wait for the sender: look again soon
                try:
                    events = poll(max(wait, 0) * scale)
                except InterruptedError:
                    continue
                for fd, ev in events:
                    c = conns.get(fd)
                    if c is not None:
                        if ev & _IN_ERR:
                            c.readable()
                        if ev & _OUT and c.fd >= 0:
                            c.writable()
                    elif fd == sfd:
                        self._returned()
                    elif fd == lfd:
                        self._accept()
                    elif fd == rfd:
                        try:
                            os.read(rfd, 4096)
                        except (BlockingIOError, InterruptedError):
                            pass
                        self._woken = False
                while calls:
                    calls.popleft()()
                if timers:
                    now = time.monotonic()
                    while timers and timers[0][0] <= now:
                        timers.popleft()[1]()
                if now >= sweep_at:
                    sweep_at = now + SWEEP_S
                    self._sweep(now)
                if sender is not None:
                    if self._closes:
                        fds, self._closes = self._closes, []
                        for fd in fds:
                            self.close_later(fd)
                    sender.flush()  # one wake-up per turn of the loop for every answer it queued
        finally:
            for c in list(conns.values()):
                c.close()
            if sender is not None:
                sender.stop()  # what was queued is sent, then closed
                for fd in self._closes:  # (what could not be queued for closing: nothing is pending for it now)
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                self._closes = []
            self.poller.close()
            self.sock.close()
            with self._pipe_lock:
                self._closed = True
                os.close(self._rfd)
                os.close(self._wfd)

    def _sweep(self, now):
        limit = now - IDLE_S
        for c in list(self.conns.values()):
            if c.last < limit and not c.busy:
                c.close()


class IngestFront:
    """Serves one Gateway. run() blocks until stop() (or SIGTERM handled by the caller).

    io_loops threads, each with its own event loop (_Loop) and its own listening socket on the port (SO_REUSEPORT:
    the kernel spreads connections over them). recv, send and the wait in epoll release the GIL, so a loop's
    syscalls (on loopback the kernel does both ends' TCP work inside send) run while another thread runs Python.
    The Gateway is thread-safe (its locks are those the WSGI front's threads use)."""

    def __init__(self, gw, config, io_loops=None, *, native_send=None):
        self.gw = gw
        self.cfg = config
        self.max_body = config.max_body
        self.native_wanted = bool(getattr(config, "native_send", True) if native_send is None else native_send)
        self.native_send = self.native_wanted and NativeSender is not None
        self.auth = gw.auth_required  # the ingest endpoints require a bearer token ([ingest], config.py)
        self.io_loops = max(1, int(io_loops or getattr(config, "io_loops", 1)))
        self.loops = []
        self.port = None
        self.heads = {}  # head bytes -> its parse (_parse_head), for keep-alive repeats
        gw.front_status = self.status
        self.ingest = {
            "/api/v1/gpu_event": ("gpu_event", gw.gpu_event),
            "/api/v1/alertmanager": ("alertmanager", lambda b, w: gw.alertmanager(b, "alertmanager", w)),
            "/api/v1/grafana": ("grafana", lambda b, w: gw.alertmanager(b, "grafana", w)),
        }

    def status(self):
        """What /healthz and /metrics say of this front (Gateway.front_status)."""
        failing = [h for h in self.loops if h.accept_failing]
        senders = [h.sender for h in self.loops if h.sender is not None]
        return FrontStatus(
            connections=sum(len(h.conns) for h in self.loops),
            accept_failures=sum(h.accept_failures for h in self.loops),
            accept_failing=bool(failing),
            accept_error=failing[0].accept_error if failing else None,
            sender="native" if self.native_send else "loop",
            send_queued=sum(s.queued for s in senders),
            sends_held=sum(s.held for s in senders),
        )

    def source_of(self, path):
        h = self.ingest.get(path.split("?", 1)[0])
        return h[0] if h else None

    # ---- requests -----------------------------------------------------------------------------------------

    def handle(self, conn, *, method, path, body, close, auth=None):
        h = self.ingest.get(path)
        if h is not None:
            if method != "POST":
                conn.answer(
                    405,
                    {"ok": False, "error": "method_not_allowed", "message": "use POST"},
                    close=close,
                    extra=b"Allow: POST\r\n",
                )
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
            conn.answer(
                405,
                {"ok": False, "error": "method_not_allowed", "message": "use GET"},
                close=close,
                extra=b"Allow: GET\r\n",
            )
        else:
            conn.answer(404, {"ok": False, "error": "not_found", "message": "no such endpoint"}, close=close)

    def _after_durable(self, conn, *, source, status, answer, close, waits):
        """Answer once every (persister, gen) is on disk; 503 if one fails or takes over persist_wait_s."""
        conn.busy = True
        loop = conn.home
        state = {"left": len(waits), "done": False}

        def finish(*, ok):
            if state["done"]:
                return
            if not ok:
                state["done"] = True
                st, ans = self.gw.not_durable_answer(source)
                conn.answer(st, ans, close=close)
                conn.resume()
                return
            state["left"] -= 1
            if state["left"] == 0:
                state["done"] = True
                conn.answer(status, answer, close=close)
                conn.resume()

        def from_thread(ok):
            loop.call_soon_threadsafe(lambda: finish(ok=ok))

        # no cancel: a deadline that comes after the answer finds state["done"]
        loop.call_later(self.cfg.persist_wait_s, lambda: finish(ok=False))
        for p, gen in waits:
            p.add_waiter(gen, from_thread)

    # ---- lifecycle ----------------------------------------------------------------------------------------

    def run(self, host, port, ready=None, *, socks=None):
        """socks: listening sockets bound beforehand (listen()), one per io_loop; the CLI binds before it writes
        anything, so a port in use stops it cleanly."""
        # Everything built at start lives to the end: out of the collector's way, and collections rarer, since a
        # request allocates a few hundred short-lived objects and creates no cycles
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 20, 50)
        if socks:
            socks = list(socks)
            self.port = socks[0].getsockname()[1]
        else:
            first = listen(host, port, reuse_port=self.io_loops > 1)
            self.port = first.getsockname()[1]
            socks = [first] + [listen(host, self.port, reuse_port=True) for _ in range(self.io_loops - 1)]
        self.loops = [_Loop(self, sock, native_send=self.native_send) for sock in socks]
        if self.native_wanted and not self.native_send:
            log.warning(
                "native_send_unavailable",
                extra={
                    "fields": {
                        "reason": "host_client.gateway._nativesend is not built (no C compiler at install?): the event "
                        "loop's thread sends the answers, about a third slower under a storm"
                    }
                },
            )
        starts = []
        for i, home in enumerate(self.loops):
            started = threading.Event()
            starts.append(started)
            home.thread = threading.Thread(target=home.run, args=(started,), name="http-%d" % i, daemon=True)
            home.thread.start()
        for st in starts:
            st.wait(10)
        if ready is not None:
            ready()
        for home in self.loops:
            while home.thread.is_alive():
                home.thread.join(0.5)  # in slices: the main thread stays responsive to SIGTERM/SIGINT

    def stop(self):
        for home in self.loops:
            home.stop()


def listen(host, port, *, reuse_port=False):
    """A bound, listening, non-blocking TCP socket on host:port (OSError as bind raises it)."""
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind((host, port))
        s.listen(1024)
        s.setblocking(False)
    except OSError:
        s.close()
        raise
    return s
