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
import time

from . import cuda_errors, events, launcher, nccl_errors

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

# lines of one failure come within seconds; a failure after this much quiet on the same rank/process is a new incident
INCIDENT_GAP_S = 60.0
# the launcher's summary comes after the agent stopped the other ranks (SIGTERM, then up to 30 s before SIGKILL)
LAUNCHER_WINDOW_S = 300.0
# NCCL's line head "host:pid:tid [cudaDev]" (anywhere: launchers and kubectl put their own prefixes in front)
_HEAD = re.compile(r"([^\s:\[\]]+):(\d+):(\d+) \[(\d+)\]")
_SEQ_OP = re.compile(r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+)")


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


# --- job-killing failures that are not timeouts (parse_failure): read by the error they name ----------------------
# classes: a lost peer, NCCL's own failure, a CUDA error that kills the context or says the node is sick, the
# program's own bug (CUDA or NCCL, P1), the launcher's report of a dead rank, a rendezvous that never completed
PEER, NCCL_ERR, CUDA, PROGRAM, JOB, RDZV = "peer", "nccl", "cuda", "program", "job", "rendezvous"
CLASSES = (PEER, NCCL_ERR, CUDA, PROGRAM, JOB, RDZV)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# the names are their own context: cudaErrorIllegalAddress, CUDA_ERROR_ILLEGAL_ADDRESS
_CUDA_NAME = re.compile(r"\b(cudaError[A-Z][A-Za-z]+|CUDA_ERROR_[A-Z_]+[A-Z])\b")
# numbers in their context: (regex, CUDA <= 10.0 numbering possible)
_CUDA_NUMBERS = (
    (re.compile(r"cuda runtime error \((\d+)\)", re.IGNORECASE), True),
    (re.compile(r"THCudaCheck FAIL.*?error=(\d+)"), True),
    (re.compile(r"== cudaSuccess \((\d+) vs\. 0\)"), True),
    (re.compile(r"\bcode=(\d+)\b"), False),
    (re.compile(r"\bCuda failure (\d+)\b"), False),
    (re.compile(r"CUDA (?:error|Error|ERROR|failure|Failure)[ :]+(?:code )?(\d+)\b"), False),
    (re.compile(r"\b(?:cuda|cu)[A-Z]\w*(?:\(\))? (?:returned|failed with(?: error)?|error)[ :=(]*(\d+)\b"), False),
    (re.compile(r"\bError (\d+): "), False),
)
_LIB_STATUS = re.compile(r"\b(CUBLAS_STATUS_(?!SUCCESS)[A-Z_]+|CUDNN_STATUS_(?!SUCCESS)[A-Z_]+)")
# the driver API's calls as they appear in messages (cuMemAlloc failed: out of memory): a CUDA context of their own
_CU_CALLS = ("cuInit", "cuMem", "cuLaunch", "cuCtx", "cuModule", "cuStream", "cuEvent", "cuDevice")
_CUDA_HEX = re.compile(r"returned \((0x[0-9a-fA-F]+)\)")
# PyTorch's caching allocator words its own OOM (the program's sizing: P1 like cudaErrorMemoryAllocation)
_TORCH_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError: CUDA")
# NCCL's result names are their own context; its strings count after NCCL's error words
_NCCL_NAME = re.compile(
    r"\b(ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclInvalidArgument|"
    r"ncclInvalidUsage|ncclRemoteError)\b"
)
_NCCL_DISTINCT = (
    "unhandled system error",
    "unhandled cuda error",
    "remote process exited or there was a network error",
)
_NCCL_CALL = re.compile(r"\bnccl[A-Z]\w+(?:\([^)]*\))? failed")
# NCCL's own words for a program that used it wrongly (ncclInvalidUsage), wherever PyTorch prints NCCL's "Last error:"
_NCCL_MISUSE = re.compile(r"Duplicate GPU detected|Attempt to use communicator before the previous operation returned")
_NCCL_NUMBER = re.compile(r"NCCL (?:Error|error) (\d+)\b|\bretcode (\d+)\b|\bres=(\d+)\b")
# a peer that went away, as NCCL's socket layer and PyTorch word it; the socket words only count on NCCL's own lines
# (a dataloader's or a metrics client's "Connection reset by peer" is not the process group's)
_PEER_SOCKET = re.compile(
    r"Connection closed by remote peer|Connection reset by peer|Broken pipe|Connection refused|"
    r"Software caused connection abort|No route to host|Network is unreachable|Connection timed out|"
    r"exceeded (?:error )?retr\w*(?: count)?|exceeded timeouts?|"
    r"Connect to \S+ failed"
)
_NCCL_SOCKET_LINE = re.compile(r"NCCL WARN|socketProgress|socketStartConnect|socketPollConnect|\bNet : ")
_PEER_ADDR = re.compile(r"(?:from|to|peer) ((?:[0-9a-fA-F:.]+|[\w.-]+)<\d+>)")
# NCCL's WARN lines at init and teardown that end the communicator (NCCL 2.18-2.28 wording): /dev/shm segments,
# verbs calls, proxy calls and its service thread, socket accept, any "Call to X failed"
_NCCL_WARN_FATAL = re.compile(
    r"NCCL WARN (?:.*?(?P<shm>/dev/shm/\S+|shared memory)|"
    r".*?(?P<boot>no socket interface found|Bootstrap : .*?(?:failed|timed out|timeout)|Message truncated)|"
    r".*?(?P<ibv>ibv_\w+)(?: \S+)? failed|"
    r"(?P<proxy>\[Proxy Service \d+\]|Proxy Call|\[Service thread\] Error|Socket recv failed while polling)|"
    r".*?(?P<accept>[Aa]ccept(?:ed)? failed)|"
    r".*?Call to (?P<call>\w+) failed)"
)
# NCCL WARN lines that report a failure already told (a "Cuda failure"'s follow-up): not a new incident, not an event
_NCCL_WARN_QUIET = re.compile(
    r"NCCL WARN (?:\[[^\]]*\] )?(?:Failed to open libibverbs|Could not find real path|Could not receive)"
)
_RANK_LAUNCHER = re.compile(r"\[default(\d+)\]:|\((?:\w+ )?pid=(\d+)(?:, ip=([\d.]+))?\)")
# the level a logger gave the line: glog's [W... file.cpp:N] / "W tensorflow/...", Python's warnings and logging
_GLOG_LEVEL = re.compile(r"(?:^|[\s\]:|])\[?([IWEF])(?:\d{3,4} [\d:.]+)? ?[\w./-]+\.(?:cpp|cc|c|h|hpp|cu|py):\d+\]")
_PY_WARNING = re.compile(
    r"\b(?:UserWarning|FutureWarning|DeprecationWarning|RuntimeWarning|WARNING|Warning:|warnings\.warn)"
)
# "exceeded error retry count": the retries are what failed, not a recovery
_GAVE_UP = re.compile(r"exceeded|exhausted|giving up|gave up|too many retries|no more retries", re.IGNORECASE)
_RECOVERED = re.compile(
    r"\b(?:retry|retrying|retried|will retry|recovered|recovering|falling back|fall back|fallback|ignor(?:e|ed|ing)|"
    r"skipping|trying again|succeeded|resuming|continuing)\b",
    re.IGNORECASE,
)
# c10d's store: a rendezvous that never completed (the client gave up on the store, or the store on its clients)
_RDZV = re.compile(
    r"retrieving ncclUniqueId from \[\d+\] via c10d key-value store by key '[^']*', but store->get\('[^']*'\) got "
    r"error: (?P<store>[^.\n]+)|"
    r"client socket has timed out after (\d+\w*) while trying to connect to \(?([^,()\s]+), ?(\d+)\)?|"
    r"Timed out after (\d+) seconds waiting for clients|"
    r"(RendezvousTimeoutError|RendezvousConnectionError|The connection to the C10d store has failed)|"
    r"DistNetworkError: (?P<net>[^\n]{1,80})"
)


class Failure:
    """A job-killing failure that is not a timeout: ``cls`` is one of CLASSES; ``code`` the CUDA or NCCL number the
    line names (or the exit code the launcher reports), ``error`` its name."""

    __slots__ = (
        "cls",
        "rank",
        "pg",
        "host",
        "pid",
        "cuda_dev",
        "peer",
        "seq",
        "op",
        "error",
        "code",
        "level",
        "who",
        "text",
    )

    def __init__(self, cls, **fields):
        self.cls = cls
        for k in self.__slots__[1:]:
            setattr(self, k, fields.get(k))

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__ if k not in ("text", "who")}

    def __repr__(self):
        return "Failure(%r)" % ({k: v for k, v in self.as_dict().items() if v is not None},)


def clean(line):
    """The text a reader sees: colour codes out, a carriage-return-joined line cut to what was printed last."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    return line


# descriptions longest first, so "operation not supported on global/shared address space" wins over its prefix
_DESCRIPTIONS = sorted(cuda_errors.BY_DESCRIPTION.items(), key=lambda kv: len(kv[0]), reverse=True)
# each description under its longest word: a line is searched for the words, and only the descriptions whose word
# it holds are searched for (every string on every line was most of a healthy line's cost)
_PUNCT = str.maketrans(dict.fromkeys("'\"`.,:;()[]{}<>=|!?", " "))
_COMMON = frozenset(("a", "an", "the", "is", "was", "on", "of", "for", "to", "in", "error", "invalid", "device", "not"))


def _key_word(d):
    words = [w for w in d.translate(_PUNCT).split() if w not in _COMMON]
    return max(words or d.split(), key=len)


_BY_WORD = {}
for _d, _row in _DESCRIPTIONS:
    _BY_WORD.setdefault(_key_word(_d), []).append((_d, _row))
_BY_WORD_ITEMS = tuple(_BY_WORD.items())
_BY_WORD_DISTINCT = tuple(
    (w, tuple(x for x in ds if x[0] in cuda_errors.DISTINCT))
    for w, ds in _BY_WORD.items()
    if any(x[0] in cuda_errors.DISTINCT for x in ds)
)


def _candidates(first_gate, descriptions):
    """The strings a line can hold whose first gate word is _GATE_WORDS[first_gate]: none holding an earlier one."""
    earlier = _GATE_WORDS[:first_gate]
    out = []
    for w, ds in _BY_WORD.items():
        keep = tuple(
            x for x in ds if x[0] in descriptions and x[1][4] is not None and not any(g in x[0] for g in earlier)
        )
        if keep:
            out.append((w, keep))
    return tuple(out)


# each number form with the literal that must be on the line before its regex is worth running (cost: see bench/)
_CUDA_NUMBER_GATES = (
    ("untime error (",) + _CUDA_NUMBERS[0],
    ("THCudaCheck",) + _CUDA_NUMBERS[1],
    ("cudaSuccess (",) + _CUDA_NUMBERS[2],
    ("code=",) + _CUDA_NUMBERS[3],
    ("Cuda failure ",) + _CUDA_NUMBERS[4],
    ("CUDA ",) + _CUDA_NUMBERS[5],
    (" returned",) + _CUDA_NUMBERS[6],
    ("failed with",) + _CUDA_NUMBERS[6],
    ("Error ",) + _CUDA_NUMBERS[7],
)
_RECOVERED_WORDS = ("retr", "recover", "fall", "ignor", "skipp", "again", "succeeded", "resum", "continu")


def cuda_error(line, low=None, *, gate=None):
    """The CUDA error row (cuda_errors.TABLE) a line names, by name, by string or by number in its context, and how
    it was named; (None, None) if none. The string wins over a number (CUDA <= 10.0 numbered differently). ``gate``:
    the index of the first _GATE_WORDS word the line holds (the strings holding an earlier one cannot be on it)."""
    if "cudaError" in line or "CUDA_ERROR_" in line:
        m = _CUDA_NAME.search(line)
        if m:
            row = cuda_errors.BY_NAME.get(m.group(1).lower())
            if row is not None:
                return row, "name"
    low = line.lower() if low is None else low
    ctx = "cuda" in low or "gpuassert" in low or ("cu" in line and any(p in line for p in _CU_CALLS))
    # the longest string the line holds ("... not supported on global/shared address space" over its prefix)
    # a line that speaks of CUDA and says nothing went wrong names no error ("CUDA kernel errors might be ...")
    quiet_ctx = gate == 0 and not (
        "error" in low
        or "fail" in low
        or "assert" in low
        or "->" in low
        or "abort" in low
        or "exception" in low
        or "returned" in low
    )
    if gate is None:
        words = _BY_WORD_ITEMS if ctx else _BY_WORD_DISTINCT
    else:
        words = () if quiet_ctx else _CANDIDATES[gate][0 if ctx else 1]
    hits = [(d, row) for w, ds in words if w in low for d, row in ds if d in low]
    if hits:
        d, row = max(hits, key=lambda h: len(h[0]))
        return row, "string"
    for text, n in cuda_errors.WORDINGS.items():
        if text in low:
            return cuda_errors.BY_NUMBER[n], "string"
    if not ctx or quiet_ctx:
        return None, None
    if "out of memory" in low and _TORCH_OOM.search(line):
        return cuda_errors.BY_NUMBER[2], "string"
    if "returned (0x" in line:  # cuda-gdb: "Cuda API error detected: cudaLaunchKernel returned (0x2bd)"
        m = _CUDA_HEX.search(line)
        row = cuda_errors.lookup_number(int(m.group(1), 16), legacy=False) if m else None
        if row is not None:
            return row, "number"
    for lit, rx, legacy in _CUDA_NUMBER_GATES:
        if lit in line:
            m = rx.search(line)
            if m:
                row = cuda_errors.lookup_number(int(m.group(1)), legacy=legacy)
                if row is not None:
                    return row, "number"
    return None, None


def nccl_error(line, low=None):
    """The ncclResult_t row (nccl_errors.TABLE) a line names, or None."""
    low = line.lower() if low is None else low
    if "nccl" not in low and "unhandled" not in low and "remote process" not in low and "duplicate gpu" not in low:
        return None
    if "nccl" in line:
        m = _NCCL_NAME.search(line)
        if m:
            return nccl_errors.BY_NAME[m.group(1).lower()]
    low = line.lower() if low is None else low
    if "unhandled" in low or "remote process exited" in low:  # NCCL's own phrases: their own context
        for text in _NCCL_DISTINCT:
            if text in low:
                return nccl_errors.BY_STRING[text]
    if (
        "nccl error" in low
        or "nccl failure" in low
        or "nccl: " in low
        or (" failed" in line and _NCCL_CALL.search(line))
    ):
        for text, row in nccl_errors.BY_STRING.items():
            if text in low:
                return row
    if "Duplicate GPU" in line or "Attempt to use communicator" in line:
        if _NCCL_MISUSE.search(line):
            return nccl_errors.BY_NUMBER[5]
    if "retcode" in line or "res=" in line or "NCCL Error " in line or "NCCL error " in line:
        m = _NCCL_NUMBER.search(line)
        if m and "NCCL" in line:
            return nccl_errors.BY_NUMBER.get(int(next(g for g in m.groups() if g is not None)))
    return None


def _quiet(line, level, low):
    """A line the logger marked as info, a line that says the error was recovered from, or a warning about the
    program's own (P1) error: healthy chatter, never an event. A warning naming a node-level error (802 at init) still
    counts."""
    lv = None
    if "]" in line:
        g = _GLOG_LEVEL.search(line)
        lv = g.group(1) if g else None
    if lv == "I":
        return True
    if any(w in low for w in _RECOVERED_WORDS) and _RECOVERED.search(line) and not _GAVE_UP.search(line):
        return True
    warn = lv == "W" or (lv is None and ("warn" in low) and _PY_WARNING.search(line) is not None)
    if not warn:
        return False
    return level != cuda_errors.P0


# a line holds none of these: it names no failure (one `in` each: most lines stop here). The first group are words of
# the CUDA error strings; the first word a line holds also rules out every string holding an earlier one (_CANDIDATES:
# the search of the strings is most of a passing line's cost)
_STRING_GATES = (
    "cuda",
    "illegal",
    "ecc",
    "assert",
    "launch",
    "nvlink",
    "not yet initialized",
    "misaligned",
    "device",
    "stack error",
    "program counter",
    "nvidia driver",
    "ptx",
    "not supported",
    "not permitted",
    "timed out",
    "forward compat",
    "resource handle",
    "symbol",
    "initialization",
    "destroyed",
)
_GATE_WORDS = _STRING_GATES + (
    "nccl",
    "socket",
    "net : ",
    "remote process",
    "rendezvous",
    "c10d store",
    "distnetworkerror",
    "waiting for clients",
    "_status_",
)
_CANDIDATES = tuple(
    (_candidates(i, frozenset(cuda_errors.BY_DESCRIPTION)), _candidates(i, cuda_errors.DISTINCT))
    for i in range(len(_GATE_WORDS))
)


def parse_failure(line):
    """Return a Failure for a line that says the job is going down for a reason other than a timeout, else None (never
    raises on any text). NCCL INFO lines, info-level lines and warnings the job survives give None."""
    if "NCCL INFO" in line:
        return None
    low = line.lower()
    for i, w in enumerate(_GATE_WORDS):
        if w in low:
            gate = i
            break
    else:
        return None
    if "\x1b" in line or "\r" in line:
        line = clean(line)
        low = line.lower()
    cls = error = code = level = peer = None
    nccl_warn = "NCCL WARN" in line
    m = (
        _RDZV.search(line)
        if "has timed out after" in line
        or "endezvous" in line
        or "C10d store" in line
        or "waiting for clients" in line
        or "ncclUniqueId" in line
        or "DistNetworkError" in line
        else None
    )
    if m:
        cls, level = RDZV, "P0"
        if m.group("store"):
            error = "the store did not give NCCL's unique id: %s" % m.group("store").strip()[:60]
        elif m.group(3):
            peer, error = "%s:%s" % (m.group(3), m.group(4)), "store connect timed out after %s" % m.group(2)
        elif m.group(5):
            error = "store waited %s s for its clients" % m.group(5)
        elif m.group(6):
            error = m.group(6)
        else:
            error = "the store's connection: %s" % m.group("net").strip()
    if cls is None and nccl_warn and _NCCL_WARN_QUIET.search(line):
        return None
    if cls is None:
        row = nccl_error(line, low)
        if row is not None and row[3] is not None:
            cls = {nccl_errors.PEER: PEER, nccl_errors.NCCL_ERR: NCCL_ERR, nccl_errors.PROGRAM: PROGRAM}[row[3]]
            error, code, level = row[1], row[0], "P1" if cls == PROGRAM else "P0"
    if cls is None and (nccl_warn or ("socket" in line or "Net : " in line) and _NCCL_SOCKET_LINE.search(line)):
        m = _PEER_SOCKET.search(line)
        if m and "ibv_" not in line:
            cls, error, level = PEER, m.group(0), "P0"
    if cls is None:
        row, _how = cuda_error(line, low, gate=gate)
        if row is not None:
            if row[4] is None:
                return None
            if nccl_warn and row[4] != cuda_errors.P0:
                # NCCL's own CUDA call failed: the communicator is gone (ncclUnhandledCudaError), whatever the call
                cls, error, code, level = NCCL_ERR, "ncclUnhandledCudaError (%s)" % row[1], 1, "P0"
            else:
                cls = CUDA if row[4] == cuda_errors.P0 else PROGRAM
                error, code, level = row[1], row[0], row[4]
    if cls is None and "_STATUS_" in line:
        m = _LIB_STATUS.search(line)
        if m:  # cuBLAS / cuDNN: the job dies of it, the library does not say the node is at fault
            cls, error, level = PROGRAM, m.group(1), "P1"
    if cls is None and nccl_warn:
        m = _NCCL_WARN_FATAL.search(line)
        if m:
            what = next(k for k in ("shm", "boot", "ibv", "proxy", "accept", "call") if m.group(k))
            cls, level = NCCL_ERR, "P0"
            error = line[line.index("NCCL WARN") + 10 :].strip()[:80] if what != "ibv" else m.group("ibv") + " failed"
    if cls is None:
        return None
    if _quiet(line, level if cls in (CUDA, PROGRAM) else "P0", low):
        return None
    rank, pg = _rank(line)
    head = _HEAD.search(line, 0, line.index("NCCL WARN") + 1) if nccl_warn else None
    if peer is None and cls == PEER:
        pm = _PEER_ADDR.search(line)
        peer = pm.group(1) if pm else None
    so = _SEQ_OP.search(line) if "WorkNCCL" in line else None
    who = None
    if rank is None and ("[default" in line or "pid=" in line):
        lm = _RANK_LAUNCHER.search(line)
        if lm:
            who = "local%s" % lm.group(1) if lm.group(1) else "pid%s" % lm.group(2)
    return Failure(
        cls,
        rank=rank,
        pg=pg,
        host=head.group(1) if head else None,
        pid=_int(head.group(2)) if head else None,
        cuda_dev=_int(head.group(4)) if head else None,
        peer=peer,
        seq=int(so.group(1)) if so else None,
        op=so.group(2) if so else None,
        error=error,
        code=code,
        level=level,
        who=who,
        text=line.strip()[:160],
    )


FAILURE_TYPES = {
    PEER: events.NCCL_PEER_LOST,
    NCCL_ERR: events.NCCL_ERROR,
    CUDA: events.CUDA_ERROR,
    PROGRAM: events.PROGRAM_ERROR,
    JOB: events.JOB_FAILED,
    RDZV: events.RENDEZVOUS_FAILED,
}
_FAILURE_WORDS = {
    PEER: "lost a peer (%s)",
    NCCL_ERR: "NCCL error (%s)",
    CUDA: "CUDA error (%s)",
    PROGRAM: "the program's own error (%s)",
    JOB: "the launcher reports the process dead (%s)",
    RDZV: "rendezvous failed (%s)",
}
_CONSEQUENCE = {
    PEER: "the process group aborts",
    NCCL_ERR: "the process group aborts",
    CUDA: "the CUDA context is lost, the job dies",
    PROGRAM: "the job dies on its own bug",
    JOB: "the job is dead",
    RDZV: "the job cannot start",
}


def failure_key(f, source, incident=0):
    """One event per (log, rank, incident): a failure's many lines on one rank (the NCCL WARN, the DistBackendError,
    the watchdog's exception, the traceback's last line, the launcher's summary) are one; a line that names no rank is
    keyed by the process that printed it (NCCL's host:pid, Ray's pid, torchrun's [defaultN]), else by the log; a
    failure after a quiet gap is a new incident (NcclLog counts them)."""
    if f.rank is not None:
        return ("nccl-fail", source, f.rank, incident)
    return ("nccl-fail", source, None, f.who, f.host, f.pid, incident)


def failure_finding(f, source, incident=0, *, key=None):
    what = _FAILURE_WORDS[f.cls] % (f.error,)
    detail = "%s: %s%s%s: %s" % (
        "rank %s" % f.rank if f.rank is not None else (f.host or "a rank"),
        what,
        " from %s" % f.peer if f.peer else "",
        " at %s seq %s" % (f.op, f.seq) if f.seq is not None else "",
        _CONSEQUENCE[f.cls],
    )
    return events.Finding(
        key or failure_key(f, source, incident),
        FAILURE_TYPES[f.cls],
        events.NODE_WIDE,
        detail,
        rank=f.rank,
        peer=f.peer,
        seq=f.seq,
        op=f.op,
        error=f.error,
        code=f.code,
        log=source,
        pg=f.pg,
        cuda_dev=f.cuda_dev,
    )


_CUDA_LIKE = (CUDA, PROGRAM)


def _same_failure(a, b):
    """Can two failure lines be one failure? The same CUDA error (a traceback repeats it), NCCL's cascade (a closed
    socket ends as "unhandled system error"), NCCL's failed CUDA call and the CUDA error it names; not two different
    CUDA errors, not a store timeout and a CUDA error."""
    if a.cls == b.cls:
        return a.error == b.error if a.cls in _CUDA_LIKE else True
    pair = {a.cls, b.cls}
    if pair == {PEER, NCCL_ERR}:
        return True
    if NCCL_ERR in pair and pair & set(_CUDA_LIKE):
        nccl_side = a if a.cls == NCCL_ERR else b
        return str(nccl_side.error).startswith("ncclUnhandledCudaError")
    return False


class _Incident:
    __slots__ = ("key", "cls", "error", "rank", "host", "pid", "who", "t", "claimed")

    def __init__(self, key, f):
        self.key, self.cls, self.error, self.rank = key, f.cls, f.error, f.rank
        self.host, self.pid, self.who = f.host, f.pid, f.who
        self.t, self.claimed = 0.0, False


class NcclLog:
    """``parse`` with memory: the op of a (source, rank, seq) seen in a "Watchdog caught" line fills the lines that
    follow it about the same work (they name no op), so the dedup key (source, rank, seq, op) holds for all."""

    def __init__(self, capacity=4096):
        self._ops = {}
        self.capacity = capacity
        self._incidents = {}  # source -> [_Incident] of the last INCIDENT_GAP_S
        self._numbers = {}  # failure_key(f, source) -> the number of its latest incident
        self._recent = {}  # source -> {rank or None: time of its last failure line}
        self._summaries = {}  # source -> launcher.Summary being read

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

    def finding(self, line, source, now=None):
        """The Finding a training-log line gives (a hang form, a fabric warning or a job-killing failure), or None.
        ``now`` (monotonic seconds) separates incidents: a failure after INCIDENT_GAP_S of quiet is a new one. Text of
        several lines (a pasted summary; the followers never pass one) is read a line at a time: its first finding."""
        if "\n" in line:
            found = [self.finding(part, source, now) for part in line.split("\n") if part.strip()]
            return next((f for f in found if f is not None), None)
        if "NCCL INFO" in line:  # NCCL_DEBUG=INFO chatter, thousands of lines per job start: never an event
            return None
        t = self.feed(line, source)
        if t is not None:
            return finding(t, source)
        summary = self._summaries.get(source) if self._summaries else None
        if summary is None and ("ChildFailedError" in line or "Root Cause" in line):  # launcher.starts, inlined
            summary = self._summaries[source] = launcher.Summary()
        if summary is None and launcher.may_tell_a_death(line):
            d = launcher.death_line(clean(line))
            if d is not None:
                return self._death(d, source, time.monotonic() if now is None else now)
        f = parse_failure(line)
        if f is None and summary is None:
            return None
        now = time.monotonic() if now is None else now
        if summary is not None:
            death = summary.feed(clean(line), f if f is not None and f.rank is None else None)
            if summary.done:
                del self._summaries[source]
            if death is not None:
                return self._death(death, source, now)
            if f is not None and f.rank is None:
                return None  # a line of the launcher's summary (the child's traceback): told with the root cause
        if f is None:
            return None
        self._note(source, f.rank, now)
        return failure_finding(f, source, key=self._place(f, source, now))

    def _note(self, source, rank, now):
        seen = self._recent.setdefault(source, {})
        seen[rank] = now
        if len(self._recent) > self.capacity:
            del self._recent[next(iter(self._recent))]

    def _place(self, f, source, now):
        """The key of the incident a failure line belongs to (docs/PROBES.md, "One incident per failure"):
        - a rank's line joins that rank's incident of the last INCIDENT_GAP_S, else claims the incident a line with no
          rank opened just before it (the NCCL WARN that caused it) if the two can be one failure, else opens one;
        - a line naming its process (NCCL's host:pid, Ray's pid, torchrun's [defaultN]) joins that process's incident;
        - a bare line (a traceback's last line, a what():) joins the latest incident it can be part of, else opens one.
        Two failures that cannot be one (an out-of-memory and an ECC error) are two incidents however close."""
        recent = [i for i in self._incidents.get(source, ()) if now - i.t <= INCIDENT_GAP_S]
        found = None
        if f.rank is not None:
            found = next((i for i in reversed(recent) if i.rank == f.rank), None)
            if found is None:
                found = next(
                    (i for i in reversed(recent) if i.rank is None and not i.claimed and _same_failure(i, f)), None
                )
                if found is not None:
                    found.claimed, found.rank = True, f.rank
        elif f.host is not None or f.who is not None:
            found = next((i for i in reversed(recent) if (i.host, i.pid, i.who) == (f.host, f.pid, f.who)), None)
        else:
            found = next((i for i in reversed(recent) if _same_failure(i, f)), None)
        if found is None:
            base = failure_key(f, source)
            n = self._numbers.get(base, -1) + 1
            self._numbers[base] = n
            if len(self._numbers) > self.capacity:
                del self._numbers[next(iter(self._numbers))]
            found = _Incident(failure_key(f, source, n), f)
            recent.append(found)
        found.t = now
        self._incidents[source] = recent[-64:]
        if len(self._incidents) > self.capacity:
            del self._incidents[next(iter(self._incidents))]
        return found.key

    def _death(self, d, source, now):
        """The launcher's root cause: one event, unless this log already told the failure (the rank's own lines, or
        lines with no rank, within LAUNCHER_WINDOW_S): the launcher's report is then the same death."""
        seen = self._recent.get(source, {})
        if any(now - t <= LAUNCHER_WINDOW_S for r, t in seen.items() if d.rank is None or r is None or r == d.rank):
            self._note(source, d.rank, now)  # the launcher's later lines about the same death join it too
            return None
        c = d.cause
        if c is not None:
            f = Failure(c.cls, rank=d.rank, error=c.error, code=c.code, level=c.level, peer=c.peer, text=c.text)
        else:
            f = Failure(JOB, rank=d.rank, host=d.host, pid=d.pid, error=d.error(), code=d.exitcode, level="P0")
        if f.rank is None:
            f.who = "launcher"
        self._note(source, f.rank, now)
        out = failure_finding(f, source, key=self._place(f, source, now))
        out.extra["exitcode"] = d.exitcode
        out.extra["local_rank"] = d.local_rank
        out.extra["root_cause"] = d.trace
        return out


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
