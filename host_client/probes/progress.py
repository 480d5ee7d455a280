"""The progress watchdog: learn each training process's step time, call a stall when steps stop.

Training loops send a datagram per step (``host_client.beat``). Per process the tracker keeps the intervals
between beats (daemon-side monotonic receive times: no clock skew) and calls it stalled when no beat came for
``clamp(k x median interval, floor_s, ceiling_s)``. Before ``warmup`` intervals are known only the ceiling
applies (first steps compile kernels and fill caches). ``pause``/``resume`` (the beat module's
``pause()`` context, e.g. around checkpointing) lift the learned limit and leave only the ceiling.

Processes of one job (same job name: the ranks on this node) form one condition: it raises when the first
of them stalls and clears when none is stalled any more. A process that exits (``end`` message, or its pid
is gone) is forgotten without an alarm: a job the scheduler stopped is not a hang.
"""

import json
import os
import socket
import struct

from . import events

MAX_DATAGRAM = 2048
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class ProgressRules:
    def __init__(self, k=4.0, floor_s=0.5, ceiling_s=900.0, warmup=3, window=32, max_processes=1024):
        if not (float(k) > 1.0):
            raise ValueError("progress k must be > 1 (a multiple of the normal step time)")
        if not (0 < float(floor_s) <= float(ceiling_s)):
            raise ValueError("need 0 < floor_s <= ceiling_s")
        if int(warmup) < 1 or int(window) < int(warmup):
            raise ValueError("need 1 <= warmup <= window")
        self.k = float(k)
        self.floor_s = float(floor_s)
        self.ceiling_s = float(ceiling_s)
        self.warmup = int(warmup)
        self.window = int(window)
        self.max_processes = int(max_processes)


class _Proc:
    __slots__ = ("job", "pid", "rank", "local_rank", "last", "intervals", "steps", "step", "paused",
                 "stalled_at")

    def __init__(self, job, pid, rank, local_rank, now):
        self.job = job
        self.pid = pid
        self.rank = rank
        self.local_rank = local_rank
        self.last = now
        self.intervals = []
        self.steps = 0
        self.step = None
        self.paused = False
        self.stalled_at = None


def _median(values):
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


class ProgressTracker:
    def __init__(self, rules=None, alive=None):
        self.rules = rules or ProgressRules()
        self._procs = {}  # (job, pid) -> _Proc
        self._alive = alive or _pid_alive
        self.beats = 0
        self.rejected = 0
        # set when a message may have changed the standing findings (a stalled process beat, a process ended),
        # so the daemon need not re-evaluate on every ordinary beat
        self.dirty = False

    # --- input -----------------------------------------------------------------------------------------
    def message(self, msg, now, peer_pid=None):
        """Apply one decoded beat message. Returns False (and counts it) when the message is malformed."""
        if not isinstance(msg, dict):
            self.rejected += 1
            return False
        kind = msg.get("kind", "beat")
        job = msg.get("job")
        pid = peer_pid if peer_pid else msg.get("pid")
        if kind not in ("beat", "pause", "resume", "end") or not isinstance(job, str) or not job \
                or len(job) > 128 or not isinstance(pid, int) or isinstance(pid, bool):
            self.rejected += 1
            return False
        key = (job, pid)
        p = self._procs.get(key)
        if kind == "end":
            if self._procs.pop(key, None) is not None:
                self.dirty = True
            return True
        if p is None:
            if len(self._procs) >= self.rules.max_processes:
                self._evict()
            p = self._procs[key] = _Proc(job, pid, _opt_int(msg.get("rank")), _opt_int(msg.get("local_rank")),
                                         now)
            if kind == "beat":
                p.steps = 1
                p.step = _opt_int(msg.get("step"))
                self.beats += 1
            elif kind == "pause":
                p.paused = True
            return True
        if kind in ("pause", "resume"):
            # either one proves the process is alive and moving: the pause (or what follows it) is timed from
            # now, and is never learned as a step interval
            p.paused = kind == "pause"
            p.last = now
            if p.stalled_at is not None:
                p.stalled_at = None
                self.dirty = True
        else:
            gap = now - p.last
            limit = self.limit(p)
            # a gap that ended a stall or a pause is not a normal step: do not learn from it
            if p.stalled_at is None and not p.paused and gap <= limit:
                p.intervals.append(gap)
                if len(p.intervals) > self.rules.window:
                    del p.intervals[0]
            p.paused = False
            p.last = now
            p.steps += 1
            p.step = _opt_int(msg.get("step"))
            if p.stalled_at is not None:
                p.stalled_at = None
                self.dirty = True
            self.beats += 1
        return True

    def _evict(self):
        # the process heard from least recently goes first
        oldest = min(self._procs, key=lambda k: self._procs[k].last)
        del self._procs[oldest]

    # --- evaluation --------------------------------------------------------------------------------------
    def step_time(self, p):
        if len(p.intervals) < self.rules.warmup:
            return None
        return _median(p.intervals)

    def limit(self, p):
        r = self.rules
        st = self.step_time(p)
        if st is None or p.paused:
            return r.ceiling_s
        return min(max(r.k * st, r.floor_s), r.ceiling_s)

    def evaluate(self, now):
        """Mark stalls due by ``now`` and return the job findings that stand (one per job)."""
        self.dirty = False
        by_job = {}
        for key in list(self._procs):
            p = self._procs[key]
            if p.stalled_at is None and now - p.last > self.limit(p):
                if not self._alive(p.pid):
                    del self._procs[key]
                    continue
                p.stalled_at = now
            if p.stalled_at is not None:
                by_job.setdefault(p.job, []).append(p)
        out = []
        for job, procs in by_job.items():
            procs.sort(key=lambda p: p.last)
            first = procs[0]
            st = self.step_time(first)
            detail = "job %s: no step for %.1fs (step time %s, limit %.1fs)%s, last step %s" % (
                job, now - first.last, "%.3fs" % st if st is not None else "unknown", self.limit(first),
                ", %d processes" % len(procs) if len(procs) > 1 else "", first.step)
            gpu = first.local_rank if first.local_rank is not None else events.NODE_WIDE
            out.append(events.Finding(("progress", job), events.PROGRESS_STALL, gpu, detail, job=job,
                                      rank=first.rank, step=first.step,
                                      stalled_ranks=sorted(p.rank for p in procs if p.rank is not None) or None))
        return out

    def next_deadline(self):
        """The earliest time a not-yet-stalled process would become stalled (None when nothing to watch)."""
        best = None
        for p in self._procs.values():
            if p.stalled_at is None:
                t = p.last + self.limit(p)
                if best is None or t < best:
                    best = t
        return best

    def snapshot(self, now):
        out = []
        for p in self._procs.values():
            st = self.step_time(p)
            out.append({"job": p.job, "pid": p.pid, "rank": p.rank, "local_rank": p.local_rank, "steps": p.steps,
                        "step": p.step, "since_last_s": round(now - p.last, 3),
                        "step_time_s": None if st is None else round(st, 4), "limit_s": round(self.limit(p), 3),
                        "paused": p.paused, "stalled": p.stalled_at is not None})
        return out


def _opt_int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _pid_alive(pid):
    if not pid or pid <= 0:
        return True  # unknown: assume alive (never drop a stall we cannot disprove)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def decode(data):
    try:
        msg = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return msg if isinstance(msg, dict) else None


class ProgressSocket:
    """The daemon's end: a Unix datagram socket. The kernel's SO_PASSCRED pid is trusted over the message's,
    because a process in a container reports a pid from its own namespace."""

    def __init__(self, path, mode=0o666):
        self.path = path
        d = os.path.dirname(path)
        if d and not os.path.isdir(d):
            os.makedirs(d, exist_ok=True)
        if os.path.exists(path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # a stale socket from a daemon that died
            else:
                raise OSError("another sentinel-probe already listens on %s" % path)
            finally:
                probe.close()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        os.chmod(path, mode)
        self._creds = hasattr(socket, "SO_PASSCRED")
        if self._creds:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)

    def fileno(self):
        return self.sock.fileno()

    def recv(self):
        """One (message dict or None, kernel pid or None). Blocks unless the socket is readable."""
        if self._creds:
            data, anc, _flags, _addr = self.sock.recvmsg(MAX_DATAGRAM, socket.CMSG_SPACE(_CRED.size))
            pid = None
            for level, typ, cdata in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS and len(cdata) >= _CRED.size:
                    pid = _CRED.unpack(cdata[:_CRED.size])[0]
            return decode(data), pid
        return decode(self.sock.recv(MAX_DATAGRAM)), None

    def close(self):
        try:
            self.sock.close()
        finally:
            try:
                os.unlink(self.path)
            except OSError:
                pass
