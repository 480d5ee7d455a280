"""The gateway's HTTP front: an epoll loop (select.epoll, standard library) per thread, HTTP/1.1 keep-alive, every
request framed by llhttp (httptools: Node.js's parser), for the ingest path.

A request is parsed from what the connection sent, in the loop's thread, and handed straight to the Gateway: no
thread hand-off, no WSGI environ. Framing is llhttp's and follows RFC 9112: duplicate or malformed Content-Length,
Content-Length with Transfer-Encoding, whitespace before a colon, obs-fold, a bare CR or LF in the head are 400 and
close; chunked bodies are decoded. What llhttp lets through is checked here: exactly one Host on HTTP/1.1 (400), the
version (505), the body limit (413, also while a chunked body is decoded), no 100 (Continue) to HTTP/1.0.
docs/GATEWAY.md says why this and not waitress, asyncio, h11 or uvicorn, with the figures.

Durability is kept: an event that created an alarm is answered only once that alarm is on disk. The handler runs
in the loop, collects the (persister, gen) it must wait for, and the answer is sent when the persister's thread
reports the write (Persister.add_waiter, handed to the loop through its wake-up pipe), or 503 if it fails or takes
longer than persist_wait_s. Answers leave in request order on every connection: an answer that waits for the disk
holds a place in the connection's queue, and what is answered after it waits behind it. A client that half-closes
(shutdown(SHUT_WR) after its requests) gets every answer before the close.

Slow and greedy clients are bounded (gateway.head_timeout_s, body_timeout_s, max_connections,
max_partial_body_bytes; docs/GATEWAY.md): a head or a body that takes too long is answered 408 and closed; at the
connection cap a new connection is taken and the oldest idle keep-alive connection is shed, else the oldest slow
one; the bytes all incomplete bodies hold together are capped (the newest offender gets 503 and close). A client
that pipelines and never reads is no longer read once 64 KiB of its answers wait (TCP makes it wait).

Endpoints: POST /api/v1/gpu_event, /api/v1/alertmanager, /api/v1/grafana; GET /healthz, /metrics. Limits: request
head 16 KiB (431), body gateway.max_body (413), idle keep-alive 60 s.
"""

from __future__ import annotations

import collections
import errno
import gc
import heapq
import http
import json
import logging
import os
import select
import socket
import threading
import time

import httptools

from .history import PATHS as incident_paths
from .history import serve as serve_incidents
from .ingest import BodyError, decode_body

log = logging.getLogger("sentinel.gateway")

MAX_HEAD = 16384
IDLE_S = 60.0
SWEEP_S = 0.5  # how often deadlines (head, body, idle, linger) are looked at
SWEEP_BATCH = 128  # connections closed per turn of the loop for a deadline; the rest on the next turns
SWEEP_AGAIN_S = 0.005
TRIM_AFTER = 256  # connections held at once: when that many have gone (7 in 8), the heap is trimmed
LINGER_S = 2.0  # after a closing answer: how long what the client still sends is read and dropped
LINGER_MAX = 1 << 20  # ... and how much of it
SHED_YOUNG_S = 0.1  # a connection this young is shed only when no older one can be
EPISODE_S = 10.0  # sheds or timeouts this far apart are one episode (one log line when it starts, one when it ends)
ACCEPT_PAUSE_S = 0.1  # accept() out of descriptors: how long to stop accepting before trying again
# connections taken per turn of the loop, after the turn's reads: a connection is read once before a flood of new
# ones can push it out at max_connections
ACCEPT_BATCH = 64
FD_HEADROOM = 64  # descriptors kept below RLIMIT_NOFILE beside the connections (state files, pipes, epoll, logs)
DEFAULT_MAX_CONNECTIONS = 10_000  # with a limit far above it (a container's): the memory, not descriptors, bounds
_OUT_OF_SOCKETS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
_RECV = 65536
_FEED = 16384  # bytes handed to the parser at a time: parsed, unanswered requests of one connection stay this small
_WINDOW = 65536  # answer bytes a connection may leave unsent before its requests are no longer read
_MAX_WAITING = 64  # answers of one connection that may wait for the disk before its requests are no longer read
_IN = select.EPOLLIN if hasattr(select, "epoll") else select.POLLIN
_OUT = select.EPOLLOUT if hasattr(select, "epoll") else select.POLLOUT
# readable, or the peer hung up / the socket failed: recv() tells which
_IN_ERR = _IN | (select.EPOLLHUP | select.EPOLLERR if hasattr(select, "epoll") else select.POLLHUP | select.POLLERR)

# connection phases
_NEW, _IDLE, _HEAD, _BODY = 0, 1, 2, 3


def reason(code: int) -> str:
    """The standard reason phrase (RFC 9110, as the standard library spells it)."""
    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return "Unknown"


def _no_default(o):
    raise TypeError("%s is not JSON serializable" % type(o).__name__)


# The C encoder, built once and called directly: JSONEncoder.encode builds a closure and a chunk list per call. No
# circular-reference markers: an answer is a fresh tree of dicts, lists and scalars.
_C_MAKE = getattr(json.encoder, "c_make_encoder", None)  # the C accelerator; None where _json is not built
_C_ENCODE = (
    _C_MAKE(None, _no_default, json.encoder.encode_basestring, None, ":", ",", False, False, True) if _C_MAKE else None
)
_PY_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _ENCODE(obj) -> str:  # a constant-like callable, as before
    if _C_ENCODE is None:
        return _PY_ENCODE(obj)
    return "".join(_C_ENCODE(obj, 0))


_ESC = json.encoder.encode_basestring  # what _ENCODE writes a string with (C where built)
_ANSWER = ("ok", "key", "level", "result")
_ANSWER_ROUTED = _ANSWER + ("terminals",)


def _encode_answer(a) -> str:
    """An event's answer, {"ok": true, "key", "level", "result"[, "terminals": {one terminal: its outcome}]}, as
    the text _ENCODE gives it (tests/test_gateway_server.py compares them), from a template: the common answer
    without the encoder's per-call set-up. Anything else goes through _ENCODE."""
    if type(a) is dict:
        keys = tuple(a)
        # _ESC takes a str (a str enum's value too) and raises TypeError for anything else: then the encoder
        try:
            if keys == _ANSWER:
                ok, key, level, result = a.values()
                if ok is True:
                    return '{"ok":true,"key":%s,"level":%s,"result":%s}' % (_ESC(key), _ESC(level), _ESC(result))
            elif keys == _ANSWER_ROUTED:
                ok, key, level, result, terms = a.values()
                if ok is True and type(terms) is dict and len(terms) == 1:
                    ((name, fate),) = terms.items()
                    return '{"ok":true,"key":%s,"level":%s,"result":%s,"terminals":{%s:%s}}' % (
                        _ESC(key),
                        _ESC(level),
                        _ESC(result),
                        _ESC(name),
                        _ESC(fate),
                    )
        except TypeError:
            pass
    return _ENCODE(a)


WWW_AUTH = b'WWW-Authenticate: Bearer realm="sentinel-gateway"\r\n'
_STATUS_LINE = {s.value: ("HTTP/1.1 %d %s\r\n" % (s.value, s.phrase)).encode() for s in http.HTTPStatus}
_CONTINUE = _STATUS_LINE[100] + b"\r\n"

_JSON = b"application/json"
# the answer nearly every request gets (200, JSON, keep-alive): one bytes format, no join
_JSON_200 = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"


def _head(status, ctype, n, *, close=False, extra=b""):
    line = _STATUS_LINE.get(status) or ("HTTP/1.1 %d %s\r\n" % (status, reason(status))).encode()
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


_METHODS = {m.encode(): m for m in ("GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH")}
# request targets as sent -> their path (str): the same few targets come on every request; bounded in number and
# length, since a client chooses them
_PATHS: dict = {}
_PATH_MEMO = 256
_PATH_MEMO_TARGET = 512


def _path_of(url):
    """The path of a request target: origin-form up to its query, absolute-form's path (RFC 9112 3.2), "*" as
    sent. Raises _Refusal for a target llhttp's URL parser cannot read."""
    if url[:1] == b"/":
        path = url if b"?" not in url else url[: url.find(b"?")]
    else:  # absolute-form (RFC 9112 3.2.2), or "*"
        try:
            path = httptools.parse_url(url).path or b"/"
        except httptools.HttpParserInvalidURLError:
            raise _Refusal(400, "bad_request", "malformed request target") from None
    path = path.decode("latin-1")
    if len(url) <= _PATH_MEMO_TARGET:
        if len(_PATHS) >= _PATH_MEMO:
            _PATHS.clear()
        _PATHS[url] = path
    return path


class _Refusal(Exception):
    """Raised from a parser callback: the request is answered (status, code, message) and the connection closed."""

    def __init__(self, status, code, message, *, source=None, extra=b"", answer=None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.source = source
        self.extra = extra
        self.answer = answer


def listen(host, port, *, reuse_port=False) -> socket.socket:
    """A bound, listening, non-blocking TCP socket (port 0: a free one). Raises OSError (port in use, ...)."""
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


_TRIM = []


def give_back_memory():
    """Hand the C heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing): after a flood of
    connections, what they held is free but scattered, and stays in the process's RSS until trimmed."""
    if not _TRIM:
        try:
            import ctypes  # only once a flood has passed
            import ctypes.util

            _TRIM.append(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim)
        except (OSError, AttributeError):  # not glibc
            _TRIM.append(None)
    if _TRIM[0] is not None:
        _TRIM[0](0)


def descriptor_room(terminals=0):
    """Connections the process can hold open: the soft RLIMIT_NOFILE less room for everything else it opens."""
    try:
        import resource  # POSIX only
    except ImportError:  # pragma: no cover - not POSIX
        return 10_000
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1_000_000
    return max(16, soft - FD_HEADROOM - 4 * terminals)


class FrontStatus:
    __slots__ = (
        "connections",
        "accept_failures",
        "accept_failing",
        "accept_error",
        "shed",
        "head_timeouts",
        "body_timeouts",
        "partial_refused",
        "max_connections",
    )

    def __init__(
        self,
        *,
        connections,
        accept_failures,
        accept_failing,
        accept_error,
        shed=0,
        head_timeouts=0,
        body_timeouts=0,
        partial_refused=0,
        max_connections=0,
    ):
        self.connections = connections
        self.accept_failures = accept_failures
        self.accept_failing = accept_failing
        self.accept_error = accept_error
        self.shed = shed  # connections closed to make room at max_connections
        self.head_timeouts = head_timeouts  # requests whose head did not arrive within head_timeout_s
        self.body_timeouts = body_timeouts  # ... whose body did not arrive within body_timeout_s
        self.partial_refused = partial_refused  # 503s: all incomplete bodies together over max_partial_body_bytes
        self.max_connections = max_connections


class _Episode:
    """Sheds or timeouts of one kind: counted each, logged once when an episode starts and once when it ends (none
    for EPISODE_S), never once per connection."""

    __slots__ = ("event", "count", "active", "first", "last", "in_episode")

    def __init__(self, event):
        self.event = event
        self.count = 0
        self.active = False
        self.last = 0.0
        self.in_episode = 0

    def note(self, now, **fields):
        self.count += 1
        self.in_episode += 1
        self.last = now
        if not self.active:
            self.active = True
            log.warning(self.event, extra={"fields": fields})

    def check(self, now):
        """True when an episode ends now."""
        if self.active and now - self.last >= EPISODE_S:
            self.active = False
            log.warning(self.event + "_ended", extra={"fields": {"count": self.in_episode}})
            self.in_episode = 0
            return True
        return False


class _Conn:
    """One client connection, served by one _Loop's thread. Bytes received are fed to the connection's llhttp parser
    (held: those not fed yet); complete requests wait in inq and are handled in order; each answer takes its place in
    slots when an earlier one still waits for the disk, else it is written (out: what the socket did not take)."""

    __slots__ = (
        "front",
        "home",
        "sock",
        "fd",
        "parser",
        "phase",
        "since",
        "last",
        "held",
        "inq",
        "slots",
        "out",
        "reading",
        "closing",
        "lingering",
        "discarded",
        "mask",
        "served",
        "head_fed",
        "url",
        "hosts",
        "connection",
        "auth",
        "expect",
        "length",
        "body",
        "nbody",
        "counted",
        "continued",
        "rare",
        "method",
        "path",
    )

    def __init__(self, front, home, sock, now):
        self.front = front
        self.home = home  # the _Loop whose thread serves this connection
        self.sock = sock
        self.fd = sock.fileno()
        self.parser = httptools.HttpRequestParser(self)
        self.phase = _NEW
        self.since = now  # when the phase began
        self.last = now  # when a byte last came or went
        self.held = b""  # received, not yet fed to the parser
        self.inq = collections.deque()  # parsed requests not yet handled
        self.slots = collections.deque()  # [answer bytes or None while it waits for the disk, close]
        self.out = None  # answer bytes the socket did not take at once (a bytearray), in order
        self.reading = True  # False once the client half-closed, or an answer ends the connection
        self.closing = False  # an answer that ends the connection was written
        self.lingering = False
        self.discarded = 0
        self.mask = _IN
        self.served = 0
        self.counted = 0  # body bytes of an incomplete request this loop counts against max_partial_body_bytes
        self.method = self.path = None
        self._reset()

    def _reset(self):
        self.rare = False  # set with auth, expect, continued, head_fed: reset after the request that set them
        self.head_fed = 0  # fed to the parser while a head was in progress
        self.url = b""
        self.hosts = 0
        self.connection = False
        self.auth = None
        self.expect = False
        self.length = -1
        self.body = None  # bytes, or a list of pieces
        self.nbody = 0
        self.continued = False

    # ---- llhttp's callbacks (inside feed_data) ----------------------------------------------------------------

    def on_url(self, url):
        self.url += url

    def on_header(self, name, value):
        n = len(name)  # the five names read here, told apart by length before they are compared
        if n == 4:
            if name == b"Host" or name.lower() == b"host":  # as clients spell it: no lower-cased copy
                self.hosts += 1
        elif n == 14:
            if name == b"Content-Length" or name.lower() == b"content-length":
                self.length = int(value)  # llhttp has checked it: digits, one value, no Transfer-Encoding beside it
        elif n == 12:
            return  # Content-Type, the other field every ingest request has
        elif n == 13:
            if name.lower() == b"authorization":
                self.auth = value.decode("latin-1").strip()
                self.rare = True
        elif n == 10:
            if name.lower() == b"connection":
                self.connection = True
        elif n == 6 and name.lower() == b"expect":
            self.expect = value.strip().lower() == b"100-continue"
            self.rare = True

    def on_headers_complete(self):
        self.phase = _BODY
        self.since = self.home.now
        p = self.parser
        # llhttp takes versions 0.9, 1.0, 1.1, 2.0 and 3.0, and keeps a connection alive without a Connection header
        # for 1.1 only: then the version is known without get_http_version(), which formats a string
        version = "1.1" if p.should_keep_alive() and not self.connection else p.get_http_version()
        if version != "1.1":
            if version != "1.0":
                raise _Refusal(505, "http_version", "HTTP/1.0 and HTTP/1.1 only")
            if self.hosts > 1:
                raise _Refusal(400, "bad_request", "more than one Host header (RFC 9112 3.2)")
            self.expect = False  # no 1xx to an HTTP/1.0 client (RFC 9110 10.1.1)
        elif self.hosts != 1:
            raise _Refusal(400, "bad_request", "an HTTP/1.1 request needs exactly one Host header (RFC 9112 3.2)")
        path = _PATHS.get(self.url)
        if path is None:
            path = _path_of(self.url)
        self.path = path
        m = p.get_method()
        self.method = _METHODS.get(m) or m.decode("latin-1")
        if self.length > self.front.max_body:
            self._too_large()

    def on_body(self, data):
        n = self.nbody = self.nbody + len(data)
        if n > self.front.max_body:
            self._too_large()
        body = self.body  # one piece as it came (the usual case), more in a list
        if body is None:
            self.body = data
        elif type(body) is list:
            body.append(data)
        else:
            self.body = [body, data]

    def on_message_complete(self):
        body = self.body
        data = b"" if body is None else body if type(body) is bytes else b"".join(body)
        if self.counted:
            self.home.uncount(self)
        self.phase = _IDLE
        self.since = self.home.now
        # what on_message_begin would reset, for the next request (a callback fewer per request); what few
        # requests change, only after one that did
        self.body = None
        self.url = b""
        self.hosts = 0
        self.length = -1
        self.nbody = 0
        auth = None
        if self.rare:
            self.rare = False
            auth = self.auth
            self.auth = None
            self.expect = False
            self.continued = False
            self.head_fed = 0
        self.connection = False
        close = not self.parser.should_keep_alive()
        if close:
            self.reading = False  # nothing after a request that ends the connection is read
        # handled at once unless earlier requests or answers wait (closing: fd < 0 is closing too)
        if self.inq or self.slots or self.closing or self.out is not None:
            if not (self.inq or self.closing or len(self.out or b"") > _WINDOW or len(self.slots) > _MAX_WAITING):
                self.served += 1
                self.front.handle(self, self.method, self.path, data, close, auth)
                return
            self.inq.append((self.method, self.path, data, close, auth))  # answered in turn (_pump)
            return
        self.served += 1
        self.front.handle(self, self.method, self.path, data, close, auth)

    @staticmethod
    def _head_too_large():
        raise _Refusal(431, "request_header_too_large", "request head over %d bytes" % MAX_HEAD)

    def _too_large(self):
        front = self.front
        src = front.source_of(self.path)
        if src is not None and front.auth:
            denied = front.gw.check_auth(src, self.auth)
            if denied is not None:
                raise _Refusal(denied[0], "", "", extra=WWW_AUTH, answer=denied[1])
        raise _Refusal(413, "too_large", "body must be 0..%d bytes" % front.max_body, source=src)

    # ---- the loop's events ------------------------------------------------------------------------------------

    def readable(self):
        home = self.home
        try:
            # into the loop's one buffer (the GIL is released for the syscall): no 64 KiB allocation per read, which
            # a flood of them leaves scattered over the heap; what must be kept is copied at its size
            n = self.sock.recv_into(home.rbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        if n and self.reading and n <= _FEED and not (self.held or self.inq or self.lingering):
            # the usual case: one piece, fed at once from the loop's buffer (llhttp copies what it hands on), its
            # requests handled inside (on_message_complete)
            self.last = now = home.now
            if self.phase < _HEAD:  # a request begins: its head's deadline runs from here
                self.phase = _HEAD
                self.since = now
            self._feed(home.rview[:n])
            if self.out is None and not (self.inq or self.slots or self.closing) and self.reading:
                if self.mask != _IN:
                    self._watch()
            elif self.fd >= 0:
                self._pump()
            return
        data = home.rview[:n].tobytes()
        if self.lingering:
            self.discarded += len(data)
            if not data or self.discarded > LINGER_MAX:
                self.close()
            return
        if not data:
            # The client closed its end (or half-closed after its requests): what it sent in full is answered,
            # then the connection closes; a request cut short is dropped.
            self.reading = False
            self.held = b""
            self.phase = _IDLE
            if self.counted:
                self.home.uncount(self)
            self._pump()
            return
        self.last = home.now
        if not self.reading:
            return  # after a request that ends the connection: dropped
        if self.phase < _HEAD:  # a request begins: its head's deadline runs from here
            self.phase = _HEAD
            self.since = home.now
        self.held = self.held + data if self.held else data
        self._pump()

    def writable(self):
        out = self.out
        if out is None:
            return
        try:
            n = self.sock.send(out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        self.last = self.home.now
        del out[:n]
        if out:
            return
        self.out = None
        self._pump()

    # ---- requests in, answers out, in order -------------------------------------------------------------------

    def _full(self):
        return (self.out is not None and len(self.out) > _WINDOW) or len(self.slots) > _MAX_WAITING

    def _pump(self):
        """Handle what was parsed, feed the parser what was received, while this connection's answers are few
        enough; then wait for what it needs (to read, to write) or end it."""
        if self.fd < 0:
            return
        inq = self.inq
        while True:
            while inq and not self.closing:
                if self._full():
                    break
                method, path, body, close, auth = inq.popleft()
                if method is None:  # a refusal, in its place
                    self._refused(path)
                else:
                    self.served += 1
                    self.front.handle(self, method, path, body, close, auth)
                if self.fd < 0:
                    return
            if inq or self.closing or not self.held or not self.reading or self._full():
                break
            data = self.held
            if len(data) > _FEED:
                self.held = data[_FEED:]
                data = data[:_FEED]
            else:
                self.held = b""
            self._feed(data)
        if self.fd < 0:
            return
        if self.out is None and not self.slots and not inq:
            if self.closing:
                self._linger()
                return
            if not self.reading and not self.held:
                self.close()  # half-closed and all answered
                return
        self._watch()

    def _feed(self, data):
        was = self.phase
        try:
            self.parser.feed_data(data)
        except _Refusal as r:
            self._refuse(r)
            return
        except httptools.HttpParserUpgrade:
            self.reading = False  # no protocol is switched to: the request is answered and the connection ends
            self.held = b""
            return
        except httptools.HttpParserError as e:
            if isinstance(e.__context__, _Refusal):  # raised in a callback: httptools wraps it
                self._refuse(e.__context__)
                return
            if isinstance(e, httptools.HttpParserCallbackError):  # a bug of ours in a handler: not the client's
                log.error("request_handler_failed", exc_info=e.__context__)
                self.close()
                return
            if not self.reading:  # bytes after a request that ended the connection: not read, not answered
                self.held = b""
                return
            self._refuse(_Refusal(400, "bad_request", "malformed request: %s" % (e.args[0] if e.args else e)))
            return
        phase = self.phase
        if phase == _HEAD:
            # a head still in progress after a piece: all of that piece was head when the head was in progress
            # before it (or began with it: readable() marks that). A head that ends inside a piece is at most that
            # piece (_FEED), so a head is refused at MAX_HEAD, or by MAX_HEAD + _FEED when it began mid-piece.
            if was == _HEAD:
                self.head_fed += len(data)
                self.rare = True
            if self.head_fed >= MAX_HEAD:
                try:
                    self._head_too_large()
                except _Refusal as r:
                    self._refuse(r)
        elif phase == _BODY:
            if self.expect and not self.continued and not self.inq and not self.held:
                self.continued = True
                self._emit(_CONTINUE, False)  # in its place: after every earlier answer
            if self.nbody != self.counted:
                self.home.count(self)

    def _refuse(self, r):
        """The request is refused after every request parsed before it is answered; nothing more is read."""
        self.reading = False
        self.held = b""
        if self.counted:
            self.home.uncount(self)
        self.inq.append((None, r, None, True, None))

    def _refused(self, r):
        if r.answer is not None:
            self.answer(r.status, r.answer, close=True, extra=r.extra)
            return
        if r.source is not None:
            status, answer = self.front.gw.refuse(r.source, r.status, r.code, str(r))
        else:
            status, answer = r.status, {"ok": False, "error": r.code, "message": str(r)}
        self.answer(status, answer, close=True, extra=r.extra)

    @staticmethod
    def _encode(status, payload, close, ctype=_JSON, extra=b""):
        out = payload if isinstance(payload, bytes) else _encode_answer(payload).encode("utf-8", "backslashreplace")
        if status == 200 and not close and not extra and ctype is _JSON:
            return _JSON_200 % (len(out), out)
        return _head(status, ctype, len(out), close=close, extra=extra) + out

    def answer(self, status, payload, *, close=False, ctype=_JSON, extra=b""):
        if status == 200 and not close and not extra and ctype is _JSON and type(payload) is not bytes:
            self.answer_ok(payload)
        elif not self.closing:
            self._emit(self._encode(status, payload, close, ctype, extra), close)

    def answer_ok(self, payload):
        """answer(200, payload) on a connection that stays open: nearly every answer, so the shortest way."""
        if self.closing:
            return
        out = _encode_answer(payload).encode("utf-8", "backslashreplace")
        data = _JSON_200 % (len(out), out)
        if self.slots:  # an earlier answer waits for the disk: this one waits behind it
            self.slots.append([data, False])
        elif self.out is not None:
            self.out += data
        else:
            self._send(data)

    def reserve(self):
        """A place for an answer that comes later (the disk): answers after it wait behind it."""
        slot = [None, False]
        self.slots.append(slot)
        return slot

    def fill(self, slot, status, payload, *, close=False):
        """The reserved answer is ready: it and every ready answer behind it are written, in order."""
        slots = self.slots
        if self.fd < 0:
            return
        slot[0] = self._encode(status, payload, close)
        slot[1] = close
        while slots and slots[0][0] is not None:
            data, c = slots.popleft()
            self._write(data, c)
            if self.fd < 0:
                return
        self._pump()

    def _emit(self, data, close):
        if self.slots:
            self.slots.append([data, close])
        else:
            self._write(data, close)

    def _write(self, data, close):
        """Send an answer: one send() with the GIL released; what the socket does not take at once is kept, in
        order, and sent when the loop sees the socket writable."""
        if self.fd < 0 or self.closing:
            return  # nothing is sent after the answer that ends the connection
        if close:
            self.closing = True
            self.reading = False
            self.held = b""
            self.inq.clear()
        if self.out is not None:
            self.out += data
            return
        self._send(data)

    def _send(self, data):
        """One send() with the GIL released; what the socket does not take is kept, sent when it is writable."""
        try:
            n = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            self.close()
            return
        if n < len(data):
            self.out = bytearray(data[n:])
            self._watch()

    def _watch(self):
        """Wait for what the connection needs: to read (unless it has enough to do), to write (while answers wait)."""
        if self.mask == _IN and self.out is None and self.reading and not self.held and not self.inq:
            if len(self.slots) <= _MAX_WAITING:
                return  # the usual case: reading, nothing queued
        want = 0
        if self.lingering or (self.reading and not self.held and not self.inq and not self._full()):
            want = _IN
        if self.out is not None:
            want |= _OUT
        if want != self.mask:
            self.mask = want
            self.home.poller.modify(self.fd, want)

    def _linger(self):
        """After the answer that ends the connection: no more is sent, and what the client still sends is read and
        dropped for a while, so the kernel does not answer it with a reset that could destroy that answer."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.close()
            return
        self.lingering = True
        self.since = self.home.now
        self._watch()

    def expire(self, status, code, message):
        """A deadline passed: 408 when nothing else is owed to the client, then the connection ends."""
        if self.out is None and not self.slots and not self.inq and not self.closing:
            try:
                self.sock.send(self._encode(status, {"ok": False, "error": code, "message": message}, True))
            except OSError:
                pass
        self.close()

    def close(self):
        """Once, from the loop's thread: the socket is closed and forgotten, and nothing is sent on it again (an
        answer whose alarm reaches the disk later finds fd < 0 and is dropped)."""
        self.closing = True
        if self.fd < 0:
            return
        home = self.home
        if self.counted:
            home.uncount(self)
        home.conns.pop(self.fd, None)  # (closing the socket takes it out of the epoll set)
        self.fd = -1
        self.out = None
        self.held = b""
        self.inq.clear()
        self.slots.clear()
        self.body = None
        try:
            self.sock.close()
        except OSError:
            pass


class _Loop:
    """One thread's event loop: its own listening socket (SO_REUSEPORT when there are several), an epoll (poll where
    there is none) over it and its connections, a wake-up pipe for callbacks from other threads (a persister
    reporting a write), and the deadlines of the answers waiting for the disk, in a FIFO (they all wait the same
    persist_wait_s, so the first is always the earliest)."""

    def __init__(self, front, sock, *, max_connections, max_partial):
        self.front = front
        self.sock = sock
        self.conns = {}  # fd -> _Conn
        self.calls = collections.deque()  # callbacks handed over from other threads
        self.timers = collections.deque()  # (deadline, callback), in deadline order
        self.stopped = False
        self.thread: threading.Thread | None = None
        self.now = time.monotonic()
        self.max_connections = max_connections
        self.max_partial = max_partial
        self.partial = 0  # body bytes incomplete requests hold (counted ones)
        self.partials = {}  # conns holding counted body bytes, in the order they began holding
        self.peak = 0  # connections at most since memory was last given back
        self.rbuf = bytearray(_RECV)  # what a connection's recv() fills
        self.rview = memoryview(self.rbuf)
        self.shed = _Episode("connections_shed")
        self.head_timeouts = _Episode("request_head_timeouts")
        self.body_timeouts = _Episode("request_body_timeouts")
        self.partial_refused = _Episode("partial_bodies_refused")
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

    def count(self, conn):
        """conn's incomplete body grew: counted against max_partial_body_bytes; over it, the newest offender (the
        connection that began holding a body last) is answered 503 and closed, until the rest fit."""
        self.partial += conn.nbody - conn.counted
        conn.counted = conn.nbody
        self.partials.setdefault(conn, None)
        while self.partial > self.max_partial and self.partials:
            victim = next(reversed(self.partials))
            self.partial_refused.note(
                self.now, held_bytes=self.partial, max_partial_body_bytes=self.max_partial, connections=len(self.conns)
            )
            victim.expire(
                503,
                "busy",
                "too many incomplete request bodies at once (gateway.max_partial_body_bytes): send it again",
            )

    def uncount(self, conn):
        self.partial -= conn.counted
        conn.counted = 0
        self.partials.pop(conn, None)

    def _make_room(self, now):
        """At max_connections: close the lingering ones, then the oldest idle keep-alive connections, then the
        oldest slow ones (a head or body in progress, or nothing sent yet), a few at a time; one with an answer
        owed (handled, or waiting for the disk) is never shed."""
        want = max(1, len(self.conns) - self.max_connections + 1 + self.max_connections // 64)
        young = now - SHED_YOUNG_S
        ranked = []
        for c in self.conns.values():
            if c.lingering:
                rank = 0
            elif c.slots or c.inq or c.out is not None or c.closing:
                continue
            elif c.phase == _IDLE:
                rank = 1
            elif c.since < young:
                rank = 2
            else:
                rank = 3
            ranked.append((rank, c.since, c.fd, c))
        victims = heapq.nsmallest(want, ranked)
        for _r, _s, _fd, c in victims:
            c.close()
        if victims:
            self.shed.note(now, connections=len(self.conns), max_connections=self.max_connections)
            self.shed.count += len(victims) - 1
            self.shed.in_episode += len(victims) - 1
        return bool(victims)

    def _accept(self):
        front = self.front
        for _ in range(ACCEPT_BATCH):
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
            now = self.now = time.monotonic()
            if len(self.conns) >= self.max_connections and not self._make_room(now):
                s.close()  # every connection owes an answer: this one waits for none
                self.shed.note(now, connections=len(self.conns), max_connections=self.max_connections)
                continue
            s.setblocking(False)
            try:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            c = _Conn(front, self, s, now)
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
        monotonic = time.monotonic
        sweep_at = monotonic() + SWEEP_S
        started.set()
        try:
            while not self.stopped:
                now = monotonic()
                wait = sweep_at - now
                if timers:
                    wait = min(wait, timers[0][0] - now)
                if calls:
                    wait = 0
                try:
                    events = poll(max(wait, 0) * scale)
                except InterruptedError:
                    continue
                self.now = now = monotonic()
                accept = False
                for fd, ev in events:
                    c = conns.get(fd)
                    if c is not None:
                        if ev & _IN_ERR:
                            c.readable()
                        if ev & _OUT and c.fd >= 0:
                            c.writable()
                    elif fd == lfd:
                        accept = True  # after the reads: a connection closed here cannot meet its own stale event
                    elif fd == rfd:
                        try:
                            os.read(rfd, 4096)
                        except (BlockingIOError, InterruptedError):
                            pass
                        self._woken = False
                if accept:
                    self._accept()
                while calls:
                    calls.popleft()()
                if timers:
                    now = monotonic()
                    while timers and timers[0][0] <= now:
                        timers.popleft()[1]()
                if now >= sweep_at:
                    sweep_at = now + (SWEEP_S if self._sweep(now) else SWEEP_AGAIN_S)
        finally:
            for c in list(conns.values()):
                c.close()
            close = getattr(self.poller, "close", None)  # select.poll (no epoll: not Linux) has nothing to close
            if close is not None:
                close()
            self.sock.close()
            with self._pipe_lock:
                self._closed = True
                os.close(self._rfd)
                os.close(self._wfd)

    def _sweep(self, now):
        """Connections past a deadline are closed (408 first where a request is cut short), at most SWEEP_BATCH
        per turn so that a thousand expiring together do not hold up a request meanwhile. True: all done."""
        cfg = self.front
        done = 0
        head_limit = now - cfg.head_timeout_s
        body_limit = now - cfg.body_timeout_s
        idle_limit = now - IDLE_S
        linger_limit = now - LINGER_S
        for c in list(self.conns.values()):
            if c.fd < 0:
                continue
            if done >= SWEEP_BATCH:
                return False
            done += 1
            if c.lingering:
                if c.since < linger_limit:
                    c.close()
            elif c.phase == _HEAD and c.since < head_limit:
                self.head_timeouts.note(now, connections=len(self.conns), head_timeout_s=cfg.head_timeout_s)
                c.expire(408, "timeout", "the request head did not arrive within %g s" % cfg.head_timeout_s)
            elif c.phase == _BODY and c.since < body_limit:
                self.body_timeouts.note(now, connections=len(self.conns), body_timeout_s=cfg.body_timeout_s)
                c.expire(408, "timeout", "the request body did not arrive within %g s" % cfg.body_timeout_s)
            elif c.last < idle_limit and not c.slots and not c.inq:
                c.close()
            else:
                done -= 1
        ended = False
        for ep in (self.shed, self.head_timeouts, self.body_timeouts, self.partial_refused):
            ended = ep.check(now) or ended
        n = len(self.conns)
        if n > self.peak:
            self.peak = n
        elif ended or (self.peak >= TRIM_AFTER and n <= self.peak // 8):
            self.peak = n
            give_back_memory()
        return True


class IngestFront:
    """Serves one Gateway. run() blocks until stop() (or SIGTERM handled by the caller).

    io_loops threads, each with its own event loop (_Loop) and its own listening socket on the port (SO_REUSEPORT:
    the kernel spreads connections over them). recv, send and the wait in epoll release the GIL, so a loop's
    syscalls run while another thread runs Python. The Gateway is thread-safe."""

    def __init__(self, gw, config, io_loops=None):
        self.gw = gw
        self.cfg = config
        self.max_body = config.max_body
        self.head_timeout_s = float(getattr(config, "head_timeout_s", 10.0))
        self.body_timeout_s = float(getattr(config, "body_timeout_s", 30.0))
        self.auth = gw.auth_required  # the ingest endpoints require a bearer token ([ingest], config.py)
        self.io_loops = max(1, int(io_loops or getattr(config, "io_loops", 1)))
        self.max_connections = self._connection_cap(config)
        self.max_partial_body_bytes = int(getattr(config, "max_partial_body_bytes", 4 << 20))
        self.loops = []
        self.port = None
        gw.front_status = self.status
        self.ingest = {
            "/api/v1/gpu_event": ("gpu_event", gw.gpu_event),
            "/api/v1/alertmanager": ("alertmanager", lambda b, w: gw.alertmanager(b, "alertmanager", w)),
            "/api/v1/grafana": ("grafana", lambda b, w: gw.alertmanager(b, "grafana", w)),
        }

    @staticmethod
    def _connection_cap(config):
        room = descriptor_room(len(getattr(config, "terminals", {}) or {}))
        want = getattr(config, "max_connections", None)
        if want is None:
            return min(room, DEFAULT_MAX_CONNECTIONS)
        if want > room:
            log.warning(
                "max_connections_lowered",
                extra={
                    "fields": {
                        "max_connections": want,
                        "to": room,
                        "reason": "the process's file-descriptor limit (RLIMIT_NOFILE; LimitNOFILE= in the unit)",
                    }
                },
            )
            return room
        return want

    def status(self):
        """What /healthz and /metrics say of this front (Gateway.front_status)."""
        failing = [h for h in self.loops if h.accept_failing]
        return FrontStatus(
            connections=sum(len(h.conns) for h in self.loops),
            accept_failures=sum(h.accept_failures for h in self.loops),
            accept_failing=bool(failing),
            accept_error=failing[0].accept_error if failing else None,
            shed=sum(h.shed.count for h in self.loops),
            head_timeouts=sum(h.head_timeouts.count for h in self.loops),
            body_timeouts=sum(h.body_timeouts.count for h in self.loops),
            partial_refused=sum(h.partial_refused.count for h in self.loops),
            max_connections=self.max_connections,
        )

    def source_of(self, path):
        h = self.ingest.get(path)
        return h[0] if h else None

    # ---- requests -----------------------------------------------------------------------------------------

    def handle(self, conn, method, path, body, close, auth=None):
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
            except Exception as e:  # one bad request must not take the server down
                log.exception("ingest_error", extra={"fields": {"source": source, "error": str(e)}})
                conn.answer(500, {"ok": False, "error": "internal", "message": "internal error"}, close=close)
                return
            if not waits:
                if status == 200 and not close:
                    conn.answer_ok(answer)
                else:
                    conn.answer(status, answer, close=close)
                return
            self._after_durable(conn, source=source, status=status, answer=answer, close=close, waits=waits)
            return
        if path in incident_paths:  # the incident history and the CLI's ACK (history.py)
            status, answer, extra = serve_incidents(self.gw, method, path, body, auth)
            conn.answer(status, answer, close=close, extra=extra)
        elif path == "/healthz" and method == "GET":
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
        """Answer once every (persister, gen) is on disk; 503 if one fails or takes over persist_wait_s. The answer's
        place in the connection's order is taken now."""
        loop = conn.home
        slot = conn.reserve()
        state = {"left": len(waits), "done": False}

        def finish(*, ok):
            if state["done"]:
                return
            if not ok:
                state["done"] = True
                st, ans = self.gw.not_durable_answer(source)
                conn.fill(slot, st, ans, close=close)
                return
            state["left"] -= 1
            if state["left"] == 0:
                state["done"] = True
                conn.fill(slot, status, answer, close=close)

        def from_thread(ok):
            loop.call_soon_threadsafe(lambda: finish(ok=ok))

        # no cancel: a deadline that comes after the answer finds state["done"]
        loop.call_later(self.cfg.persist_wait_s, lambda: finish(ok=False))
        for p, gen in waits:
            p.add_waiter(gen, from_thread)

    # ---- lifecycle ----------------------------------------------------------------------------------------

    def run(self, host, port, ready=None, *, socks=None):
        """Serve until stop(). socks: listening sockets bound already (listen()), one per loop; else they are
        bound here (io_loops of them on one port)."""
        # Everything built at start lives to the end: out of the collector's way, and collections rarer, since a
        # request allocates a few hundred short-lived objects and creates no cycles
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 20, 50)
        if socks is None:
            first = listen(host, port, reuse_port=self.io_loops > 1)
            port = first.getsockname()[1]
            socks = [first] + [listen(host, port, reuse_port=True) for _ in range(self.io_loops - 1)]
        self.port = socks[0].getsockname()[1]
        n = len(socks)
        per_conns = max(16, self.max_connections // n)
        per_partial = max(self.max_body, self.max_partial_body_bytes // n)
        self.loops = [_Loop(self, sock, max_connections=per_conns, max_partial=per_partial) for sock in socks]
        starts = []
        for i, home in enumerate(self.loops):
            started = threading.Event()
            starts.append(started)
            t = home.thread = threading.Thread(target=home.run, args=(started,), name="http-%d" % i, daemon=True)
            t.start()
        for st in starts:
            st.wait(10)
        if ready is not None:
            ready()
        for home in self.loops:
            t = home.thread
            while t is not None and t.is_alive():
                t.join(0.5)  # in slices: the main thread stays responsive to SIGTERM/SIGINT

    def stop(self):
        for home in self.loops:
            home.stop()
