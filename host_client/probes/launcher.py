"""The launcher's view of a death: torchelastic's failure summary (torchrun, torch.distributed.run, 1.9 to 2.6+).

torchelastic prints, when a worker process dies, a ChildFailedError and a summary of records ("Root Cause (first
observed failure)" and "Failures" / "Other Failures"), each with time, host, rank (local_rank), exitcode (pid),
error_file and traceback (1.9/1.10: msg), for example ``traceback : Signal 6 (SIGABRT) received by PID 8012``, or the
child's own Python traceback when it recorded one. The records of the "Failures" section are the ranks the agent
killed after the root cause (SIGTERM): consequences, not incidents. Only the root cause is read here; the caller
(nccl.NcclLog) turns it into one event unless the failure it reports was already told by the rank's own lines.
Format: https://pytorch.org/docs/stable/elastic/errors.html (torch/distributed/elastic/multiprocessing/errors).
"""

import re

_RANK = re.compile(r"\brank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_EXIT = re.compile(r"\bexitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)")
_HOST = re.compile(r"\bhost\s*:\s*(\S+)")
_SIGNAL = re.compile(r"Signal (\d+) \((SIG[A-Z0-9]+)\)")
_TRACE = re.compile(r"\b(?:traceback|msg)\s*:\s*\"?(.*?)\"?\s*$")
_SEP = re.compile(r"(?:={20,}|\*{20,})\s*$")
MAX_LINES = 400  # a summary is tens of lines; a stray "Root Cause" in prose must not hold the state for ever


def starts(line):
    return "ChildFailedError" in line or "Root Cause" in line


class Death:
    """The root-cause record: rank, local rank, exit code, pid, host, signal, the record's traceback line, and the
    failure (nccl.Failure) its traceback names, if any."""

    __slots__ = ("rank", "local_rank", "exitcode", "pid", "host", "signal", "trace", "cause")

    def __init__(self):
        for k in self.__slots__:
            setattr(self, k, None)

    def error(self):
        if self.signal:
            what = "signal %s" % self.signal
        elif self.exitcode is not None and self.exitcode < 0:
            what = "signal %d" % -self.exitcode
        else:
            what = "exit code %s" % self.exitcode
        return what + (" (pid %s)" % self.pid if self.pid is not None else "")


class Summary:
    """Reads one summary, a line at a time: ``feed`` returns the Death once the root-cause record is complete (at the
    separator that ends it, or at the next section), else None; ``done`` says the summary is over."""

    def __init__(self):
        self.root = False
        self.death = None
        self.lines = 0
        self.done = False

    def feed(self, line, failure=None):
        self.lines += 1
        if self.lines > MAX_LINES:
            self.done = True
            return None
        if "Root Cause" in line:
            self.root, self.death = True, Death()
            return None
        if not self.root:
            return None
        d = self.death
        if d.rank is not None and (_SEP.search(line) or "Other Failures" in line or "Failures:" in line):
            self.done = True
            return d
        m = _RANK.search(line)
        if m:
            d.rank, d.local_rank = int(m.group(1)), int(m.group(2))
            return None
        m = _EXIT.search(line)
        if m:
            d.exitcode, d.pid = int(m.group(1)), int(m.group(2))
            return None
        m = _SIGNAL.search(line)
        if m:
            d.signal = m.group(2)
        m = _HOST.search(line)
        if m and d.host is None and "rank" not in line:
            d.host = m.group(1)
            return None
        m = _TRACE.search(line)
        if m and d.trace is None:
            d.trace = m.group(1)[:160]
        if failure is not None and d.cause is None:
            d.cause = failure
        return None
