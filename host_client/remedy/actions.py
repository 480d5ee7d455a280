"""The functional core of sentinel-remedy: which action a fault calls for, the blast-radius breaker, and what the
daemon's state says is its own. Values in, values out, `now` passed in; no I/O (worker.py does that)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

REASON_PREFIX = "sentinel:"


class Action(str, Enum):
    ISOLATE = "isolate"  # drain the node, ask its jobs to checkpoint, requeue them after the grace
    SIGNAL = "signal"  # ask the node's jobs to checkpoint; the node stays in service (a hang is the job's)
    NONE = "none"  # report only


# NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors): the XIDs whose resolution is a GPU reset, a node
# reboot or field action isolate; application XIDs (13, 31, 43, 45) are the job's own fault and never do.
DEFAULT_XIDS = {
    48: Action.ISOLATE,  # double-bit ECC error
    64: Action.ISOLATE,  # row remapping / page retirement recording failed: remapping failed
    74: Action.ISOLATE,  # NVLink error
    79: Action.ISOLATE,  # GPU has fallen off the bus
    92: Action.ISOLATE,  # high single-bit ECC error rate
    94: Action.ISOLATE,  # contained ECC error: reset to remap
    95: Action.ISOLATE,  # uncontained ECC error
    119: Action.ISOLATE,  # GSP RPC timeout
    120: Action.ISOLATE,  # GSP error
    13: Action.NONE,  # graphics engine exception (the application)
    31: Action.NONE,  # GPU memory page fault (the application)
    43: Action.NONE,  # GPU stopped processing (the application's fault)
    45: Action.NONE,  # preemptive cleanup after the application ended
    63: Action.NONE,  # a row remapping was recorded: applied at the next reset; 64 is the failure
}
DEFAULT_TYPES = {
    "GPU_LOST": Action.ISOLATE,
    "PCIE_DOWNGRADE": Action.ISOLATE,  # the field story: a link trained down starves the ring
    "NCCL_TIMEOUT": Action.SIGNAL,
    "PROGRESS_STALL": Action.SIGNAL,
}
ACTION_NAMES = tuple(a.value for a in Action)


@dataclass(frozen=True)
class Policy:
    xids: dict = field(default_factory=lambda: dict(DEFAULT_XIDS))
    types: dict = field(default_factory=lambda: dict(DEFAULT_TYPES))
    # faults that can clear by themselves: an explicit healthy event for one resumes the node (never silence)
    self_clearing: frozenset = frozenset()


@dataclass(frozen=True)
class Incident:
    """One incident as the gateway sends it (feed.py parses the wire form into this)."""

    id: str
    firing: bool
    level: str
    host: str
    event_type: str
    rack: str = ""
    gpu: int | None = None
    xid: int | None = None
    jobs: tuple = ()
    gateway: str = ""  # the ingest URL of the gateway that sent it: where announcements go by default


def decide(policy: Policy, inc: Incident) -> Action:
    """What a firing incident calls for: its XID's rule when it has one, else its event type's, else NONE."""
    if inc.xid is not None and inc.xid in policy.xids:
        return policy.xids[inc.xid]
    return policy.types.get(inc.event_type, Action.NONE)


def drain_reason(inc: Incident) -> str:
    fault = inc.event_type + (" xid %d" % inc.xid if inc.xid is not None else "")
    gpu = " gpu %d" % inc.gpu if inc.gpu is not None and inc.gpu >= 0 else ""
    # Slurm keeps the reason as given; no quotes or newlines in it (they end the argument or the line)
    text = "%s %s%s incident %s" % (REASON_PREFIX, fault, gpu, inc.id)
    return "".join(c if c.isprintable() and c not in "\"'" else "_" for c in text)[:200]


def ours(reason: str | None) -> bool:
    """A drain this daemon may undo: its reason starts with sentinel: (NHC's rule for its own NHC: prefix)."""
    return bool(reason) and reason.strip().startswith(REASON_PREFIX)


@dataclass
class Breaker:
    """At most max_nodes isolations within window_s; once tripped it stays open (latched) until reset()."""

    max_nodes: int
    window_s: float
    times: list = field(default_factory=list)
    latched: bool = False
    announced: bool = False  # the terminal was told it is open (once)

    def admit(self, now: float) -> bool:
        """May one more node be isolated now? A no latches the breaker."""
        if self.latched:
            return False
        self.times = [t for t in self.times if now - t < self.window_s]
        if len(self.times) >= self.max_nodes:
            self.latched = True
            return False
        self.times.append(now)
        return True

    def reset(self):
        self.times = []
        self.latched = False
        self.announced = False

    def to_json(self):
        return {"times": self.times, "latched": self.latched, "announced": self.announced}

    def load(self, d):
        self.times = [float(t) for t in d.get("times", [])]
        self.latched = bool(d.get("latched"))
        self.announced = bool(d.get("announced"))


def may_requeue(restarts: int, max_restarts: int) -> bool:
    """Slurm's own self-requeue is uncapped; this daemon's is not."""
    return restarts < max_restarts
