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
# single lines that tell a death on their own (the first the launcher prints, or one seen without its summary):
# torchelastic's agent, a summary's signal line, mpirun (nccl-tests, HPL), and a benchmark that found wrong results
_AGENT = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_LONE_SIGNAL = re.compile(r"traceback\s*:\s*Signal (\d+) \((SIG[A-Z0-9]+)\) received by PID (\d+)")
_MPIRUN = re.compile(r"process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+)(?: \(([^)]+)\))?")
_PALS = re.compile(r"\brank (\d+) died from signal (\d+)")
_MPIRUN_EXIT = re.compile(r"mpirun detected that one or more processes exited with non-zero status")
_SRUN = re.compile(
    r"srun: error: (\S+): tasks? ([\d,\-\[\]]+): (Exited with exit code (\d+)|Killed|Aborted|Segmentation fault)"
)
_WRONG = re.compile(r"\|\|Ax-b\|\|.*?\.{3,}\s*FAILED|Out of bounds values\s*:\s*[1-9]\d*\s+FAILED")
MAX_LINES = 400  # a summary is tens of lines; a stray "Root Cause" in prose must not hold the state for ever


def may_tell_a_death(line):
    return "exit" in line or "PID" in line or "FAILED" in line or "srun" in line or "died" in line


def death_line(line):
    """A Death from one line that tells it alone, else None."""
    d = Death()
    m = _AGENT.search(line)
    if m:
        d.exitcode, d.local_rank, d.pid = int(m.group(1)), int(m.group(2)), int(m.group(3))
        return d
    m = _LONE_SIGNAL.search(line)
    if m:
        d.exitcode, d.signal, d.pid, d.trace = -int(m.group(1)), m.group(2), int(m.group(3)), m.group(0)[:160]
        return d
    m = _MPIRUN.search(line)
    if m:
        d.rank, d.pid, d.host, d.exitcode = int(m.group(1)), int(m.group(2)), m.group(3), -int(m.group(4))
        d.signal = m.group(5) or None
        return d
    m = _PALS.search(line)
    if m:
        d.rank, d.exitcode = int(m.group(1)), -int(m.group(2))
        return d
    m = _SRUN.search(line)
    if m:
        d.host, d.what = m.group(1), "srun: task %s on %s: %s" % (m.group(2), m.group(1), m.group(3))
        d.exitcode = int(m.group(4)) if m.group(4) else None
        return d
    if _MPIRUN_EXIT.search(line):
        d.what = "mpirun: a process exited with non-zero status"
        return d
    if _WRONG.search(line):
        d.what = "the benchmark's results are wrong (check failed): suspect the GPU or its links"
        return d
    return None


def starts(line):
    return "ChildFailedError" in line or "Root Cause" in line


class Death:
    """The root-cause record: rank, local rank, exit code, pid, host, signal, the record's traceback line, and the
    failure (nccl.Failure) its traceback names, if any."""

    __slots__ = ("rank", "local_rank", "exitcode", "pid", "host", "signal", "trace", "cause", "what")

    def __init__(self):
        for k in self.__slots__:
            setattr(self, k, None)

    def error(self):
        if self.what:
            return self.what
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
        d = self.death
        if not self.root or d is None:
            return None
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
