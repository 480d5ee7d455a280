"""NCCL watchdog lines from PyTorch training logs (every form in FACTS.md section 7)."""

import re

from . import events

_CAUGHT = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\((.*?)\) ran for (\d+) milliseconds")
_FIELD = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\))=([A-Za-z0-9_]+)")
_RANK_BRACKET = re.compile(r"\[Rank (\d+)\]")
_RANK_PREFIX = re.compile(r"\[rank(\d+)\]:")
_PG = re.compile(r"\[PG ID (\S+) PG GUID (\S+?)(?:\((\S*?)\))? Rank (\d+)\]\s+(?:failure detected by watchdog at work "
                 r"sequence id: (\d+)(?: PG status: last enqueued work: (\d+), last completed work: (\d+))?"
                 # PyTorch >= 2.4 words the same report differently
                 r"|Exception \(either an error or timeout\) detected by watchdog at work: (\d+), "
                 r"last enqueued NCCL work: (\d+), last completed NCCL work: (\d+))")


class Timeout:
    __slots__ = ("rank", "seq", "op", "timeout_ms", "ran_ms", "pg", "last_enqueued", "last_completed", "form")

    def __init__(self, form, rank=None, seq=None, op=None, timeout_ms=None, ran_ms=None, pg=None,
                 last_enqueued=None, last_completed=None):
        self.form = form
        self.rank = rank
        self.seq = seq
        self.op = op
        self.timeout_ms = timeout_ms
        self.ran_ms = ran_ms
        self.pg = pg
        self.last_enqueued = last_enqueued
        self.last_completed = last_completed

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self):
        return "Timeout(%r)" % (self.as_dict(),)


def _int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def parse(line):
    """Return a Timeout for a watchdog line, else None.

    form: "watchdog" (both generations of "Watchdog caught collective operation timeout") or "pg_status".
    """
    if "atchdog" not in line:
        return None
    m = _CAUGHT.search(line)
    if m:
        fields = dict(_FIELD.findall(m.group(1)))
        rank = None
        r = _RANK_BRACKET.search(line) or _RANK_PREFIX.search(line)
        if r:
            rank = int(r.group(1))
        return Timeout("watchdog", rank=rank, seq=_int(fields.get("SeqNum")), op=fields.get("OpType"),
                       timeout_ms=_int(fields.get("Timeout(ms)")), ran_ms=int(m.group(2)))
    m = _PG.search(line)
    if m:
        pg = m.group(3) or m.group(1)
        g = m.groups()
        seq, enq, comp = (g[4], g[5], g[6]) if g[4] is not None else (g[7], g[8], g[9])
        return Timeout("pg_status", rank=int(m.group(4)), seq=int(seq), pg=pg,
                       last_enqueued=_int(enq), last_completed=_int(comp))
    return None


def finding(t, source):
    """One finding per collective: every rank's line about the same sequence number is the same incident."""
    if t.form == "watchdog":
        detail = "rank %s: %s seq %s timed out after %s ms (timeout %s ms)" % (
            t.rank, t.op or "collective", t.seq, t.ran_ms, t.timeout_ms)
    else:
        detail = "rank %s: watchdog failure at seq %s (last enqueued %s, last completed %s)" % (
            t.rank, t.seq, t.last_enqueued, t.last_completed)
    return events.Finding(("nccl", t.seq if t.seq is not None else source), events.NCCL_TIMEOUT, events.NODE_WIDE,
                          detail, rank=t.rank, seq=t.seq, op=t.op, timeout_ms=t.timeout_ms, ran_ms=t.ran_ms,
                          log=source)
