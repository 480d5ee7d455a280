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
- ``dump_signal``: "Received a dump signal due to a collective timeout from rank N / this local rank" (2.3+, the
  flight recorder): another rank's timeout, told to this rank through the store; on a rank whose own collectives
  finished it is the only sign of the hang (docs/PROBES.md argues the mapping).

Job-killing failures that are not timeouts (``parse_failure``, one ``Failure`` each): a dead or unreachable peer
(``peer``), NCCL's error classes and a process group's async exception (``nccl``), CUDA's fatal errors (``cuda``).

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
# "[PG ID 0 PG GUID 0(default_pg) Rank 5] Received a dump signal due to a collective timeout from  rank 2 and we will
# try our best to dump the debug info. Last enqueued NCCL work: 136, last completed NCCL work: 136."
_DUMP = re.compile(
    r"Received a dump signal due to a collective timeout from\s+(this local rank|rank (\d+))"
    r".*?Last enqueued NCCL work: (-?\d+), last completed NCCL work: (-?\d+)"
)

# --- job-killing failures that are not timeouts (parse_failure) ---------------------------------------------------
PEER, NCCL_ERR, CUDA = "peer", "nccl", "cuda"
# CUDA's sticky errors: the context is dead, the process (and with it the process group) goes down
_CUDA_FATAL = re.compile(
    r"(?:CUDA error: |Cuda failure \d* ?')(an illegal memory access was encountered|"
    r"uncorrectable ECC error encountered|unspecified launch failure|an illegal instruction was encountered|"
    r"misaligned address|"
    r"hardware stack error|uncorrectable NVLink error detected during the execution)"
)
# the watchdog thread dies on any CUDA error and takes the process down with it (a normal shutdown's "driver shutting
# down" is an INFO line worded "main process destroyed cuda before watchdog loop exited", not this one)
_WATCHDOG_CUDA = re.compile(r"watchdog thread terminated with exception: CUDA error: ([^.(\n]+)")
# a peer that went away, as NCCL's socket layer and PyTorch word it; the socket words only count on NCCL's own lines
# (a dataloader's or a metrics client's "Connection reset by peer" is not the process group's)
_PEER_PYTORCH = re.compile(r"remote process exited or there was a network error|ncclRemoteError")
_PEER_SOCKET = re.compile(
    r"Connection closed by remote peer|Connection reset by peer|Broken pipe|Connection refused|"
    r"Software caused connection abort|Connect to \S+ failed"
)
_NCCL_CONTEXT = re.compile(r"NCCL WARN|socketProgress|socketStartConnect|\bNet : ")
_PEER_ADDR = re.compile(r"(?:from|to|peer) ((?:[0-9a-fA-F:.]+|[\w.-]+)<\d+>)")
# NCCL's error classes as PyTorch and NCCL name them ("NCCL error: unhandled cuda error", "ncclSystemError: ...",
# "NCCL Error 1: unhandled cuda error", "DistBackendError: NCCL error in: ..., internal error, NCCL version ...")
_NCCL_CLASS = re.compile(
    r"(ncclSystemError|ncclInternalError|ncclUnhandledCudaError|ncclInvalidUsage|ncclInvalidArgument)|"
    r"NCCL (?:error|Error \d+)(?: in: \S+)?:? (unhandled system error|internal error|unhandled cuda error|"
    r"invalid usage|invalid argument)"
)
# NCCL's own failure lines: a proxy operation that failed with NCCL's return code (6 = ncclRemoteError)
_RETCODE = re.compile(r"NCCL WARN .*Failed to execute operation \S+ from rank \d+, retcode (\d+)")
_NCCL_WARN_FATAL = re.compile(
    r"NCCL WARN (?:Cuda failure|Socket recv failed while polling|\[Service thread\] Error encountered)"
)
# NCCL's line head "host:pid:tid [cudaDev]" (anywhere: launchers and kubectl put their own prefixes in front)
_HEAD = re.compile(r"([^\s:\[\]]+):(\d+):(\d+) \[(\d+)\]")
_SEQ_OP = re.compile(r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+)")
_NCCL_STATUS = {
    "2": "ncclSystemError",
    "3": "ncclInternalError",
    "1": "ncclUnhandledCudaError",
    "5": "ncclInvalidUsage",
}


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
        "from_rank",
        "text",
        "key_op",
    )

    def __init__(self, form, **fields):
        self.form = form
        for k in self.__slots__:
            if k != "form":
                setattr(self, k, fields.get(k))
        self.key_op = self.op  # NcclLog keeps the op the work was first reported with, so later lines join it

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__ if k not in ("text", "key_op")}

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
    if (
        "atchdog" not in line
        and "NCCL" not in line
        and "blocking wait" not in line
        and "eartbeat" not in line
        and "dump signal" not in line
    ):
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
    m = _DUMP.search(line)
    if m:
        rank, pg = _rank(line)
        enq, done = int(m.group(3)), int(m.group(4))
        # work still pending on this rank: the same hang as its own timeout (same key); none pending: this rank's
        # collectives finished and the line is the only sign here of a hang elsewhere in the job
        return Timeout(
            "dump_signal",
            rank=rank,
            pg=pg,
            seq=done + 1 if enq > done else None,
            last_enqueued=enq,
            last_completed=done,
            from_rank=rank if m.group(2) is None else int(m.group(2)),
        )
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


class Failure:
    """A job-killing failure that is not a timeout: ``cls`` is PEER (a dead or unreachable peer), NCCL_ERR (NCCL's
    error classes, a process group's async exception) or CUDA (a sticky CUDA error)."""

    __slots__ = ("cls", "rank", "pg", "host", "pid", "cuda_dev", "peer", "seq", "op", "error", "text")

    def __init__(self, cls, **fields):
        self.cls = cls
        for k in self.__slots__[1:]:
            setattr(self, k, fields.get(k))

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__ if k != "text"}

    def __repr__(self):
        return "Failure(%r)" % ({k: v for k, v in self.as_dict().items() if v is not None},)


def parse_failure(line):
    """Return a Failure for a line that says the job's process group is going down for a reason other than a
    timeout, else None (never raises on any text). NCCL INFO lines and warnings the job survives give None."""
    if (
        "CUDA error" not in line
        and "Cuda failure" not in line
        and "NCCL" not in line
        and "nccl" not in line
        and "socketProgress" not in line
        and "Net : " not in line
        and "remote process exited" not in line
    ):
        return None
    if "NCCL INFO" in line:
        return None
    cls = error = None
    m = _CUDA_FATAL.search(line) or _WATCHDOG_CUDA.search(line)
    if m:
        cls, error = CUDA, m.group(1).strip()
    else:
        m = _PEER_PYTORCH.search(line)
        if m:
            cls, error = PEER, "ncclRemoteError"
        else:
            m = _PEER_SOCKET.search(line)
            if m and _NCCL_CONTEXT.search(line):
                cls, error = PEER, m.group(0)
            else:
                m = _RETCODE.search(line)
                if m:
                    code = m.group(1)
                    cls = PEER if code == "6" else NCCL_ERR
                    error = "ncclRemoteError" if code == "6" else _NCCL_STATUS.get(code, "retcode %s" % code)
                else:
                    m = _NCCL_CLASS.search(line)
                    if m:
                        cls, error = NCCL_ERR, m.group(1) or m.group(2)
                    else:
                        m = _NCCL_WARN_FATAL.search(line)
                        if m:
                            cls, error = NCCL_ERR, line[m.start() + len("NCCL WARN ") :].strip()[:80]
    if cls is None:
        return None
    rank, pg = _rank(line)
    head = _HEAD.search(line) if "NCCL WARN" in line else None
    peer = _PEER_ADDR.search(line) if cls == PEER else None
    so = _SEQ_OP.search(line)
    return Failure(
        cls,
        rank=rank,
        pg=pg,
        host=head.group(1) if head else None,
        pid=_int(head.group(2)) if head else None,
        cuda_dev=_int(head.group(4)) if head else None,
        peer=peer.group(1) if peer else None,
        seq=int(so.group(1)) if so else None,
        op=so.group(2) if so else None,
        error=error,
        text=line.strip()[:160],
    )


FAILURE_TYPES = {PEER: events.NCCL_PEER_LOST, NCCL_ERR: events.NCCL_ERROR, CUDA: events.CUDA_ERROR}
_FAILURE_WORDS = {
    PEER: "lost a peer (%s)",
    NCCL_ERR: "NCCL error (%s)",
    CUDA: "CUDA error (%s)",
}


def failure_key(f, source):
    """One event per (log, rank, failure): a failure's many lines on one rank (the NCCL WARN, the DistBackendError,
    the watchdog's exception, the traceback's last line) are one; a line that names no rank is keyed by the process
    that printed it (NCCL's host:pid), else by the log."""
    if f.rank is not None:
        return ("nccl-fail", source, f.rank)
    return ("nccl-fail", source, None, f.host, f.pid)


def failure_finding(f, source):
    what = _FAILURE_WORDS[f.cls] % (f.error,)
    detail = "%s: %s%s%s: the process group aborts" % (
        "rank %s" % f.rank if f.rank is not None else (f.host or "a rank"),
        what,
        " from %s" % f.peer if f.peer else "",
        " at %s seq %s" % (f.op, f.seq) if f.seq is not None else "",
    )
    return events.Finding(
        failure_key(f, source),
        FAILURE_TYPES[f.cls],
        events.NODE_WIDE,
        detail,
        rank=f.rank,
        peer=f.peer,
        seq=f.seq,
        op=f.op,
        error=f.error,
        log=source,
        pg=f.pg,
        cuda_dev=f.cuda_dev,
    )


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
            if k in self._ops:
                first = self._ops[k]
                if t.op is None:
                    t.op = first[1]
                elif first[1] is None:
                    self._ops[k] = (first[0], t.op)
                t.key_op = first[0]  # the op the work was first reported with: every later line joins that event
            else:
                self._ops[k] = (t.op, t.op)
                if len(self._ops) > self.capacity:
                    del self._ops[next(iter(self._ops))]
        return t

    def finding(self, line, source):
        """The Finding a training-log line gives (a hang form, a fabric warning or a job-killing failure), or None."""
        t = self.feed(line, source)
        if t is not None:
            return finding(t, source)
        f = parse_failure(line)
        return None if f is None else failure_finding(f, source)


def key(t, source):
    """The dedup key: (log source, rank, SeqNum, op); a stuck watchdog is keyed by its form, a fabric error by the
    process (host, pid) that saw it."""
    if t.form == "net":
        return ("nccl-net", source, t.host, t.pid)
    if t.form == "watchdog_stuck":
        return ("nccl", source, t.rank, None, "watchdog_stuck")
    if t.form == "dump_signal" and t.seq is None:
        return ("nccl", source, t.rank, None, "dump_signal")
    return ("nccl", source, t.rank, t.seq, t.key_op)


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
    elif t.form == "dump_signal":
        detail = "rank %s: %s; %s" % (
            t.rank,
            "collective timeout on this rank"
            if t.from_rank == t.rank
            else "rank %s reported a collective timeout" % (t.from_rank,),
            "work %s pending" % t.seq if t.seq is not None else "this rank's collectives had finished",
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
        from_rank=t.from_rank,
    )
