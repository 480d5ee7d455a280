"""The probe's side of the event vocabulary (host_client/vocabulary.py) and the one-condition-one-event ledger.

A *finding* is something a check sees right now ("GPU 3 link is Gen3 x4"). The gateway must hear about it
once when it appears and once (as RECOVERED) when it goes away, never again while it persists: the
``Conditions`` ledger turns a stream of per-sample findings into exactly those transitions. Edge-triggered
signals with no observable end (an XID line, an NCCL watchdog line) go through ``Oneshots`` instead, which
only suppresses the same signal for a hold period.
"""

import itertools
import os
import time

# The vocabulary (types, levels, hang and critical types) is host_client/vocabulary.py, shared with the gateway.
from host_client.vocabulary import (  # noqa: F401 (re-exported: the probes read events.XID_FATAL and so on)
    CRITICAL_TYPES,
    CUDA_ERROR,
    FABRIC_MANAGER_ERROR,
    GPU_LOST,
    GPU_MEMORY_ERROR,
    GPU_RESET_PENDING,
    GPU_THROTTLE,
    GPU_UTIL_DROP,
    HANG_TYPES,
    IB_LINK_DEGRADED,
    IB_PORT_DOWN,
    JOB_FAILED,
    LEVELS,
    MAX_DETAIL,
    NCCL_ERROR,
    NCCL_NET_ERROR,
    NCCL_PEER_LOST,
    NCCL_TIMEOUT,
    NIC_CONGESTION,
    NIC_FAILURE,
    NVLINK_ERROR,
    NVSWITCH_FATAL,
    NVSWITCH_WARNING,
    OPTICS_WARNING,
    PCIE_AER_STORM,
    PCIE_DOWNGRADE,
    PCIE_FATAL,
    PROBE_SOURCE_DOWN,
    PROGRAM_ERROR,
    PROGRESS_STALL,
    RECOVERED,
    RENDEZVOUS_FAILED,
    THERMAL,
    XID_FATAL,
    XID_WARNING,
)
from host_client.vocabulary import NAMES as EVENT_TYPES

# gpu_index for findings that belong to the node or a job rather than one GPU (an NCCL line names a rank,
# not a device).
NODE_WIDE = -1
# gpu_util when no utilisation sample exists for that GPU (no NVML, or a node-wide finding): JSON null, which
# the gateway reads as "not reported" (the RFC's rule "gpu_util < 5 is critical" must not fire on a guess).
UTIL_UNKNOWN = None


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
