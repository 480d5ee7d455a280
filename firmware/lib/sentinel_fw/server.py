# The HTTP server: microdot's routes and answers, served by a connection loop of our own that treats sockets as a
# budget. Every request goes to Sentinel.handle_http, the core's Receiver for the signed POSTs, so the board and
# the emulator answer alike (same status, error code and JSON); wrong methods (OPTIONS included) and unknown paths
# get the core's JSON answers too.
#
# Why not microdot's own start_server: asyncio's accept loop takes every connection (an idle client holds a socket
# and ~760 B of heap for good; with lwIP's 10 sockets a few idle clients made the box deaf) and spins when
# accept() fails; microdot reads a request without a deadline and answers an out-of-memory as 400 or 500. Here:
# - at most http.max_conn connections at once. The listen queue is emptied at each turn (a full queue makes the
#   kernel drop every new SYN, a P0's too, which its sender retries only after 1 s, then 3 s); each new connection
#   is looked at (what it has sent so far, read without waiting) and, when every place is taken, the worst of the lot
#   is closed: one that has sent nothing (the oldest first), then the slowest (fewest bytes per second since its
#   accept). A new one whose request head arrived whole takes the place of the worst; one with part of a head
#   takes only an idle one's; else it is closed at once. One that has sent nothing yet is looked at again at each turn
#   for _GRACE_MS (its socket only, no place), then judged; one that has sent nothing by then takes no place. One
#   being answered is never shed; while all are, new connections wait in the listen backlog;
# - deadlines from the accept: the request line within LINE_MS, the headers within HEAD_MS, the body within
#   BODY_MS, the answer written within ANSWER_MS; a connection past its deadline is closed;
# - a request line or header longer than MAX_LINE, more than MAX_HEADERS headers, a Content-Length that is not
#   decimal: 400; a body over http.max_body: the core's 413, without reading more than DRAIN bytes of it;
# - running out of heap anywhere in a request: 503 "try again" (Retry-After: 1), the connection closed; a page that
#   runs out while streaming is cut off and closed (its status line is already out).
# The accept loop polls the listening socket every POLL_MS (as the button task polls its pin) and takes what waits
# there at once (at most `backlog` per turn, then a yield); it never spins on a failing accept().
#
# The handlers are module-level `async def` functions on purpose: microdot asks inspect.iscoroutinefunction()
# whether to await a handler, and MicroPython answers False for closures and bound methods, which then fail (500).
# So the running Sentinel is held in a module global (there is one terminal per board).
import sys

from microdot import Microdot, Request, Response

from sentinel_core import httphead
from sentinel_core.compat import const
from sentinel_fw import log, ticks

JSON = {"Content-Type": "application/json"}
TEXT = {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
RETRY = {"Content-Type": "application/json", "Retry-After": "1"}  # a 503: out of memory, try again in a second
PATHS = ("/api/v1/send_msg", "/api/v1/ack", "/api/v1/heartbeat", "/api/v1/unmute", "/api/v1/status", "/metrics")
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]

# The default of http.max_conn: MicroPython's ESP32 build keeps ESP-IDF's 10 lwIP sockets (CONFIG_LWIP_MAX_SOCKETS),
# less the listener, the new connection being looked at, and NTP's.
MAX_CONN = const(7)
# The default of http.backlog: the most connections taken from the listen queue per turn, and the bound of those
# waiting for their first bytes (each holds its socket object on the heap).
BACKLOG = const(128)
# The listen() argument: the kernel's accept queue on the Unix port (capped by net.core.somaxconn), never heap.
# A full queue makes Linux drop each new SYN, a P0's too, retried by its sender only after 1 s: at 128 a P0 took
# 1.02 s once under 300 reconnecting slow sockets on a loaded machine (test_runtime_unix), so the queue is as
# deep as the attacker counts the benches use. On the ESP32 lwIP keeps at most its accept mailbox
# (CONFIG_LWIP_TCP_ACCEPTMBOX_SIZE, 6) whatever this says, and resets a connection beyond it.
_QUEUE = const(1024)
LINE_MS = const(2000)
HEAD_MS = const(4000)
BODY_MS = const(8000)
ANSWER_MS = const(10000)
POLL_MS = const(10)
_GRACE_MS = const(250)  # a new connection that has sent nothing is looked at again for this long before it is judged
MAX_LINE = const(1024)
MAX_HEADERS = const(32)
DRAIN = const(16384)  # a refused body up to this size is read and dropped, so the client reads the 413
_CHUNK = const(512)
_LINE = const(0)
_HEAD = const(1)
_BODY = const(2)
_ANSWER = const(3)

BUSY = b'{"ok": false, "error": "busy", "message": "out of memory; try again"}'
# The whole answer to an out-of-memory, ready in flash: writing it allocates nothing.
BUSY_HTTP = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    b"Content-Length: 69\r\n\r\n" + BUSY
)
BAD_REQUEST = b'{"ok": false, "error": "bad_request", "message": "malformed HTTP request"}'

_sentinel = None
_MPY = sys.implementation.name == "micropython"


class _Refused(Exception):
    # The request cannot be read: args are (status, JSON body) to answer before closing.
    pass


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
    return _Answer(body, status, JSON if status != 503 else RETRY)


_busy = None  # the 503 Response, made at boot (not while memory is short)
_scratch = None  # made at boot: what closing a connection reads unread input into


async def _out_of_memory(request, exc):
    return _busy


class _Conn:
    """One accepted connection: the stream microdot reads the request from and writes the answer to, with the
    deadlines and limits above. MicroPython: one asyncio Stream for both ways; CPython (tests): a reader and a
    writer."""

    def __init__(self, sock, reader, writer, t_ms, max_body, data=b""):
        self.sock = sock
        self.r = reader
        self.w = writer
        self.since = t_ms
        self.got = len(data)  # bytes received so far (what the budget sheds by)
        self.phase = _LINE
        self.deadline = ticks.add(t_ms, LINE_MS)
        self.task = None
        self.max_body = max_body
        self.buf = data  # what was read and not yet taken, from self.pos on (an offset: no copy per line)
        self.pos = 0
        self.headers = 0
        self.length = 0
        self.wrote = False
        self.closed = False

    def _enter(self, phase, ms):
        self.phase = phase
        self.deadline = ticks.add(self.since, ms)

    async def _more(self):
        b = await self.r.read(_CHUNK)
        if not b:
            raise EOFError()
        self.got += len(b)
        if self.pos < len(self.buf):
            self.buf = self.buf[self.pos :] + b
        else:
            self.buf = b
        self.pos = 0

    # -- what microdot's Request.create calls
    async def readline(self):
        while True:
            i = self.buf.find(b"\n", self.pos)
            if i >= 0:
                break
            if len(self.buf) - self.pos > MAX_LINE:
                raise _Refused(400, BAD_REQUEST)
            try:
                await self._more()
            except EOFError:
                line = self.buf[self.pos :]
                self.buf = b""
                self.pos = 0
                return line
        if i - self.pos > MAX_LINE:
            raise _Refused(400, BAD_REQUEST)
        line = self.buf[self.pos : i + 1]
        self.pos = i + 1
        if self.phase == _ANSWER:
            pass  # the rest of a refused head (drain_body)
        elif self.phase == _LINE:
            self._enter(_HEAD, HEAD_MS)
        elif line == b"\r\n" or line == b"\n":
            self._enter(_BODY, BODY_MS)
        else:
            self.headers += 1
            if self.headers > MAX_HEADERS:
                raise _Refused(400, BAD_REQUEST)
            self._header(line)
        return line

    def _header(self, line):
        # Content-Length is checked here, before microdot trusts it: a negative or non-decimal one would make it
        # wait for a body that never comes; a body over the limit is refused without reading it into the heap.
        if len(line) < 15 or line[14] != 58 or line[:14].lower() != b"content-length":  # 58 is ':'
            return
        v = line[15:].strip()
        if not v.isdigit() or len(v) > 9:
            raise _Refused(400, BAD_REQUEST)
        n = int(v)
        if n > self.max_body:
            self.length = n
            raise _Refused(
                413,
                (
                    '{"ok": false, "error": "too_large", "message": "body is %d bytes, at most %d"}'
                    % (n, self.max_body)
                ).encode(),
            )
        self.length = n

    async def readexactly(self, n):
        while len(self.buf) - self.pos < n:
            await self._more()
        b = self.buf[self.pos : self.pos + n] if self.pos or n < len(self.buf) else self.buf
        self.pos += n
        return b

    async def drain_body(self):
        # A refused body: read and drop it (bounded), so that the client gets to read the answer instead of a
        # reset for the data it is still sending.
        head = self.phase == _HEAD
        self.phase = _ANSWER
        if head:
            while True:  # the rest of the headers, up to the blank line (each line bounded as before)
                line = await self.readline()
                if line == b"\r\n" or line == b"\n" or not line:
                    break
        left = self.length - (len(self.buf) - self.pos)
        self.buf = b""
        self.pos = 0
        if left > DRAIN:
            return
        while left > 0:
            b = await self.r.read(_CHUNK if left > _CHUNK else left)
            if not b:
                return
            left -= len(b)

    # -- what microdot's Response.write calls
    async def awrite(self, data):
        self.wrote = True
        self.w.write(data)
        await self.w.drain()

    def close(self):
        if self.closed:
            return
        self.closed = True
        try:
            if _MPY:
                # What the client sent and nobody read (a request cut off by a MemoryError or a refusal) is
                # dropped first: a socket closed with unread input answers with a reset, which can reach the client
                # before the answer does. Into a buffer made at boot: this allocates nothing.
                sock = self.sock
                left = DRAIN
                while left > 0:
                    n = sock.readinto(_scratch)
                    if not n:
                        break
                    left -= n
                sock.close()
            else:
                self.w.close()
        except Exception:  # noqa: BLE001 - already gone
            try:
                self.sock.close()
            except Exception:  # noqa: BLE001
                pass


async def _read_request(web, c):
    # The request from connection c, read through c (its deadlines and bounds) with the core's head grammar,
    # sentinel_core.httphead, which the emulator's server reads with too (microdot's own parser takes what str.split,
    # str.strip and int() take, which differs between CPython and MicroPython). _Refused for an answer.
    headers = {}  # names as sent: the core looks them up case-insensitively; microdot reads none of them here
    try:
        method, url, version, n = await httphead.read(c.readline, Request.max_content_length, headers)
    except httphead.HeadError as e:
        raise _Refused(
            e.args[0], ('{"ok": false, "error": "%s", "message": "%s"}' % (e.args[1], e.args[2])).encode()
        ) from None
    try:
        body = await c.readexactly(n) if n else b""
    except EOFError:  # the client ended its side inside the body (it may still read the answer, as the emulator's)
        raise _Refused(
            400, b'{"ok": false, "error": "bad_request", "message": "the connection ended inside the body"}'
        ) from None
    return Request(web, ("", 0), method, url, version[5:], headers, body=body, sock=(c, c))


class Server:
    """The connection loop around a microdot app. max_conn: connections served at once; backlog: the listen
    queue."""

    def __init__(self, web, max_body, max_conn=MAX_CONN, backlog=BACKLOG):
        self.web = web
        self.max_body = max_body
        self.max_conn = max_conn
        self.backlog = backlog
        self.conns = []
        self.fresh = []  # (socket, accept ms) of new connections that have sent nothing yet, oldest first

    # -- one connection

    async def serve(self, c):
        """Read one request from c (a _Conn), answer it, close. Never raises (a handler's exception, a deadline or
        a shed is the end of this connection only)."""
        import asyncio

        try:
            try:
                req = await _read_request(self.web, c)
            except _Refused as e:
                req = e
            except (ValueError, IndexError, UnicodeError):  # a request line or header microdot cannot split
                req = _Refused(400, BAD_REQUEST)
            except EOFError:
                return
            if req is None:  # the client closed before a request line
                return
            c.deadline = ticks.add(c.since, ANSWER_MS)
            if isinstance(req, _Refused):
                if req.args[0] == 413:
                    _sentinel.glue.refusal("too_large")  # as the emulator's core counts it (/metrics)
                    await c.drain_body()
                c.phase = _ANSWER
                await Response(req.args[1], req.args[0], JSON).write(c)
                return
            c.phase = _ANSWER
            res = await self.web.dispatch_request(req)
            try:
                await res.write(c)
            finally:
                # A streamed page cut off (by a MemoryError): its generator's clean-up runs now, not at some
                # later collection (the metrics module is dropped there).
                body = res.body
                if hasattr(body, "close") and not isinstance(body, (bytes, str)):
                    try:
                        body.close()
                    except Exception:  # noqa: BLE001
                        pass
        except MemoryError:
            if not c.wrote:
                try:
                    c.w.write(BUSY_HTTP)
                    await c.w.drain()
                except BaseException:  # noqa: BLE001 - the client may be gone too
                    pass
        except asyncio.CancelledError:
            pass  # shed, or past its deadline: closed below
        except Exception as e:  # noqa: BLE001 - one connection's end, never the server's
            try:
                log("http: %s: %s" % (type(e).__name__, e))
            except MemoryError:
                pass
        finally:
            c.close()
            self._forget(c)

    def _forget(self, c):
        try:
            self.conns.remove(c)
        except ValueError:
            pass

    def _drop(self, c):
        # Close now (the socket is free at once) and cancel its task (it ends at its next wait).
        c.close()
        self._forget(c)
        if c.task is not None:
            c.task.cancel()

    def worst(self, t_ms, data=None):
        """The connection to shed first, or None when every one is being answered: one that has sent nothing (the
        oldest first), then the one with the fewest bytes per second since its accept. With data (what a new
        connection has sent): the one it takes the place of, None if it is to be closed itself: a whole request
        head takes the worst one's place (its body may follow in another segment, as http.client sends it), part of
        a head only an idle one's, nothing none."""
        w = None
        for c in self.conns:
            if c.phase == _ANSWER:
                continue
            if (
                w is None
                or (not c.got and (w.got or ticks.diff(c.since, w.since) < 0))
                or (c.got and w.got and (c.got * ticks.diff(t_ms, w.since) < w.got * ticks.diff(t_ms, c.since)))
            ):
                w = c
        if data is None or w is None or not w.got and data or data.find(b"\r\n\r\n") >= 0:
            return w
        return None

    def expire(self, t_ms):
        for c in list(self.conns) if len(self.conns) else ():
            if ticks.diff(t_ms, c.deadline) >= 0:
                self._drop(c)

    # -- the listening socket

    def listen(self, host, port):
        import socket

        ai = socket.getaddrinfo(host, port)[0]
        s = socket.socket(ai[0], socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(ai[-1])
        s.listen(_QUEUE)
        s.setblocking(False)
        return s

    async def admit(self, sock, since, t_ms):
        """A new connection (accepted at since): looked at (what has arrived, read without waiting) and served, or
        closed at once when every place is taken and it is not better than the worst (see the top of this file).
        One that has sent nothing yet waits in self.fresh, its socket only, and is looked at again at each turn for
        _GRACE_MS. True if it was served with bytes already in (it then gets a turn to take its request)."""
        import asyncio

        data = b""  # what it has sent so far, read without waiting
        try:
            while len(data) < self.max_body + MAX_LINE:
                b = sock.recv(_CHUNK)
                if not b:  # the end of its input
                    break
                data += b
        except OSError:  # EAGAIN: nothing more yet (or reset: its task sees that)
            pass
        if not data and ticks.diff(t_ms, since) < _GRACE_MS:
            if len(self.fresh) >= self.backlog:  # the oldest that has sent nothing goes first
                self.fresh.pop(0)[0].close()
            self.fresh.append((sock, since))
            return False
        if len(self.conns) >= self.max_conn:
            old = self.worst(t_ms, data)
            if old is None:
                sock.close()  # not better than the worst: closed at once
                return False
            self._drop(old)
        if _MPY:
            r = w = asyncio.StreamReader(sock)
        else:
            r, w = await asyncio.open_connection(sock=sock)
        c = _Conn(sock, r, w, since, self.max_body, data)
        self.conns.append(c)
        c.task = asyncio.create_task(self.serve(c))  # pyright: ignore[reportAttributeAccessIssue]
        return c.got > 0

    async def _step(self, s, poll):
        t = ticks.ms()
        self.expire(t)
        k = len(self.fresh)  # those that had sent nothing are looked at again first, oldest first
        n = 0
        while n < self.backlog:
            if len(self.conns) >= self.max_conn and self.worst(t) is None:
                break  # every place is being answered (a few ms): new ones wait where they are
            if k:
                k -= 1
                c, since = self.fresh.pop(0)  # back at the end if it still has sent nothing
            else:
                for _ in poll(0):
                    break
                else:
                    break  # nothing waits
                try:
                    c, _addr = s.accept()
                except OSError:  # out of sockets (EMFILE, ENFILE, ENOMEM) or gone: make room, never spin
                    if self.fresh:  # the oldest that has sent nothing goes first
                        self.fresh.pop(0)[0].close()
                    else:
                        c = self.worst(t)
                        if c is not None:
                            self._drop(c)
                    break
                n += 1
                c.setblocking(False)
                since = t
            try:
                if await self.admit(c, since, t):
                    await _sleep_ms(0)  # its task takes what it was sent before the next one is looked at
            except Exception:  # noqa: BLE001 - MemoryError making its stream: refuse this one
                try:
                    c.close()
                except Exception:  # noqa: BLE001
                    pass
        await _sleep_ms(0 if n else POLL_MS)

    async def run(self, host, port):
        import select

        s = self.listen(host, port)
        poller = select.poll()
        poller.register(s, select.POLLIN)
        poll = getattr(poller, "ipoll", None) or poller.poll  # MicroPython's ipoll allocates nothing
        try:
            while True:
                try:
                    await self._step(s, poll)
                except Exception as e:  # noqa: BLE001 - a MemoryError here is this turn's, not the server's end
                    try:
                        log("http: accept loop: %s: %s" % (type(e).__name__, e))
                    except MemoryError:
                        pass
                    await _sleep_ms(POLL_MS)
        finally:
            s.close()


async def _sleep_ms(ms):
    import asyncio

    if _MPY:
        await asyncio.sleep_ms(ms)
    else:
        await asyncio.sleep(ms / 1000)


def make_app(sentinel, max_body=2048):
    """The microdot application serving sentinel (a sentinel_fw.app.Sentinel)."""
    global _sentinel, _busy, _scratch
    _sentinel = sentinel
    _scratch = bytearray(_CHUNK)
    _busy = Response(BUSY, 503, dict(RETRY))
    _busy.complete()
    # The connection loop refuses larger bodies itself (413) before they take heap; the Receiver checks its own
    # limit too.
    Request.max_content_length = max_body
    Request.max_body_length = max_body
    Request.max_readline = MAX_LINE
    web = Microdot()
    # OPTIONS goes to the routes like any method, as the emulator sends it to the core: microdot's own answer
    # would list methods instead of the core's 405.
    web.options_handler = None  # pyright: ignore[reportAttributeAccessIssue]
    for path in PATHS:
        web.route(path, methods=METHODS)(_endpoint)
    web.errorhandler(404)(_endpoint)
    web.errorhandler(405)(_endpoint)  # a method no route has (FOO): the core's 405, as on the emulator
    web.errorhandler(MemoryError)(_out_of_memory)
    return web


def make_server(sentinel, http):
    """The Server for a checked config's http section."""
    web = make_app(sentinel, http["max_body"])
    return Server(web, http["max_body"], http.get("max_conn", MAX_CONN), http.get("backlog", BACKLOG))
