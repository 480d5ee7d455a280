"""NCCL hang and fabric lines from PyTorch training logs, PyTorch 1.13 to 2.6+ and NCCL 2.18+ (docs/PROBES.md).

Forms (each is a ``Timeout`` with its ``form``):
- ``watchdog``: "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=.., OpType=..) ran for N milliseconds"
- ``blocking_wait``: "Work WorkNCCL(SeqNum=.., OpType=..) timed out in blocking wait" (TORCH_NCCL_BLOCKING_WAIT=1)
- ``pg_status``: "[PG ..] failure detected by watchdog at work sequence id: N PG status: ..." (2.2/2.3) and
  "Exception (either an error or timeout) detected by watchdog at work: N, last enqueued NCCL work: .." (2.4+)
- ``timeout_at``: "Timeout at NCCL work: N, last enqueued NCCL work: N, last completed NCCL work: N." (2.4+)
- ``watchdog_stuck``: "Heartbeat monitor timed out!" / "ProcessGroupNCCL's watchdog got stuck for N seconds" (2.2+):
  the watchdog itself hung, so no "Watchdog caught" line ever comes.
- ``net``: "NCCL WARN NET/IB : ..." (NCCL's own log): a fabric error, usually minutes before the timeout.

The rank comes from any of PyTorch's prefixes: ``[rank3]:``, ``[Rank 3]``, ``[PG 0 Rank 3]``,
``[PG 0 (default_pg) Rank 3]``, ``[PG ID 0 PG GUID 0(default_pg) Rank 3]``; the launcher's ``[rankN]:`` (the global
rank, which names the process) wins over the bracketed ``Rank n`` (the rank inside a process group) when both are
present.
"""

import re

from . import events

_WORK = r"WorkNCCL\((.*?)\)"
_CAUGHT = re.compile(r"Watchdog caught collective operation timeout: " + _WORK + r" ran for (\d+) milliseconds")
_BLOCKING = re.compile(r"Work " + _WORK + r" timed out in blocking wait")
_FIELD = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\))=([A-Za-z0-9_]+)")
# [Rank 3] / [PG 1 Rank 3] / [PG 0 (default_pg) Rank 3] / [PG ID 0 PG GUID 0(default_pg) Rank 3]
_RANK_BRACKET = re.compile(r"\[(?:PG (?:ID )?(\S+)(?: PG GUID \S+?)?(?: ?\(([^)\]]*)\))? )?Rank (\d+)\]")
_RANK_PREFIX = re.compile(r"\[rank(\d+)\]:")
_PG_OLD = re.compile(
    r"failure detected by watchdog at work sequence id: (\d+)"
    r"(?: PG status: last enqueued work: (\d+), last completed work: (\d+))?"
)
_PG_NEW = re.compile(
    r"Exception \(either an error or timeout\) detected by watchdog at work: (\d+), "
    r"last enqueued NCCL work: (-?\d+), last completed NCCL work: (-?\d+)"
)
_TIMEOUT_AT = re.compile(
    r"Timeout at NCCL work: (\d+), last enqueued NCCL work: (-?\d+), "
    r"last completed NCCL work: (-?\d+)"
)
_STUCK = re.compile(
    r"Heartbeat monitor timed out|watchdog got stuck for (\d+) seconds|"
    r"due to ProcessGroupNCCL watchdog hang"
)
# host:pid:tid [cudaDev] file:line NCCL WARN NET/IB : ...
_NET = re.compile(r"(?:(\S+?):(\d+):(\d+) )?(?:\[(\d+)\] )?(?:\S+:\d+ )?NCCL WARN (NET/\S+)\s*:?\s*(.*)")
_PEER = re.compile(r"from peer (\S+?)(?:<\d+>)?\s+with (?:status=|error )(\d+)")


class Timeout:
    __slots__ = (
        "rank",
        "seq",
        "op",
        "timeout_ms",
        "ran_ms",
        "pg",
        "last_enqueued",
        "last_completed",
        "form",
        "stuck_s",
        "host",
        "pid",
        "cuda_dev",
        "net",
        "peer",
        "status",
        "text",
    )

    def __init__(self, form, **fields):
        self.form = form
        for k in self.__slots__[:-1]:
            if k != "form":
                setattr(self, k, fields.get(k))
        self.text = fields.get("text")

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__ if k != "text"}

    def __repr__(self):
        return "Timeout(%r)" % ({k: v for k, v in self.as_dict().items() if v is not None},)


def _int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _rank(line):
    """(rank, process group name or id). The launcher's ``[rankN]:`` is the global rank and names the process; the
    bracketed ``Rank n`` is the rank inside the process group the line is about (equal for the default group)."""
    r = _RANK_BRACKET.search(line)
    pg = (r.group(2) or r.group(1)) if r else None
    g = _RANK_PREFIX.search(line)
    if g:
        return int(g.group(1)), pg
    if r:
        return int(r.group(3)), pg
    return None, None


def parse(line):
    """Return a Timeout for a hang or fabric line, else None (never raises on any text)."""
    if "atchdog" not in line and "NCCL" not in line and "blocking wait" not in line and "eartbeat" not in line:
        return None
    if "NCCL INFO" in line:  # NCCL_DEBUG=INFO chatter, thousands of lines per job start: never an event
        return None
    m = _CAUGHT.search(line)
    if m:
        f = dict(_FIELD.findall(m.group(1)))
        rank, pg = _rank(line)
        return Timeout(
            "watchdog",
            rank=rank,
            pg=pg,
            seq=_int(f.get("SeqNum")),
            op=f.get("OpType"),
            timeout_ms=_int(f.get("Timeout(ms)")),
            ran_ms=int(m.group(2)),
        )
    m = _BLOCKING.search(line)
    if m:
        f = dict(_FIELD.findall(m.group(1)))
        rank, pg = _rank(line)
        return Timeout(
            "blocking_wait",
            rank=rank,
            pg=pg,
            seq=_int(f.get("SeqNum")),
            op=f.get("OpType"),
            timeout_ms=_int(f.get("Timeout(ms)")),
        )
    for rx, form in ((_PG_NEW, "pg_status"), (_PG_OLD, "pg_status"), (_TIMEOUT_AT, "timeout_at")):
        m = rx.search(line)
        if m:
            rank, pg = _rank(line)
            return Timeout(
                form,
                rank=rank,
                pg=pg,
                seq=int(m.group(1)),
                last_enqueued=_int(m.group(2)),
                last_completed=_int(m.group(3)),
            )
    m = _STUCK.search(line)
    if m:
        rank, pg = _rank(line)
        return Timeout("watchdog_stuck", rank=rank, pg=pg, stuck_s=_int(m.group(1)))
    if "NCCL WARN NET/" in line:
        m = _NET.search(line)
        if m:
            peer = _PEER.search(m.group(6))
            return Timeout(
                "net",
                host=m.group(1),
                pid=_int(m.group(2)),
                cuda_dev=_int(m.group(4)),
                net=m.group(5),
                peer=peer.group(1) if peer else None,
                status=_int(peer.group(2)) if peer else None,
                text=m.group(6).strip()[:120],
            )
    return None


class NcclLog:
    """``parse`` with memory: the op of a (source, rank, seq) seen in a "Watchdog caught" line fills the lines that
    follow it about the same work (they name no op), so the dedup key (source, rank, seq, op) holds for all."""

    def __init__(self, capacity=4096):
        self._ops = {}
        self.capacity = capacity

    def feed(self, line, source):
        t = parse(line)
        if t is None:
            return None
        if t.seq is not None:
            k = (source, t.rank, t.seq)
            if t.op:
                self._ops[k] = t.op
                if len(self._ops) > self.capacity:
                    del self._ops[next(iter(self._ops))]
            else:
                t.op = self._ops.get(k)
        return t


def key(t, source):
    """The dedup key: (log source, rank, SeqNum, op); a stuck watchdog is keyed by its form, a fabric error by the
    process (host, pid) that saw it."""
    if t.form == "net":
        return ("nccl-net", source, t.host, t.pid)
    if t.form == "watchdog_stuck":
        return ("nccl", source, t.rank, None, "watchdog_stuck")
    return ("nccl", source, t.rank, t.seq, t.op)


def finding(t, source):
    """One finding per (source, rank, SeqNum, op): a second job (another log) timing out at the same SeqNum is its
    own incident; the lines one rank prints about one timed-out work are one."""
    if t.form == "net":
        detail = "NCCL %s error%s%s: %s" % (
            t.net,
            " on %s" % t.host if t.host else "",
            " (cuda device %s)" % t.cuda_dev if t.cuda_dev is not None else "",
            t.text or "",
        )
        return events.Finding(
            key(t, source),
            events.NCCL_NET_ERROR,
            events.NODE_WIDE,
            detail,
            log=source,
            net=t.net,
            peer=t.peer,
            nccl_status=t.status,
            cuda_dev=t.cuda_dev,
        )
    if t.form in ("watchdog", "blocking_wait"):
        detail = "rank %s: %s seq %s timed out %s (timeout %s ms)" % (
            t.rank,
            t.op or "collective",
            t.seq,
            "after %s ms" % t.ran_ms if t.ran_ms is not None else "in blocking wait",
            t.timeout_ms,
        )
    elif t.form == "watchdog_stuck":
        detail = "rank %s: NCCL watchdog stuck%s (heartbeat monitor): the collective never completed" % (
            t.rank,
            " for %s s" % t.stuck_s if t.stuck_s is not None else "",
        )
    else:
        detail = "rank %s: watchdog %s at seq %s (last enqueued %s, last completed %s)" % (
            t.rank,
            "timeout" if t.form == "timeout_at" else "failure",
            t.seq,
            t.last_enqueued,
            t.last_completed,
        )
    return events.Finding(
        key(t, source),
        events.NCCL_TIMEOUT,
        events.NODE_WIDE,
        detail,
        rank=t.rank,
        seq=t.seq,
        op=t.op,
        timeout_ms=t.timeout_ms,
        ran_ms=t.ran_ms,
        log=source,
        form=t.form,
        pg=t.pg,
    )
