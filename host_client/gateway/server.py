"""The gateway's HTTP front: an epoll loop (select.epoll, standard library) per thread that accepts connections,
tells each one (connection.py) when its socket is readable or writable, runs timers and callbacks handed over from
other threads, and bounds what slow and greedy clients hold. The requests themselves are the connection's (llhttp
through httptools), their answers the application's (application.py); docs/GATEWAY.md says why this and not
waitress, asyncio, h11 or uvicorn, with the figures.

Slow and greedy clients are bounded (gateway.head_timeout_s, body_timeout_s, max_connections,
max_partial_body_bytes; docs/GATEWAY.md): the loop asks each connection for its deadline (a head or a body that takes
too long is answered 408 and closed); at the connection cap a new connection is taken and the connections the loop
asks for their shed rank give way, the oldest idle keep-alive one first, else the oldest slow one; the bytes all
incomplete bodies hold together are capped (the newest offender gets 503 and close). Out of descriptors, accept()
pauses and the loop keeps serving the connections it has.

Request head 16 KiB (431), body gateway.max_body (413), idle keep-alive 60 s (connection.py).
"""

from __future__ import annotations

import collections
import errno
import heapq
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable

from .application import Application
from .connection import BODY, HEAD, IN, OUT, RECV, Conn, Limits
from .front_status import FrontStatus
from .process import descriptor_room

log = logging.getLogger("sentinel.gateway")

SWEEP_S = 0.5  # how often deadlines (head, body, idle, linger) are looked at
SWEEP_BATCH = 128  # connections closed per turn of the loop for a deadline; the rest on the next turns
SWEEP_AGAIN_S = 0.005
TRIM_AGAIN_S = 3.0  # a flood's trim is repeated once this much later: its last frees come after the first
TRIM_AFTER = 256  # connections held at once: when that many have gone (7 in 8), the heap is trimmed
SHED_YOUNG_S = 0.1  # a connection this young is shed only when no older one can be
EPISODE_S = 10.0  # sheds or timeouts this far apart are one episode (one log line when it starts, one when it ends)
ACCEPT_PAUSE_S = 0.1  # accept() out of descriptors: how long to stop accepting before trying again
# connections taken per turn of the loop, after the turn's reads: a connection is read once before a flood of new
# ones can push it out at max_connections
ACCEPT_BATCH = 64
DEFAULT_MAX_CONNECTIONS = 10_000  # with a limit far above it (a container's): the memory, not descriptors, bounds
_OUT_OF_SOCKETS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
# readable, or the peer hung up / the socket failed: recv() tells which
_IN_ERR = IN | (select.EPOLLHUP | select.EPOLLERR if hasattr(select, "epoll") else select.POLLHUP | select.POLLERR)


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

    def note(self, now, n=1, **fields):
        self.count += n
        self.in_episode += n
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


class _Loop:
    """One thread's event loop: its own listening socket (SO_REUSEPORT when there are several), an epoll (poll where
    there is none) over it and its connections, a wake-up pipe for callbacks from other threads (a persister
    reporting a write), and the deadlines of the answers waiting for the disk, in a FIFO (they all wait the same
    persist_wait_s, so the first is always the earliest)."""

    def __init__(self, app, limits, sock, *, max_connections, max_partial, after_flood=None):
        self.app = app
        self.limits = limits
        self.after_flood = after_flood  # a flood has passed: connections gone, or many entries forgotten (process.py)
        self.sock = sock
        self.conns: dict[int, Conn] = {}  # fd -> its connection
        self.calls = collections.deque()  # callbacks handed over from other threads
        self.timers = collections.deque()  # (deadline, callback), in deadline order
        self.stopped = False
        self.thread: threading.Thread | None = None
        self.now = time.monotonic()
        self.max_connections = max_connections
        self.max_partial = max_partial
        self.partial = 0  # body bytes incomplete requests hold (counted ones)
        self.partials: dict[Conn, int] = {}  # conns holding body bytes -> how many, in the order they began holding
        self.peak = 0  # connections at most since memory was last given back
        self.trim_again = 0.0  # when to give memory back once more after a flood (0: not due)
        self.rview = memoryview(bytearray(RECV))  # what a connection's recv() fills
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
        self.poller.register(sock.fileno(), IN)
        self.poller.register(self._rfd, IN)

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

    # ---- the loop's own thread: what a connection asks of it (connection.Home) -----------------------------

    def call_later(self, delay, fn):
        self.timers.append((time.monotonic() + delay, fn))

    def watch(self, fd, mask):
        self.poller.modify(fd, mask)

    def forget(self, fd):
        self.conns.pop(fd, None)  # (closing the socket takes it out of the epoll set)

    def hold(self, conn, nbytes):
        """conn's incomplete body holds nbytes now: counted against max_partial_body_bytes; over it, the newest
        offender (the connection that began holding a body last) is answered 503 and closed, until the rest fit."""
        partials = self.partials
        self.partial += nbytes - partials.get(conn, 0)
        partials[conn] = nbytes
        while self.partial > self.max_partial and partials:
            victim = next(reversed(self.partials))
            self.partial_refused.note(
                self.now, held_bytes=self.partial, max_partial_body_bytes=self.max_partial, connections=len(self.conns)
            )
            victim.expire(
                503,
                "busy",
                "too many incomplete request bodies at once (gateway.max_partial_body_bytes): send it again",
            )

    def release(self, conn):
        self.partial -= self.partials.pop(conn, 0)

    def _make_room(self, now):
        """At max_connections: the connections with the lowest shed rank are closed, a few at a time (connection.py
        ranks them: lingering, idle keep-alive, the oldest slow ones; one with an answer owed is never shed)."""
        want = max(1, len(self.conns) - self.max_connections + 1 + self.max_connections // 64)
        young = now - SHED_YOUNG_S
        ranked = []
        for fd, c in self.conns.items():
            rank = c.shed_rank(young)
            if rank is not None:
                ranked.append((rank, fd, c))
        victims = heapq.nsmallest(want, ranked)
        for _r, _fd, c in victims:
            c.close()
        if victims:
            self.shed.note(now, len(victims), connections=len(self.conns), max_connections=self.max_connections)
        return bool(victims)

    def _accept(self):
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
            fd = s.fileno()
            self.conns[fd] = Conn(self.app, self.limits, self, s, now)
            self.poller.register(fd, IN)

    def _resume_accept(self):
        if not self.stopped:
            self.poller.modify(self.sock.fileno(), IN)

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
                        if ev & OUT and c.is_open():
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
        """Connections past their deadline are told so (408 first where a request is cut short, then closed), at
        most SWEEP_BATCH per turn so that a thousand expiring together do not hold up a request meanwhile. True:
        all done."""
        limits = self.limits
        done = 0
        for c in list(self.conns.values()):
            d = c.deadline()
            if d is None or d[0] >= now:
                continue
            if done >= SWEEP_BATCH:
                return False
            done += 1
            what = d[1]
            if what == HEAD:
                self.head_timeouts.note(now, connections=len(self.conns), head_timeout_s=limits.head_timeout_s)
            elif what == BODY:
                self.body_timeouts.note(now, connections=len(self.conns), body_timeout_s=limits.body_timeout_s)
            c.time_out(what)
        ended = False
        for ep in (self.shed, self.head_timeouts, self.body_timeouts, self.partial_refused):
            ended = ep.check(now) or ended
        trim = self.app.tick(now)  # the service forgot many entries: a flood of requests has passed
        n = len(self.conns)
        if n > self.peak:
            self.peak = n
        elif ended or (self.peak >= TRIM_AFTER and n <= self.peak // 8):
            self.peak = n  # a flood of connections has passed
            trim = True
        if trim:
            self.trim_again = now + TRIM_AGAIN_S
        elif self.trim_again and now >= self.trim_again:
            self.trim_again = 0.0  # once more, once what the flood left behind has been freed too
            trim = True
        if trim and self.after_flood is not None:
            self.after_flood()
        return True


class IngestFront:
    """Serves one Gateway. run() blocks until stop() (or SIGTERM handled by the caller).

    io_loops threads, each with its own event loop (_Loop) and its own listening socket on the port (SO_REUSEPORT:
    the kernel spreads connections over them). recv, send and the wait in epoll release the GIL, so a loop's
    syscalls run while another thread runs Python. The Gateway is thread-safe."""

    def __init__(self, gw, config, io_loops=None, *, after_flood: Callable[[], None] | None = None):
        self.gw = gw
        self.cfg = config
        self.limits = Limits(
            max_body=config.max_body,
            head_timeout_s=float(getattr(config, "head_timeout_s", 10.0)),
            body_timeout_s=float(getattr(config, "body_timeout_s", 30.0)),
        )
        self.app = Application(gw, persist_wait_s=config.persist_wait_s, front_status=self.status)
        self.after_flood = after_flood
        self.io_loops = max(1, int(io_loops or getattr(config, "io_loops", 1)))
        self.max_connections = self._connection_cap(config)
        self.max_partial_body_bytes = int(getattr(config, "max_partial_body_bytes", 4 << 20))
        self.loops = []
        self.port = None

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

    def status(self) -> FrontStatus:
        """What /healthz and /metrics say of this front (the application asks for it)."""
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

    # ---- lifecycle ----------------------------------------------------------------------------------------

    def run(self, host, port, ready=None, *, socks=None):
        """Serve until stop(). socks: listening sockets bound already (listen()), one per loop; else they are
        bound here (io_loops of them on one port)."""
        if socks is None:
            first = listen(host, port, reuse_port=self.io_loops > 1)
            port = first.getsockname()[1]
            socks = [first] + [listen(host, port, reuse_port=True) for _ in range(self.io_loops - 1)]
        self.port = socks[0].getsockname()[1]
        n = len(socks)
        per_conns = max(16, self.max_connections // n)
        per_partial = max(self.limits.max_body, self.max_partial_body_bytes // n)
        self.loops = [
            _Loop(
                self.app,
                self.limits,
                sock,
                max_connections=per_conns,
                max_partial=per_partial,
                after_flood=self.after_flood,
            )
            for sock in socks
        ]
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
