"""Follow line streams as they are written, waking on new data rather than polling.

- ``/dev/kmsg``: one blocking read() per record, from the end of the ring buffer (old records are history).
- ``journal``: ``journalctl -k -f -n 0 -o short-monotonic`` through a pipe.
- a FIFO: blocking readline; reopened when the writer goes away.
- a regular file: read to the end, then sleep on inotify until it changes (``tail -F`` semantics: a rotated
  or truncated file is reopened and read from its start). Without inotify it falls back to a short poll.

Each follower runs in its own daemon thread and hands ``(source_name, line)`` to a callback.
"""

import ctypes
import ctypes.util
import errno
import glob
import os
import select
import stat
import subprocess
import threading
from typing import Protocol

_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_MOVE_SELF = 0x800
_IN_DELETE_SELF = 0x400
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000

_libc = None


def _inotify():
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            lib.inotify_init1.argtypes = [ctypes.c_int]
            lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            _libc = lib
        except (OSError, AttributeError):
            _libc = False
    return _libc if isinstance(_libc, ctypes.CDLL) else None


def _why(e):
    """An error in words: "No such file or directory: /dev/kmsg", never a class name or repr."""
    if isinstance(e, OSError) and e.strerror:
        return "%s: %s" % (e.strerror, e.filename) if e.filename else e.strerror
    return str(e) or type(e).__name__


class Health(Protocol):
    """What a follower reports to (source_health.SourceHealth)."""

    def ok(self) -> None: ...

    def down(self, why: str) -> None: ...


class _NoHealth:
    """A follower nobody watches (tests, --once): reports go nowhere."""

    def ok(self):
        pass

    def down(self, why):
        pass


class Follower:
    RETRY_S = 5.0  # a source that failed is opened again this often, so it clears once it works

    def __init__(self, name, callback, stop):
        self.name = name
        self.callback = callback
        self.stop = stop
        self.lines = 0
        self.error = None
        self.thread = None
        self.health: Health = _NoHealth()  # a source_health.SourceHealth once the daemon registers the source

    def start(self):
        self.thread = threading.Thread(target=self._guarded, name="follow:" + self.name, daemon=True)
        self.thread.start()
        return self

    def _guarded(self):
        while not self.stop.is_set():
            try:
                self.run()
                return
            except Exception as e:  # noqa: BLE001 - a dead follower must be visible and retried, not a silent gap
                self.error = _why(e)
                self.health.down(self.error)
            self.stop.wait(self.RETRY_S)

    def run(self) -> None:
        raise NotImplementedError

    def emit(self, line):
        self.lines += 1
        self.callback(self.name, line)


class KmsgFollower(Follower):
    def __init__(self, callback, stop, *, path="/dev/kmsg", from_start=False):
        super().__init__("kmsg", callback, stop)
        self.path = path
        self.from_start = from_start

    def run(self):
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self.error = None
        self.health.ok()
        try:
            if not self.from_start:
                os.lseek(fd, 0, os.SEEK_END)
            while not self.stop.is_set():
                r, _, _ = select.select([fd], [], [], 1.0)
                if not r:
                    continue
                for rec in _kmsg_records(fd):
                    self.emit(rec)
        finally:
            os.close(fd)


def _kmsg_records(fd):
    """The records readable now from a non-blocking /dev/kmsg descriptor, one per read, decoded."""
    while True:
        try:
            rec = os.read(fd, 8192)
        except BlockingIOError:
            return
        except OSError as e:
            if e.errno == errno.EPIPE:  # records overwritten before we read them: carry on
                continue
            raise
        if not rec:
            return
        yield rec.decode("utf-8", "replace")


def read_kmsg_history(path="/dev/kmsg"):
    """Every record still in the kernel ring buffer (for --once), without blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return list(_kmsg_records(fd))
    finally:
        os.close(fd)


class CommandFollower(Follower):
    """Lines from a long-running command (journalctl -k -f); restarted if it exits."""

    def __init__(self, name, argv, callback, stop, *, restart_s=2.0, settle_s=1.0):
        super().__init__(name, callback, stop)
        self.argv = argv
        self.restart_s = restart_s
        self.settle_s = settle_s  # a command still running this long after its start works (the pipe holds its lines)
        self.proc = None

    def run(self):
        while not self.stop.is_set():
            self.proc = subprocess.Popen(
                self.argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, errors="replace", bufsize=1
            )
            assert self.proc.stdout is not None  # stdout=PIPE
            if self.stop.wait(self.settle_s):
                break
            if self.proc.poll() is None:
                self.error = None
                self.health.ok()
            for line in self.proc.stdout:
                self.emit(line)
                if self.stop.is_set():
                    break
            self.proc.kill()
            code = self.proc.wait()
            if not self.stop.is_set():
                self.error = "%s exited with status %d" % (self.argv[0], code)
                self.health.down(self.error)
            self.stop.wait(self.restart_s)

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()


JOURNAL_ARGV = ["journalctl", "-k", "-f", "-n", "0", "-o", "cat"]


class FileFollower(Follower):
    """A growing file or a FIFO, tail -F style."""

    def __init__(self, path, callback, stop, *, from_start=False, poll_s=0.25, exit_when_gone=False):
        super().__init__(path, callback, stop)
        self.path = path
        self.from_start = from_start
        self.poll_s = poll_s
        self.exit_when_gone = exit_when_gone  # for files found by a glob: the watcher re-adds them if they return

    def run(self):
        first = True
        while not self.stop.is_set():
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                if self.exit_when_gone:
                    return
                self.error = "No such file or directory: %s" % self.path
                self.health.down(self.error)
                self.stop.wait(self.poll_s)
                first = False  # a file that appears later is read from its start
                continue
            if stat.S_ISFIFO(st.st_mode):
                self._fifo()
            else:
                self._file(start_at_end=first and not self.from_start)
            first = False

    def _fifo(self):
        # O_RDWR keeps the pipe open across writers, so we block in read() instead of spinning on EOF
        fd = os.open(self.path, os.O_RDWR)
        self.error = None
        self.health.ok()
        buf = b""
        try:
            while not self.stop.is_set():
                r, _, _ = select.select([fd], [], [], 1.0)
                if not r:
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    return
                buf = self._lines(buf + chunk)
        finally:
            os.close(fd)

    def _lines(self, buf):
        *complete, rest = buf.split(b"\n")
        for raw in complete:
            self.emit(raw.decode("utf-8", "replace"))
        if len(rest) > 1 << 20:  # a runaway line without newline: cut it rather than grow without bound
            self.emit(rest.decode("utf-8", "replace"))
            rest = b""
        return rest

    def _file(self, start_at_end):
        lib = _inotify()
        ifd = -1
        f = open(self.path, "rb")
        self.error = None
        self.health.ok()
        try:
            ino = os.fstat(f.fileno()).st_ino
            if lib is not None:
                ifd = lib.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
                if (
                    ifd >= 0
                    and lib.inotify_add_watch(
                        ifd,
                        os.fsencode(self.path),
                        _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVE_SELF | _IN_DELETE_SELF,
                    )
                    < 0
                ):
                    os.close(ifd)
                    ifd = -1
            if start_at_end:
                f.seek(0, os.SEEK_END)
            buf = b""
            while not self.stop.is_set():
                chunk = f.read(65536)
                if chunk:
                    buf = self._lines(buf + chunk)
                    continue
                # at EOF: has the file been rotated or truncated?
                try:
                    st = os.stat(self.path)
                except FileNotFoundError:
                    st = None
                if st is None or st.st_ino != ino:
                    chunk = f.read()  # drain what the old file still had
                    if chunk:
                        self._lines(buf + chunk + b"\n")
                    return
                if st.st_size < f.tell():
                    f.seek(0)
                    buf = b""
                    continue
                if ifd >= 0:
                    r, _, _ = select.select([ifd], [], [], 1.0)
                    if r:
                        try:
                            os.read(ifd, 4096)
                        except BlockingIOError:
                            pass
                else:
                    self.stop.wait(self.poll_s)
        finally:
            f.close()
            if ifd >= 0:
                os.close(ifd)


class GlobWatcher:
    """Follow every file matching a pattern (training logs named per job or per rank), picking up new ones.

    Files present at start follow the configured ``from_start``; files that appear later are read from their
    start (a new job's log: its first lines matter). At most ``limit`` files per pattern are followed.
    """

    def __init__(self, pattern, callback, stop, *, from_start=False, rescan_s=2.0, limit=256):
        self.name = pattern
        self.pattern = pattern
        self.callback = callback
        self.stop = stop
        self.from_start = from_start
        self.rescan_s = rescan_s
        self.limit = limit
        self.active = {}
        self.error = None
        self.overflow = False
        self.health: Health = _NoHealth()

    @property
    def lines(self):
        return sum(f.lines for f in self.active.values())

    def start(self):
        self.scan(first=True)
        t = threading.Thread(target=self._run, name="glob:" + self.pattern, daemon=True)
        t.start()
        return self

    def scan(self, *, first=False):
        # matching nothing is fine (no job yet); a directory that is not there (or not ours to read) is not
        top = os.path.dirname(self.pattern)
        while top and glob.has_magic(top):
            top = os.path.dirname(top)
        if top and not os.access(top, os.R_OK | os.X_OK):
            why = "No such directory: %s" % top if not os.path.isdir(top) else "Permission denied: %s" % top
            self.health.down(why)
        else:
            self.health.ok()
        for path in sorted(glob.glob(self.pattern)):
            f = self.active.get(path)
            if f is not None and f.thread is not None and f.thread.is_alive():
                continue
            if f is None and len(self.active) >= self.limit:
                self.overflow = True
                self.error = "more than %d files match; the rest are not followed" % self.limit
                continue
            self.active[path] = FileFollower(
                path, self.callback, self.stop, from_start=self.from_start if first else True, exit_when_gone=True
            ).start()
        for path in [p for p, f in self.active.items() if not f.thread.is_alive() and not os.path.exists(p)]:
            del self.active[path]

    def _run(self):
        while not self.stop.wait(self.rescan_s):
            try:
                self.scan()
            except OSError as e:
                self.error = _why(e)
                self.health.down(self.error)
