"""Tell the node's sentinel-probe daemon that a training step finished. Framework-agnostic, no dependencies.

    from host_client.beat import beat, pause

    start()                             # registers now: a hang before the first step is caught too
    for step, batch in enumerate(loader):
        loss = train_step(batch)
        beat(step)                      # one datagram, a few microseconds, never raises

    with pause("checkpoint"):           # long, legitimate gaps: only the ceiling applies meanwhile
        save_checkpoint()

When sentinel-remedy isolates the node, Slurm delivers the checkpoint signal (USR1 by default) to the job: ask for
it once, before the loop, and save at the next step boundary (never inside the signal handler, mid-step):

    ckpt = on_checkpoint()              # SENTINEL_CHECKPOINT_SIGNAL, else USR1; call it from the main thread
    for step, batch in enumerate(loader):
        loss = train_step(batch)
        beat(step)
        if ckpt.requested():            # true once per signal
            with pause("checkpoint"):
                save_checkpoint()       # the job is requeued after checkpoint_grace_s and resumes from it

The daemon learns this process's normal step time and raises PROGRESS_STALL when no beat arrives within a
multiple of it. Everything here is best effort: no daemon, a full socket buffer or a bad path never disturbs
the training loop. Environment: SENTINEL_PROBE_SOCKET (default /run/sentinel-probe/progress.sock),
SENTINEL_JOB (else SLURM_JOB_ID / TORCHELASTIC_RUN_ID / the script name), RANK and LOCAL_RANK (set by torchrun).
"""

import atexit
import json
import os
import signal
import socket
import sys
import threading

DEFAULT_SOCKET = "/run/sentinel-probe/progress.sock"

__all__ = ["Beat", "beat", "start", "pause", "end", "on_checkpoint", "CheckpointRequest", "DEFAULT_SOCKET"]


def _env_int(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _default_job():
    for name in ("SENTINEL_JOB", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"):
        v = os.environ.get(name)
        if v:
            return v[:128]
    return (os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python")[:128] or "python"


class Beat:
    """One sender. ``start()``, ``beat(step)``, ``pause(reason)`` (a context manager) and ``end()``. Arguments by
    keyword only: ``Beat(path=..., job=..., rank=..., local_rank=...)``; each defaults from the environment."""

    def __init__(self, *, path=None, job=None, rank=None, local_rank=None):
        self.path = path or os.environ.get("SENTINEL_PROBE_SOCKET") or DEFAULT_SOCKET
        self.job = job or _default_job()
        self.rank = rank if rank is not None else _env_int("RANK")
        self.local_rank = local_rank if local_rank is not None else _env_int("LOCAL_RANK")
        self.sent = 0
        self.dropped = 0
        self._sock = None
        self._pid = None
        self._lock = threading.Lock()
        self._ended = False

    def _send(self, kind, step=None, reason=None, **seconds):
        msg = {"v": 1, "kind": kind, "job": self.job, "pid": os.getpid()}
        if step is not None:
            msg["step"] = int(step)
        for k, v in seconds.items():
            if v is not None:
                msg[k] = float(v)
        if self.rank is not None:
            msg["rank"] = self.rank
        if self.local_rank is not None:
            msg["local_rank"] = self.local_rank
        if reason:
            msg["reason"] = str(reason)[:64]
        data = json.dumps(msg, separators=(",", ":")).encode()
        with self._lock:
            try:
                # a forked worker must not share its parent's socket object
                if self._sock is None or self._pid != os.getpid():
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    self._sock.setblocking(False)
                    self._pid = os.getpid()
                self._sock.sendto(data, self.path)
                self.sent += 1
                return True
            except OSError:  # no daemon yet, buffer full, socket gone: the loop must go on
                self.dropped += 1
                return False

    def start(self, first_step_s=None):
        """The job is starting: the daemon watches it from now, with the first-step deadline (its default, or
        ``first_step_s`` for this process), so a hang before the first step (at the first collective) is caught."""
        self._ended = False
        return self._send("start", first_step_s=first_step_s)

    def beat(self, step=None, next_s=None):
        """A step finished. ``next_s``: the next step is known to be long (an evaluation, a checkpoint without
        ``pause()``): allow it up to that many seconds."""
        self._ended = False
        return self._send("beat", step, next_s=next_s)

    def end(self):
        """The job is done: forget it without an alarm (also sent at interpreter exit)."""
        if not self._ended:
            self._ended = True
            self._send("end")

    def pause(self, reason=None):
        return _Pause(self, reason)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.end()
        return False


class _Pause:
    def __init__(self, beat, reason):
        self.beat = beat
        self.reason = reason

    def __enter__(self):
        self.beat._send("pause", reason=self.reason)
        return self

    def __exit__(self, *exc):
        self.beat._send("resume")
        return False


_default = None
_default_lock = threading.Lock()


def _get():
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Beat()
                atexit.register(_default.end)
    return _default


def beat(step=None, next_s=None):
    """A training step finished (module-level convenience over one process-wide ``Beat``)."""
    return _get().beat(step, next_s)


def start(first_step_s=None):
    """The training job starts (before its first step): see ``Beat.start``."""
    return _get().start(first_step_s)


def pause(reason=None):
    """``with pause("checkpoint"):`` around work that legitimately takes much longer than a step."""
    return _get().pause(reason)


def end():
    _get().end()


class CheckpointRequest:
    """Set by the checkpoint signal; ``requested()`` is true once per signal (it clears as it reads)."""

    def __init__(self, signum):
        self.signum = signum
        self.count = 0  # signals received
        self._flag = threading.Event()

    def _handler(self, signum, frame):
        # only a flag: the handler runs between two bytecodes of the training step; saving there could tear it
        self.count += 1
        self._flag.set()

    def requested(self) -> bool:
        if self._flag.is_set():
            self._flag.clear()
            return True
        return False


def on_checkpoint(signal_name=None) -> CheckpointRequest:
    """Register the checkpoint signal (``signal_name`` such as "USR1", else SENTINEL_CHECKPOINT_SIGNAL, else USR1:
    what sentinel-remedy's [slurm] checkpoint_signal sends). Call it from the main thread (Python's rule for signal
    handlers); ValueError names a signal that does not exist."""
    name = (signal_name or os.environ.get("SENTINEL_CHECKPOINT_SIGNAL") or "USR1").upper()
    name = name[3:] if name.startswith("SIG") else name
    signum = getattr(signal, "SIG" + name, None)
    if signum is None:
        raise ValueError("no signal SIG%s on this system" % name)
    req = CheckpointRequest(signum)
    signal.signal(signum, req._handler)
    return req
