"""The event vocabulary shared with the gateway, and the bookkeeping that keeps one condition = one event.

A *finding* is something a check sees right now ("GPU 3 link is Gen3 x4"). The gateway must hear about it
once when it appears and once (as RECOVERED) when it goes away, never again while it persists: the
``Conditions`` ledger turns a stream of per-sample findings into exactly those transitions. Edge-triggered
signals with no observable end (an XID line, an NCCL watchdog line) go through ``Oneshots`` instead, which
only suppresses the same signal for a hold period.
"""

import itertools
import os
import time

NCCL_TIMEOUT = "NCCL_TIMEOUT"
XID_FATAL = "XID_FATAL"
XID_WARNING = "XID_WARNING"
PCIE_DOWNGRADE = "PCIE_DOWNGRADE"
THERMAL = "THERMAL"
NVLINK_ERROR = "NVLINK_ERROR"
PROGRESS_STALL = "PROGRESS_STALL"
GPU_UTIL_DROP = "GPU_UTIL_DROP"
GPU_LOST = "GPU_LOST"  # a GPU that stopped answering NVML / nvidia-smi (issue 11)
NCCL_NET_ERROR = "NCCL_NET_ERROR"  # "NCCL WARN NET/IB ...": the earliest sign of a fabric fault
# job-killing failures that are not timeouts (issue 24): the process group aborts, usually minutes before a timeout
NCCL_PEER_LOST = "NCCL_PEER_LOST"  # a peer closed or reset the connection, or exited ("ncclRemoteError")
NCCL_ERROR = "NCCL_ERROR"  # NCCL's error classes, a process group's async exception
CUDA_ERROR = "CUDA_ERROR"  # a sticky CUDA error in a training process (illegal memory access, uncorrectable ECC)
# the fabric and the hardware under the GPU (issue 35; docs/PROBES.md "Fabric and hardware sources")
IB_PORT_DOWN = "IB_PORT_DOWN"  # an InfiniBand/RoCE port that was ACTIVE left ACTIVE
IB_LINK_DEGRADED = "IB_LINK_DEGRADED"  # a port trained below its first rate or the configured one
OPTICS_WARNING = "OPTICS_WARNING"  # the RFC's 光模块误码告警: hot module, rx power, bit-error counters rising
NIC_CONGESTION = "NIC_CONGESTION"  # PFC pause storm, RoCE retransmissions
NIC_FAILURE = "NIC_FAILURE"  # mlx5 firmware health compromised, PCIe fatal below a NIC
NVSWITCH_FATAL = "NVSWITCH_FATAL"  # SXid marked Fatal
NVSWITCH_WARNING = "NVSWITCH_WARNING"  # SXid marked Non-fatal
FABRIC_MANAGER_ERROR = "FABRIC_MANAGER_ERROR"  # the Fabric Manager log's failures
PCIE_FATAL = "PCIE_FATAL"  # AER uncorrectable fatal / DPC / surprise down on a device that is neither GPU nor NIC
PCIE_AER_STORM = "PCIE_AER_STORM"  # corrected AER errors at a storm rate
GPU_MEMORY_ERROR = "GPU_MEMORY_ERROR"  # row remap failed, uncorrectable ECC rising with no spare row
GPU_RESET_PENDING = "GPU_RESET_PENDING"  # a row remap / page retirement waiting for a GPU reset
GPU_THROTTLE = "GPU_THROTTLE"  # HW slowdown / HW thermal / HW power brake held over a window
RECOVERED = "RECOVERED"

EVENT_TYPES = (
    NCCL_TIMEOUT,
    XID_FATAL,
    XID_WARNING,
    PCIE_DOWNGRADE,
    THERMAL,
    NVLINK_ERROR,
    PROGRESS_STALL,
    GPU_UTIL_DROP,
    GPU_LOST,
    NCCL_NET_ERROR,
    NCCL_PEER_LOST,
    NCCL_ERROR,
    CUDA_ERROR,
    IB_PORT_DOWN,
    IB_LINK_DEGRADED,
    OPTICS_WARNING,
    NIC_CONGESTION,
    NIC_FAILURE,
    NVSWITCH_FATAL,
    NVSWITCH_WARNING,
    FABRIC_MANAGER_ERROR,
    PCIE_FATAL,
    PCIE_AER_STORM,
    GPU_MEMORY_ERROR,
    GPU_RESET_PENDING,
    GPU_THROTTLE,
    RECOVERED,
)

# The level each type reaches the room at (docs/PROBES.md, "Severity"): the gateway's table
# (host_client/gateway/events.py EVENT_TYPES[...]["level"]) must say the same; tests/test_probes_corpus.py checks it.
# The gateway raises a hang type (NCCL_TIMEOUT, PROGRESS_STALL, GPU_UTIL_DROP) to P0 when the GPU's utilisation is
# under 5 % (the RFC's rule, applied only to hangs); no other type changes level with utilisation.
LEVELS = {
    NCCL_TIMEOUT: "P0",
    XID_FATAL: "P0",
    GPU_LOST: "P0",
    PROGRESS_STALL: "P0",
    NCCL_PEER_LOST: "P0",
    NCCL_ERROR: "P0",
    CUDA_ERROR: "P0",
    XID_WARNING: "P1",
    PCIE_DOWNGRADE: "P1",
    THERMAL: "P1",
    NVLINK_ERROR: "P1",
    GPU_UTIL_DROP: "P1",
    NCCL_NET_ERROR: "P1",
    IB_PORT_DOWN: "P0",
    NIC_FAILURE: "P0",
    NVSWITCH_FATAL: "P0",
    FABRIC_MANAGER_ERROR: "P0",
    PCIE_FATAL: "P0",
    GPU_MEMORY_ERROR: "P0",
    IB_LINK_DEGRADED: "P1",
    OPTICS_WARNING: "P1",
    NIC_CONGESTION: "P1",
    NVSWITCH_WARNING: "P1",
    PCIE_AER_STORM: "P1",
    GPU_RESET_PENDING: "P1",
    GPU_THROTTLE: "P1",
}
HANG_TYPES = frozenset((NCCL_TIMEOUT, PROGRESS_STALL, GPU_UTIL_DROP))

# Types the sender keeps longest when its queue overflows: they are the ones the RFC pages on.
CRITICAL_TYPES = frozenset(t for t, level in LEVELS.items() if level == "P0")

# gpu_index for findings that belong to the node or a job rather than one GPU (an NCCL line names a rank,
# not a device).
NODE_WIDE = -1
# gpu_util when no utilisation sample exists for that GPU (no NVML, or a node-wide finding): JSON null, which
# the gateway reads as "not reported" (the RFC's rule "gpu_util < 5 is critical" must not fire on a guess).
UTIL_UNKNOWN = None
MAX_DETAIL = 200


class Finding:
    """One observed problem. ``key`` identifies the condition (same key on the next sample = same problem)."""

    __slots__ = ("key", "event_type", "gpu_index", "detail", "extra")

    def __init__(self, key, event_type, gpu_index, detail, **extra):
        if event_type not in EVENT_TYPES or event_type == RECOVERED:
            raise ValueError("unknown finding type %r" % (event_type,))
        self.key = key
        self.event_type = event_type
        self.gpu_index = int(gpu_index)
        self.detail = detail
        self.extra = extra

    def __repr__(self):
        return "Finding(%r, %s, gpu=%d, %r)" % (self.key, self.event_type, self.gpu_index, self.detail)


class Conditions:
    """Ledger of level-triggered conditions per check.

    ``update(check, findings)`` takes the full set of findings one run of a check produced and returns
    ``(raised, cleared)``: findings that are new, and previously raised findings of that check that are gone.
    A check that could not evaluate some condition (for example PCIe generation on an idle GPU) must re-report
    the finding it still believes in; that is how "unknown" keeps a condition open instead of clearing it.
    """

    def __init__(self):
        self._active = {}  # check -> {key: Finding}
        self.since = {}  # key -> time raised

    def update(self, check, findings, now=None):
        now = time.time() if now is None else now
        old = self._active.get(check, {})
        new = {}
        for f in findings:
            new[f.key] = f
        raised = [f for k, f in new.items() if k not in old]
        cleared = [f for k, f in old.items() if k not in new]
        # Keep the first finding object for a persisting key, so its detail is the one the gateway heard.
        merged = {}
        for k, f in new.items():
            merged[k] = old.get(k, f)
        self._active[check] = merged
        for f in raised:
            self.since[f.key] = now
        for f in cleared:
            self.since.pop(f.key, None)
        return raised, cleared

    def revise(self, check, findings):
        """Standing findings whose ``revision`` (in extra) changed since they were raised or last revised: the
        condition is the same (same key, no RECOVERED) but what is known about it moved on (a stalled job died).
        Returns them so the caller re-sends them as firing; the ledger keeps the revised finding."""
        old = self._active.get(check, {})
        out = []
        for f in findings:
            cur = old.get(f.key)
            if cur is not None and cur is not f and f.extra.get("revision") != cur.extra.get("revision"):
                old[f.key] = f
                out.append(f)
        return out

    def active(self):
        out = []
        for findings in self._active.values():
            out.extend(findings.values())
        return out


class Oneshots:
    """Suppress repeats of an edge-triggered signal (same key) for ``hold_s`` seconds after it was reported."""

    def __init__(self, hold_s, capacity=4096):
        self.hold_s = float(hold_s)
        self.capacity = int(capacity)
        self._seen = {}
        self.suppressed = 0

    def admit(self, key, now):
        last = self._seen.get(key)
        if last is not None and now - last < self.hold_s:
            self.suppressed += 1
            return False
        self._seen[key] = now
        if len(self._seen) > self.capacity:
            self._prune(now)
        return True

    def _prune(self, now):
        for k in [k for k, t in self._seen.items() if now - t >= self.hold_s]:
            del self._seen[k]
        while len(self._seen) > self.capacity:
            # dicts keep insertion order: the oldest report goes first
            del self._seen[next(iter(self._seen))]

    def recent(self, now):
        return [k for k, t in self._seen.items() if now - t < self.hold_s]


_ids = itertools.count(1)


class Identity:
    """Where events come from: the RFC's cluster_rack and node_host."""

    def __init__(self, rack, host):
        if not rack or not isinstance(rack, str):
            raise ValueError("rack must be a non-empty string")
        if not host or not isinstance(host, str):
            raise ValueError("host must be a non-empty string")
        self.rack = rack
        self.host = host
        self._prefix = "%s-%d-%d-" % (host, os.getpid(), int(time.time()))

    def next_id(self):
        return self._prefix + str(next(_ids))


def body(identity, finding, gpu_util, *, recovered=False, now=None):
    """The gpu_event body: the RFC's five fields first, then the documented optional ones (docs/PROBES.md)."""
    util = UTIL_UNKNOWN if gpu_util is None else round(float(gpu_util), 1)
    ev = {
        "cluster_rack": identity.rack,
        "node_host": identity.host,
        "event_type": RECOVERED if recovered else finding.event_type,
        "gpu_index": finding.gpu_index,
        "gpu_util": util,
    }
    if recovered:
        ev["recovers"] = finding.event_type
        ev["state"] = "recovered"
    else:
        ev["state"] = "firing"
    if finding.detail:
        ev["detail"] = "".join(c if " " <= c != "\x7f" else " " for c in finding.detail)[:MAX_DETAIL]
    for k, v in finding.extra.items():
        if v is not None and k not in ev and k != "revision":
            ev[k] = v
    ev["key"] = "%s:%s" % (identity.host, ":".join(str(p) for p in finding.key))
    ev["event_id"] = identity.next_id()
    ev["ts"] = round(time.time() if now is None else now, 3)
    return ev
