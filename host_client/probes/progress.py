"""The progress watchdog: learn each training process's step time, call a stall when steps stop.

Training loops send a datagram per step (``host_client.beat``). Per process the tracker keeps the intervals
between beats (daemon-side monotonic receive times: no clock skew) and calls it stalled when no beat came within
its limit (docs/PROBES.md, "Progress watchdog"):

- registered, no step yet (``start()`` was called, or one beat came): ``first_step_s`` (default 300 s; a
  ``start(first_step_s=...)`` sets it for that process). A hang at the first collective is seen within it.
- fewer than ``warmup`` intervals known: ``clamp(k x longest interval so far, early_floor_s, ceiling_s)`` (default
  floor 60 s): early steps compile kernels and fill caches, but a hang at step 2 is not left for 15 minutes.
- then: ``clamp(k x median interval, floor_s, ceiling_s)``.
- ``pause()`` (checkpointing, evaluation: a phase of unknown length) leaves only the ceiling until the next beat or
  ``resume``; a single step known to be long is announced with ``beat(step, next_s=...)``: that one step's limit is
  at least ``next_s``. An unannounced long step is a stall (a hang looks the same); it clears by itself with the
  next beat (RECOVERED) and that gap is never learned as a step time. When such steps recur at a fixed period (a
  checkpoint every N steps without ``pause()``: two of them give the period), the step at which the next one is
  due is allowed ``2 x`` the longest of them; every other step keeps its normal limit.

Processes of one job (same job name: the ranks on this node) form one condition: it raises when the first of them
stalls and clears when none is stalled any more. A process that exits (``end`` message, or its pid is gone or a
zombie) while it was not stalled is forgotten without an alarm: a job the scheduler stopped is not a hang. A process
that dies *while stalled* (the usual end of a hang: the job is killed) keeps the condition raised and says so ("died
while stalled"); it clears on an ``end`` for the job, when a new process of the same job beats, or ``dead_clear_s``
(default 300 s) after the death was seen.
"""

import json
import os
import socket
import struct

from . import events

MAX_DATAGRAM = 2048
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
KINDS = ("beat", "start", "pause", "resume", "end")
LONG_FACTOR = 2.0  # a recurring unannounced long step is allowed this multiple of the longest one seen
RECHECK_S = 0.5  # how often a stalled process is checked for death (one kill(0) and one /proc read)


class ProgressRules:
    def __init__(
        self,
        *,
        k=4.0,
        floor_s=0.5,
        ceiling_s=900.0,
        warmup=3,
        window=32,
        max_processes=1024,
        first_step_s=300.0,
        early_floor_s=60.0,
        dead_clear_s=300.0,
    ):
        if not (float(k) > 1.0):
            raise ValueError("progress k must be > 1 (a multiple of the normal step time)")
        if not (0 < float(floor_s) <= float(ceiling_s)):
            raise ValueError("need 0 < floor_s <= ceiling_s")
        if int(warmup) < 1 or int(window) < int(warmup):
            raise ValueError("need 1 <= warmup <= window")
        if not (0 < float(first_step_s)) or not (0 < float(early_floor_s)) or not (0 < float(dead_clear_s)):
            raise ValueError("need first_step_s, early_floor_s and dead_clear_s > 0")
        self.k = float(k)
        self.floor_s = float(floor_s)
        self.ceiling_s = float(ceiling_s)
        self.warmup = int(warmup)
        self.window = int(window)
        self.max_processes = int(max_processes)
        self.first_step_s = float(first_step_s)
        self.early_floor_s = min(float(early_floor_s), self.ceiling_s)
        self.dead_clear_s = float(dead_clear_s)


class _Proc:
    __slots__ = (
        "job",
        "pid",
        "rank",
        "local_rank",
        "last",
        "intervals",
        "steps",
        "step",
        "paused",
        "stalled_at",
        "dead_at",
        "checked_at",
        "first_step_s",
        "next_s",
        "long_at",
        "long_s",
        "long_period",
    )

    def __init__(self, job, pid, *, rank, local_rank, now):
        self.job = job
        self.pid = pid
        self.rank = rank
        self.local_rank = local_rank
        self.last = now
        self.intervals = []
        self.steps = 0
        self.step: int | None = None
        self.paused = False
        self.stalled_at = None
        self.dead_at = None
        self.checked_at = now
        self.first_step_s: float | None = None
        self.next_s: float | None = None
        self.long_at = None  # step count at which the last unannounced long step ended
        self.long_s = 0.0  # the longest of them
        self.long_period = None  # steps between the last two (a checkpoint every N steps)


def _median(values):
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def _opt_seconds(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v <= 7 * 86400):
        return None
    return float(v)


class ProgressTracker:
    def __init__(self, rules=None, alive=None):
        self.rules = rules or ProgressRules()
        self._procs = {}  # (job, pid) -> _Proc
        self._alive = alive or _pid_alive
        self.beats = 0
        self.rejected = 0
        self._stalled_jobs = set()  # jobs with a stalled process (from the last evaluate): a beat of theirs is news
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
        if (
            kind not in KINDS
            or not isinstance(job, str)
            or not job
            or len(job) > 128
            or not isinstance(pid, int)
            or isinstance(pid, bool)
        ):
            self.rejected += 1
            return False
        key = (job, pid)
        p = self._procs.get(key)
        if kind == "end":
            if self._procs.pop(key, None) is not None:
                self.dirty = True
            self._forget_dead(job)  # an explicit end for the job also closes a stall its dead process left
            return True
        if p is None:
            if len(self._procs) >= self.rules.max_processes:
                self._evict()
            p = self._procs[key] = _Proc(
                job, pid, rank=_opt_int(msg.get("rank")), local_rank=_opt_int(msg.get("local_rank")), now=now
            )
            if kind in ("beat", "start"):
                self._forget_dead(job, check=True)  # a new process of the job runs: a dead one's stall is over
            if kind == "beat":
                p.steps = 1
                p.step = _opt_int(msg.get("step"))
                p.next_s = _opt_seconds(msg.get("next_s"))
                self.beats += 1
            elif kind == "start":
                p.first_step_s = _opt_seconds(msg.get("first_step_s"))
            elif kind == "pause":
                p.paused = True
            return True
        if kind in ("beat", "start") and job in self._stalled_jobs and p.stalled_at is None:
            # a healthy process of a job with a stalled one: if that one has died meanwhile (killed and restarted
            # faster than its death was noticed), the restart is under way and the stall is over
            self._forget_dead(job, check=True)
        if kind == "start":
            # a second start from the same process (a new epoch, a restarted loop): the first-step deadline again
            p.first_step_s = _opt_seconds(msg.get("first_step_s")) or p.first_step_s
            p.last = now
            p.steps = 0
            p.intervals = []
            self._unstall(p)
        elif kind in ("pause", "resume"):
            # either one proves the process is alive and moving: the pause (or what follows it) is timed from
            # now, and is never learned as a step interval
            p.paused = kind == "pause"
            p.last = now
            self._unstall(p)
        else:
            gap = now - p.last
            long_step = gap > self.limit(p, recurring=False)
            if p.dead_at is None and p.steps >= 1 and not p.paused and p.next_s is None and long_step:
                # an unannounced long step that ended by itself (a stall that cleared, or the recurring one it was
                # allowed): remember where, to allow it when it recurs
                if p.long_at is not None:
                    p.long_period = p.steps - p.long_at
                p.long_at = p.steps
                p.long_s = max(p.long_s, gap)
            # a gap that ended a stall or a pause, the first step, or a long step (announced, recurring or not) is
            # not a normal step
            if p.stalled_at is None and not p.paused and p.steps >= 1 and p.next_s is None and not long_step:
                p.intervals.append(gap)
                if len(p.intervals) > self.rules.window:
                    del p.intervals[0]
            p.paused = False
            p.last = now
            p.steps += 1
            p.step = _opt_int(msg.get("step"))
            p.next_s = _opt_seconds(msg.get("next_s"))
            self._unstall(p)
            self.beats += 1
        return True

    def _unstall(self, p):
        if p.stalled_at is not None:
            p.stalled_at = None
            p.dead_at = None
            self.dirty = True

    def _forget_dead(self, job, check=False):
        """Drop the job's processes that died while stalled; with ``check``, also the stalled ones whose death was
        not seen yet (their pid is checked now: a restart can come sooner than the 0.5 s death check)."""
        for k in [
            k
            for k, p in self._procs.items()
            if p.job == job
            and (p.dead_at is not None or (check and p.stalled_at is not None and not self._alive(p.pid)))
        ]:
            del self._procs[k]
            self.dirty = True

    def _evict(self):
        # the process heard from least recently goes first
        oldest = min(self._procs, key=lambda k: self._procs[k].last)
        del self._procs[oldest]

    # --- evaluation --------------------------------------------------------------------------------------
    def step_time(self, p):
        if len(p.intervals) < self.rules.warmup:
            return None
        return _median(p.intervals)

    def limit(self, p, recurring=True):
        r = self.rules
        if p.paused:
            return r.ceiling_s
        if p.steps <= 1 and not p.intervals:
            base = p.first_step_s or r.first_step_s
        else:
            st = self.step_time(p)
            if st is None:
                base = min(max(r.k * max(p.intervals), r.early_floor_s), r.ceiling_s)
            else:
                base = min(max(r.k * st, r.floor_s), r.ceiling_s)
        if p.next_s is not None:
            base = max(base, p.next_s)
        if recurring and p.long_period and abs(p.steps - p.long_at - p.long_period) <= max(1, p.long_period // 100):
            base = max(base, min(LONG_FACTOR * p.long_s, r.ceiling_s))  # the recurring long step is due
        return base

    def phase(self, p):
        if p.paused:
            return "paused"
        if p.steps <= 1 and not p.intervals:
            return "first step"
        return "warm-up" if self.step_time(p) is None else "learned"

    def evaluate(self, now):
        """Mark stalls (and deaths of stalled processes) due by ``now`` and return the job findings that stand (one
        per job)."""
        self.dirty = False
        r = self.rules
        by_job = {}
        for key in list(self._procs):
            p = self._procs[key]
            if p.dead_at is not None:
                if now - p.dead_at >= r.dead_clear_s:
                    del self._procs[key]
                    continue
            elif p.stalled_at is None:
                if now - p.last > self.limit(p):
                    if not self._alive(p.pid):
                        del self._procs[key]  # it exited before it stalled: a stopped job, not a hang
                        continue
                    p.stalled_at = now
                    p.checked_at = now
            elif now - p.checked_at >= RECHECK_S:
                p.checked_at = now
                if not self._alive(p.pid):
                    p.dead_at = now
            if p.stalled_at is not None:
                by_job.setdefault(p.job, []).append(p)
        self._stalled_jobs = set(by_job)
        out = []
        for job, procs in by_job.items():
            procs.sort(key=lambda p: p.last)
            first = procs[0]
            st = self.step_time(first)
            dead = [p for p in procs if p.dead_at is not None]
            if dead and len(dead) == len(procs):
                detail = "job %s died while stalled: no step for %.1fs before pid %s was gone%s, last step %s" % (
                    job,
                    first.dead_at - first.last,
                    first.pid,
                    ", %d processes" % len(procs) if len(procs) > 1 else "",
                    first.step,
                )
                revision = "died"
            else:
                detail = "job %s: no step for %.1fs (%s, step time %s, limit %.1fs)%s, last step %s" % (
                    job,
                    now - first.last,
                    self.phase(first),
                    "%.3fs" % st if st is not None else "unknown",
                    self.limit(first),
                    ", %d processes" % len(procs) if len(procs) > 1 else "",
                    first.step,
                )
                revision = "stalled"
            gpu = first.local_rank if first.local_rank is not None else events.NODE_WIDE
            out.append(
                events.Finding(
                    ("progress", job),
                    events.PROGRESS_STALL,
                    gpu,
                    detail,
                    job=job,
                    rank=first.rank,
                    step=first.step,
                    revision=revision,
                    stalled_ranks=sorted(p.rank for p in procs if p.rank is not None) or None,
                )
            )
        return out

    def next_deadline(self):
        """The earliest time something is due: a process becoming stalled, a stalled one's death check, a dead
        one's clearing (None when nothing to watch)."""
        best = None
        for p in self._procs.values():
            if p.dead_at is not None:
                t = p.dead_at + self.rules.dead_clear_s
            elif p.stalled_at is not None:
                t = p.checked_at + RECHECK_S
            else:
                t = p.last + self.limit(p)
            if best is None or t < best:
                best = t
        return best

    def snapshot(self, now):
        out = []
        for p in self._procs.values():
            st = self.step_time(p)
            out.append(
                {
                    "job": p.job,
                    "pid": p.pid,
                    "rank": p.rank,
                    "local_rank": p.local_rank,
                    "steps": p.steps,
                    "step": p.step,
                    "since_last_s": round(now - p.last, 3),
                    "step_time_s": None if st is None else round(st, 4),
                    "limit_s": round(self.limit(p), 3),
                    "phase": self.phase(p),
                    "paused": p.paused,
                    "stalled": p.stalled_at is not None,
                    "dead": p.dead_at is not None,
                }
            )
        return out


def _opt_int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _pid_alive(pid, proc="/proc"):
    """False when the process is gone or a zombie (exited, not yet reaped: kill(pid, 0) still succeeds on it)."""
    if not pid or pid <= 0:
        return True  # unknown: assume alive (never drop a stall we cannot disprove)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open("%s/%d/stat" % (proc, pid), "rb") as f:
            stat = f.read()
    except OSError:
        return True  # no procfs here: kill(0) is all we know
    # "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ")"
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
    return state not in (b"Z", b"X")


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
                    pid = _CRED.unpack(cdata[: _CRED.size])[0]
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
