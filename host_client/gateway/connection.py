"""One client connection of the gateway's HTTP front: llhttp's callbacks (httptools), the limits llhttp leaves to us,
the answers in request order, and the deadlines it reports to its loop (server.py) when asked.

Framing is llhttp's and follows RFC 9112: duplicate or malformed Content-Length, Content-Length with
Transfer-Encoding, whitespace before a colon, obs-fold, a bare CR or LF in the head are 400 and close; chunked
bodies are decoded. What llhttp lets through is checked here: exactly one Host on HTTP/1.1 (400), the version (505),
the body limit (413, also while a chunked body is decoded), the head limit (431), no 100 (Continue) to HTTP/1.0.

A complete request goes to the application (application.py): it returns the answer's bytes, or a deferred answer
(one that waits for the disk) whose place in this connection's order is held until it is filled. Answers leave in
request order; a client that half-closes (shutdown(SHUT_WR) after its requests) gets every answer before the close;
a client that pipelines and never reads is no longer read once 64 KiB of its answers wait (TCP makes it wait).

This file knows its loop only through the methods named in Home; it imports neither the loop nor the application.
"""

from __future__ import annotations

import collections
import logging
import select
import socket
from typing import Protocol

import httptools

from .answers import CONTINUE, refusal

log = logging.getLogger("sentinel.gateway")

MAX_HEAD = 16384
IDLE_S = 60.0
LINGER_S = 2.0  # after a closing answer: how long what the client still sends is read and dropped
LINGER_MAX = 1 << 20  # ... and how much of it
RECV = 65536  # the loop's read buffer
_FEED = 16384  # bytes handed to the parser at a time: parsed, unanswered requests of one connection stay this small
_WINDOW = 65536  # answer bytes a connection may leave unsent before its requests are no longer read
_MAX_WAITING = 64  # answers of one connection that may wait for the disk before its requests are no longer read
IN = select.EPOLLIN if hasattr(select, "epoll") else select.POLLIN
OUT = select.EPOLLOUT if hasattr(select, "epoll") else select.POLLOUT

# connection phases
_NEW, _IDLE, _HEAD, _BODY = 0, 1, 2, 3
# what a deadline ends (Conn.deadline)
LINGER, HEAD, BODY, IDLE = "linger", "head", "body", "idle"
# shed ranks (Conn.shed_rank): lower is shed first
_SHED_LINGERING, _SHED_IDLE, _SHED_SLOW, _SHED_YOUNG = 0, 1, 2, 3

_METHODS = {m.encode(): m for m in ("GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH")}
# request targets as sent -> their path (str): the same few targets come on every request; bounded in number and
# length, since a client chooses them
_PATHS: dict = {}
_PATH_MEMO = 256
_PATH_MEMO_TARGET = 512


class Home(Protocol):
    """What a connection asks of the loop that serves it (server.py's _Loop)."""

    now: float  # the time of the loop's current turn
    rview: memoryview  # the loop's read buffer

    def watch(self, fd: int, mask: int) -> None: ...
    def hold(self, conn: Conn, nbytes: int) -> None: ...
    def release(self, conn: Conn) -> None: ...
    def forget(self, fd: int) -> None: ...
    def call_later(self, delay: float, fn) -> None: ...
    def call_soon_threadsafe(self, fn) -> None: ...


class Limits:
    """What one connection may send: the body's size, the head's and the body's deadlines."""

    __slots__ = ("max_body", "head_timeout_s", "body_timeout_s")

    def __init__(self, *, max_body: int, head_timeout_s: float, body_timeout_s: float):
        self.max_body = max_body
        self.head_timeout_s = head_timeout_s
        self.body_timeout_s = body_timeout_s


def _path_of(url):
    """The path of a request target: origin-form up to its query, absolute-form's path (RFC 9112 3.2), "*" as
    sent. Raises _Refusal for a target llhttp's URL parser cannot read."""
    if url[:1] == b"/":
        path = url if b"?" not in url else url[: url.find(b"?")]
    else:  # absolute-form (RFC 9112 3.2.2), or "*"
        try:
            path = httptools.parse_url(url).path or b"/"
        except httptools.HttpParserInvalidURLError:
            raise _Refusal(refusal(400, "bad_request", "malformed request target")) from None
    path = path.decode("latin-1")
    if len(url) <= _PATH_MEMO_TARGET:
        if len(_PATHS) >= _PATH_MEMO:
            _PATHS.clear()
        _PATHS[url] = path
    return path


class _Refusal(Exception):
    """Raised from a parser callback: the request is answered with data (which closes) and the connection ends."""

    def __init__(self, data: bytes):
        super().__init__("refused")
        self.data = data


class Conn:
    """One client connection, served by one loop's thread. Bytes received are fed to the connection's llhttp parser
    (held: those not fed yet); complete requests wait in inq and are handled in order; each answer takes its place in
    slots when an earlier one still waits for the disk, else it is written (out: what the socket did not take)."""

    __slots__ = (
        "app",
        "limits",
        "home",
        "sock",
        "fd",
        "parser",
        "feeding",
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

    def __init__(self, app, limits: Limits, home: Home, sock, now: float):
        self.app = app  # application.py's Application: handle(), too_large()
        self.limits = limits
        self.home = home  # the loop whose thread serves this connection
        self.sock = sock
        self.fd = sock.fileno()
        self.parser = httptools.HttpRequestParser(self)
        self.feeding = False  # inside parser.feed_data: close() leaves the parser to _feed to drop
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
        self.mask = IN
        self.served = 0
        self.counted = 0  # body bytes of an incomplete request the loop counts against max_partial_body_bytes
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

    # ---- what the loop asks ---------------------------------------------------------------------------------

    def peer(self) -> str | None:
        """The client's address ("127.0.0.1:50412", "[::1]:50412"), asked of the socket only when a refusal's log
        line names it."""
        try:
            addr = self.sock.getpeername()
        except OSError:
            return None  # it hung up meanwhile
        if isinstance(addr, tuple):
            host, port = addr[0], addr[1]
            return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)
        return str(addr) or None

    def is_open(self) -> bool:
        return self.fd >= 0

    def deadline(self):
        """(when, what): the time this connection's current deadline passes and what it ends (LINGER, HEAD, BODY,
        IDLE), or None while it has none (an answer is owed, or it is closed)."""
        if self.fd < 0:
            return None
        if self.lingering:
            return self.since + LINGER_S, LINGER
        phase = self.phase
        if phase == _HEAD:
            return self.since + self.limits.head_timeout_s, HEAD
        if phase == _BODY:
            return self.since + self.limits.body_timeout_s, BODY
        if not self.slots and not self.inq:
            return self.last + IDLE_S, IDLE
        return None

    def shed_rank(self, young: float):
        """(rank, since) for shedding at max_connections, lowest first: lingering, idle keep-alive, slow (a head or
        body in progress, or nothing sent yet) since before young, slow and younger; None: never shed, an answer is
        owed (handled, or waiting for the disk)."""
        if self.lingering:
            return _SHED_LINGERING, self.since
        if self.slots or self.inq or self.out is not None or self.closing:
            return None
        if self.phase == _IDLE:
            return _SHED_IDLE, self.since
        return (_SHED_SLOW if self.since < young else _SHED_YOUNG), self.since

    def time_out(self, what):
        """The deadline of what (deadline()) passed: a request cut short is answered 408, then the connection ends."""
        if what == HEAD:
            self.expire(408, "timeout", "the request head did not arrive within %g s" % self.limits.head_timeout_s)
        elif what == BODY:
            self.expire(408, "timeout", "the request body did not arrive within %g s" % self.limits.body_timeout_s)
        else:
            self.close()

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
                raise _Refusal(refusal(505, "http_version", "HTTP/1.0 and HTTP/1.1 only"))
            if self.hosts > 1:
                raise _Refusal(refusal(400, "bad_request", "more than one Host header (RFC 9112 3.2)"))
            self.expect = False  # no 1xx to an HTTP/1.0 client (RFC 9110 10.1.1)
        elif self.hosts != 1:
            raise _Refusal(
                refusal(400, "bad_request", "an HTTP/1.1 request needs exactly one Host header (RFC 9112 3.2)")
            )
        path = _PATHS.get(self.url)
        if path is None:
            path = _path_of(self.url)
        self.path = path
        m = p.get_method()
        self.method = _METHODS.get(m) or m.decode("latin-1")
        if self.length > self.limits.max_body:
            self._too_large()

    def on_body(self, data):
        n = self.nbody = self.nbody + len(data)
        if n > self.limits.max_body:
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
            self._release()
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
            if self.inq or self.closing or len(self.out or b"") > _WINDOW or len(self.slots) > _MAX_WAITING:
                self.inq.append((self.method, self.path, data, close, auth))  # answered in turn (_pump)
                return
        self._serve(self.method, self.path, data, close, auth)

    def _too_large(self):
        """The application says what a body over the limit gets (401 first for an ingest endpoint without its
        token, else 413); it ends the connection."""
        raise _Refusal(self.app.too_large(self.path, self.auth, self.limits.max_body, self.peer))

    # ---- the loop's events ------------------------------------------------------------------------------------

    def readable(self):
        home = self.home
        try:
            # into the loop's one buffer (the GIL is released for the syscall): no 64 KiB allocation per read, which
            # a flood of them leaves scattered over the heap; what must be kept is copied at its size
            n = self.sock.recv_into(home.rview)
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
                if self.mask != IN:
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
                self._release()
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

    def _serve(self, method, path, body, close, auth):
        """The application answers the request: its bytes now, or a deferred answer whose place is held."""
        self.served += 1
        a = self.app.handle(method, path, body, close, auth, self.peer)
        if type(a) is bytes:
            if self.slots:  # an earlier answer waits for the disk: this one waits behind it
                self.slots.append([a, close])
            else:
                self._write(a, close)
            return
        self._defer(a, close)

    def _defer(self, a, close):
        """A deferred answer holds its place in the order until it is filled. (A method of its own: its closure
        would make every _serve call build cells for self and slot.)"""
        slot = [None, close]
        self.slots.append(slot)
        a.start(lambda data: self._fill(slot, data), self.home.call_soon_threadsafe, self.home.call_later)

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
                    self._emit(path, True)
                else:
                    self._serve(method, path, body, close, auth)
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
        self.feeding = True
        try:
            self.parser.feed_data(data)
        except _Refusal as r:
            self._refuse(r.data)
            return
        except httptools.HttpParserUpgrade:
            self.reading = False  # no protocol is switched to: the request is answered and the connection ends
            self.held = b""
            return
        except httptools.HttpParserError as e:
            if isinstance(e.__context__, _Refusal):  # raised in a callback: httptools wraps it
                self._refuse(e.__context__.data)
                return
            if isinstance(e, httptools.HttpParserCallbackError):  # a bug of ours in a handler: not the client's
                log.error("request_handler_failed", exc_info=e.__context__)
                self.close()
                return
            if not self.reading:  # bytes after a request that ended the connection: not read, not answered
                self.held = b""
                return
            self._refuse(refusal(400, "bad_request", "malformed request: %s" % (e.args[0] if e.args else e)))
            return
        finally:
            self.feeding = False
            if self.fd < 0:
                self._drop_parser()  # closed meanwhile (close() left it): see close()
        phase = self.phase
        if phase == _HEAD:
            # a head still in progress after a piece: all of that piece was head when the head was in progress
            # before it (or began with it: readable() marks that). A head that ends inside a piece is at most that
            # piece (_FEED), so a head is refused at MAX_HEAD, or by MAX_HEAD + _FEED when it began mid-piece.
            if was == _HEAD:
                self.head_fed += len(data)
                self.rare = True
            if self.head_fed >= MAX_HEAD:
                self._refuse(refusal(431, "request_header_too_large", "request head over %d bytes" % MAX_HEAD))
        elif phase == _BODY:
            if self.expect and not self.continued and not self.inq and not self.held:
                self.continued = True
                self._emit(CONTINUE, False)  # in its place: after every earlier answer
            if self.nbody != self.counted:
                self.counted = self.nbody
                self.home.hold(self, self.nbody)

    def _refuse(self, data):
        """The request is refused (data: its answer, which closes) after every request parsed before it is
        answered; nothing more is read."""
        self.reading = False
        self.held = b""
        if self.counted:
            self._release()
        self.inq.append((None, data, None, True, None))

    def _release(self):
        """This connection's incomplete body no longer counts against max_partial_body_bytes."""
        self.counted = 0
        self.home.release(self)

    def _fill(self, slot, data):
        """A deferred answer is ready: it and every ready answer behind it are written, in order."""
        slots = self.slots
        if self.fd < 0:
            return
        slot[0] = data
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
        if self.mask == IN and self.out is None and self.reading and not self.held and not self.inq:
            if len(self.slots) <= _MAX_WAITING:
                return  # the usual case: reading, nothing queued
        want = 0
        if self.lingering or (self.reading and not self.held and not self.inq and not self._full()):
            want = IN
        if self.out is not None:
            want |= OUT
        if want != self.mask:
            self.mask = want
            self.home.watch(self.fd, want)

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
        """A deadline passed, or the loop needs this connection's bytes back: status when nothing else is owed to
        the client, then the connection ends."""
        if self.out is None and not self.slots and not self.inq and not self.closing:
            try:
                self.sock.send(refusal(status, code, message))
            except OSError:
                pass
        self.close()

    def close(self):
        """Once, from the loop's thread: the socket is closed and forgotten, and nothing is sent on it again (an
        answer whose alarm reaches the disk later finds fd < 0 and is dropped)."""
        self.closing = True
        if self.fd < 0:
            return
        if self.counted:
            self._release()
        self.home.forget(self.fd)  # (closing the socket takes it out of the epoll set)
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
        if not self.feeding:
            self._drop_parser()

    def _drop_parser(self):
        """The parser holds this connection's callbacks, a cycle only the collector would free, and the front sets it
        to run rarely: a flood of closed connections stayed in memory. Dropped at close, or by _feed once llhttp has
        returned (it may still call back after an answer that closed)."""
        try:
            del self.parser
        except AttributeError:  # dropped already
            pass
