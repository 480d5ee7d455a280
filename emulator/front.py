"""The emulator's HTTP server: an asyncio front that reads each request with the core's own head grammar
(sentinel_core.httphead, the same functions the board's server uses) and hands complete requests to the flask
app (WSGI) in a small thread pool.

Why not waitress or another stock server: a slow client must never keep a P0 out (docs/PROTOCOL.md, "HTTP").
Here every connection has deadlines (request head HEAD_TIMEOUT_S after connecting, body BODY_TIMEOUT_S after the
head, answer WRITE_TIMEOUT_S), and at most max_connections sockets are open at once: a new connection over the bound
is taken, and a connection still being read or written is
closed to make room: the slowest (fewest bytes per second since it opened, an idle one first), never one younger
than 100 ms nor one whose request the terminal is working on. A thread is taken only by a complete
request, so 1,000 idle, dripping or lying-Content-Length sockets cost file descriptors and a little memory, not
the terminal's attention. One request per connection (answers carry Connection: close), as on the board.
"""

import asyncio
import http
import io
import json
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from sentinel_core import httphead

HEAD_TIMEOUT_S = 5.0
BODY_TIMEOUT_S = 5.0
WRITE_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 2048  # lowered to what the file-descriptor limit allows (_fd_room)
BACKLOG = 1024
READ_BODY_MAX = 64 * 1024  # read and handed to the app; larger is answered 413 by the app, unread
LINGER_S = 1.0
SHED_AFTER_S = 0.1
LINGER_MAX = 64 * 1024  # the core's max_body: a larger Content-Length is answered 413 unread

_READING, _APP, _WRITING = 0, 1, 2


def _fd_room(want):
    """Connections this process can hold: the soft file-descriptor limit raised towards want (as far as the hard
    limit allows), less 128 for everything else the emulator opens. Shedding at a bound the limit allows keeps
    accept() from ever failing with EMFILE."""
    try:
        import resource  # POSIX only
    except ImportError:
        return want
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = want + 128
    if soft != resource.RLIM_INFINITY and soft < need:
        new = need if hard == resource.RLIM_INFINITY else min(hard, need)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    return want if soft == resource.RLIM_INFINITY else max(16, soft - 128)


def _reason(status):
    """The standard reason phrase (the standard library's, as the gateway's front writes it)."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def refusal_bytes(code, message):
    return json.dumps({"ok": False, "error": code, "message": message}).encode()


class _Conn:
    __slots__ = ("opened", "last", "phase", "task", "writer", "received")

    def __init__(self, opened, task, writer):
        self.opened = opened
        self.last = opened  # when a byte last arrived
        self.phase = _READING
        self.task = task
        self.writer = writer
        self.received = 0


class _Timeout(Exception):
    pass


class Front:
    """Front(wsgi_app, host, port) listening at once (port 0: a free one). start() serves in a background thread,
    run() in this one; stop() from any thread. stats: connections taken, shed, timed out, answered."""

    def __init__(
        self,
        app,
        host,
        port,
        threads=8,
        max_connections=MAX_CONNECTIONS,
        head_timeout=HEAD_TIMEOUT_S,
        body_timeout=BODY_TIMEOUT_S,
        write_timeout=WRITE_TIMEOUT_S,
        max_body=READ_BODY_MAX,
        server_name="gpu-sentinel-emulator",
    ):
        self.app = app
        self.host = host
        self.max_connections = min(max_connections, _fd_room(max_connections))
        self.head_timeout = head_timeout
        self.body_timeout = body_timeout
        self.write_timeout = write_timeout
        self.max_body = max_body
        self.server_name = server_name
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
            self._sock.listen(BACKLOG)
        except OSError:
            self._sock.close()
            raise
        self._sock.setblocking(False)
        self.port = self._sock.getsockname()[1]
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="emulator-http")
        self._conns = {}  # insertion order is age order
        self._loop = None
        self._server = None
        self._thread = None
        self._stopping = None
        self._ready = threading.Event()
        self._stopped = False
        self.stats = {"connections": 0, "shed": 0, "timeouts": 0, "answered": 0, "peak": 0}

    # -- running ---------------------------------------------------------------------------------------------------

    def start(self):
        self._thread = threading.Thread(target=self.run, name="emulator-http", daemon=True)
        self._thread.start()
        self._ready.wait(5)
        return self

    def run(self):
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _main(self):
        self._stopping = asyncio.Event()
        self._server = await asyncio.start_server(
            self._serve, sock=self._sock, limit=httphead.MAX_LINE + 2, backlog=BACKLOG
        )
        self._ready.set()
        await self._stopping.wait()
        self._server.close()
        for c in list(self._conns.values()):
            c.task.cancel()
        if self._conns:
            await asyncio.wait([c.task for c in self._conns.values()], timeout=2)
        await self._server.wait_closed()

    def stop(self):
        if self._stopped:
            return
        self._stopped = True
        loop = self._loop
        if loop is not None and self._stopping is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._stopping.set)
            except RuntimeError:
                pass
            if self._thread is not None:
                self._thread.join(5)
        else:
            self._sock.close()
        # Requests in progress finish (the engine answers within its own timeout); nothing new is taken.
        self._pool.shutdown(wait=True)

    # -- one connection ----------------------------------------------------------------------------------------------

    def _admit(self, conn):
        """Register conn; over the bound, close the slowest connection still being read or written and open for
        SHED_AFTER_S at least: the one that has sent the fewest bytes per second of its life (an idle one first,
        the longest idle of those). A sender whose request came at once is never cut off for an attacker's socket."""
        self._conns[id(conn)] = conn
        self.stats["connections"] += 1
        now = conn.opened
        while len(self._conns) > self.max_connections:
            victim = None
            worst = None
            for c in self._conns.values():
                age = now - c.opened
                if c.phase == _APP or age < SHED_AFTER_S:
                    continue
                rate = c.received / age
                if victim is None or rate < worst or (rate == worst and c.last < victim.last):
                    victim, worst = c, rate
            if victim is None:
                break  # none idle long enough: over the bound for now (by at most the last 100 ms of connections)
            self._drop(victim)
            self.stats["shed"] += 1
        if len(self._conns) > self.stats["peak"]:
            self.stats["peak"] = len(self._conns)

    def _drop(self, conn):
        self._conns.pop(id(conn), None)
        try:
            conn.writer.transport.abort()
        except Exception:  # noqa: BLE001 - already gone
            pass
        conn.task.cancel()

    async def _serve(self, reader, writer):
        loop = asyncio.get_running_loop()
        conn = _Conn(loop.time(), asyncio.current_task(), writer)
        self._admit(conn)
        answered = False
        try:
            status, headers, body, head_only = await self._request(conn, reader, loop)
            conn.phase = _WRITING
            await self._write(writer, status, headers, b"" if head_only else body, loop=loop)
            self.stats["answered"] += 1
            answered = True
            # Lingering close: what the client sent beyond what was read (a body refused unread, bytes after the
            # body) is read and dropped before closing, or the kernel would answer it with a reset that can destroy
            # the answer in flight.
            writer.write_eof()
            await asyncio.wait_for(self._discard(reader), LINGER_S)
        except (asyncio.CancelledError, asyncio.TimeoutError, ConnectionError, OSError):
            pass
        finally:
            self._conns.pop(id(conn), None)
            try:
                if answered:
                    writer.close()
                else:
                    writer.transport.abort()
            except Exception:  # noqa: BLE001 - already gone
                pass

    @staticmethod
    async def _discard(reader):
        n = 0
        while n < LINGER_MAX:
            data = await reader.read(4096)
            if not data:
                return
            n += len(data)

    async def _readline(self, reader, deadline, loop, conn):
        left = deadline - loop.time()
        if left <= 0:
            raise _Timeout()
        try:
            line = await asyncio.wait_for(reader.readline(), left)
        except asyncio.TimeoutError:
            raise _Timeout() from None
        except (ValueError, asyncio.LimitOverrunError):
            raise httphead.HeadError(400, "bad_request", "a line over %d bytes" % httphead.MAX_LINE) from None
        conn.received += len(line)
        conn.last = loop.time()
        return line

    async def _request(self, conn, reader, loop):
        """(status, headers, body, head_only) for the connection's one request."""
        deadline = conn.opened + self.head_timeout
        headers = {}
        try:
            # A body up to max_body is read (the app answers 413 for one over the core's 2 KB, the core counts it);
            # a larger Content-Length is not read at all, the app answers 413 by the header alone.
            method, target, version, n = await httphead.read(
                lambda: self._readline(reader, deadline, loop, conn), 1 << 62, headers
            )
            body = b""
            if 0 < n <= self.max_body:
                try:
                    body = await asyncio.wait_for(reader.readexactly(n), self.body_timeout)
                except asyncio.TimeoutError:
                    raise _Timeout() from None
                except asyncio.IncompleteReadError as e:
                    raise httphead.HeadError(
                        400, "bad_request", "the connection ended %d bytes into a %d-byte body" % (len(e.partial), n)
                    ) from None
        except httphead.HeadError as e:
            status, code, message = e.args
            return status, None, refusal_bytes(code, message), False
        except _Timeout:
            self.stats["timeouts"] += 1
            if not conn.received:  # not one whole line: closed, no answer to write (a thousand may expire at once)
                raise ConnectionError("idle past the head deadline") from None
            return (
                408,
                None,
                refusal_bytes(
                    "timeout",
                    "the request did not arrive in time (head %.0f s, body %.0f s)"
                    % (self.head_timeout, self.body_timeout),
                ),
                False,
            )
        conn.phase = _APP
        environ = self._environ(conn, method, target, version=version, headers=headers, body=body)
        status, out_headers, out = await loop.run_in_executor(self._pool, self._call_app, environ)
        return status, out_headers, out, method == "HEAD"

    def _environ(self, conn, method, target, *, version, headers, body):
        q = target.find("?")
        path = target if q < 0 else target[:q]
        query = "" if q < 0 else target[q + 1 :]
        env = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SERVER_NAME": self.host,
            "SERVER_PORT": str(self.port),
            "SERVER_PROTOCOL": version,
            "REMOTE_ADDR": "",
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
            # The path as sent: werkzeug reads RAW_URI/REQUEST_URI only for logging; routing sees PATH_INFO
            # undecoded, so /api/v1/send%5Fmsg is no alias of /api/v1/send_msg (as on the board).
            "REQUEST_URI": target,
            "RAW_URI": target,
        }
        peer = conn.writer.get_extra_info("peername")
        if peer:
            env["REMOTE_ADDR"] = str(peer[0])
        for name, value in headers.items():
            key = name.upper().replace("-", "_")
            if key == "CONTENT_TYPE" or key == "CONTENT_LENGTH":
                env[key] = value
            else:
                env["HTTP_" + key] = value
        return env

    def _call_app(self, environ):
        out = {}

        def start_response(status, headers, exc_info=None):
            out["status"] = int(status.split(" ", 1)[0])
            out["headers"] = headers
            return lambda data: None

        try:
            chunks = self.app(environ, start_response)
            try:
                body = b"".join(chunks)
            finally:
                close = getattr(chunks, "close", None)
                if close:
                    close()
        except Exception as e:  # noqa: BLE001 - the terminal's own fault: 500, which senders retry
            return 500, None, refusal_bytes("internal", "internal error: %s" % type(e).__name__)
        return out.get("status", 500), out.get("headers"), body

    async def _write(self, writer, status, headers, body, *, loop):
        lines = ["HTTP/1.1 %d %s" % (status, _reason(status))]
        have_type = False
        for k, v in headers or ():
            kl = k.lower()
            if kl in ("content-length", "connection", "transfer-encoding", "server"):
                continue
            have_type = have_type or kl == "content-type"
            lines.append("%s: %s" % (k, v))
        if not have_type:
            lines.append("Content-Type: application/json")
        lines.append("Content-Length: %d" % len(body))
        lines.append("Connection: close")
        lines.append("Server: " + self.server_name)
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        writer.write(data)
        try:
            await asyncio.wait_for(writer.drain(), self.write_timeout)
        except asyncio.TimeoutError:
            self.stats["timeouts"] += 1
            raise ConnectionError("client did not read its answer") from None
