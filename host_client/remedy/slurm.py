"""The Slurm backend: every command sentinel-remedy gives Slurm is run by SlurmBackend._run, in one place.

A second backend (Kubernetes: cordon, a taint, a NodeCondition, eviction; docs/REMEDY.md) offers the same methods:
node, drain, resume, jobs_on, signal, requeue, job. Each raises BackendError with one line that says why.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass

from host_client.errors import SentinelError


class BackendError(SentinelError):
    """A scheduler command that failed; str() is one line (what ran, why)."""


class UnknownNode(BackendError):
    pass


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str  # Slurm's, e.g. IDLE, MIXED+DRAIN, UNKNOWN+DRAIN
    reason: str  # "" when none; Slurm's [user@time] stamp removed

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str  # RUNNING, PENDING, COMPLETED...
    nodes: str


def _one_line(text: str, limit: int = 200) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:limit]


def parse_fields(out: str) -> dict:
    """scontrol -o's Key=Value pairs; a value with spaces runs up to the next Key=. Slurm's keys begin with a
    capital; a node's Reason, which a person writes ("NHC: temp=91C"), is taken whole up to the stamp scontrol
    appends to it (" [user@2026-12-06T02:37:27]")."""
    fields: dict = {}
    m = _STAMPED_REASON.search(out)
    if m is not None:
        fields["Reason"] = m.group(1)
        out = out[: m.start()] + out[m.end() :]
    key = None
    for tok in out.strip().split(" "):
        k, eq, v = tok.partition("=")
        if eq and k and "A" <= k[0] <= "Z" and k.replace("_", "").replace(":", "").isalnum():
            key = k
            fields[k] = v
        elif key is not None:
            fields[key] += " " + tok
    return fields


_STAMPED_REASON = re.compile(r"(?:^| )Reason=(.*? \[[^\]\s]*@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\])")


def _strip_stamp(reason: str) -> str:
    # scontrol appends " [user@2026-12-06T02:37:27]" to a reason it shows
    r = reason.strip()
    if r.endswith("]") and " [" in r:
        r = r[: r.rindex(" [")]
    return "" if r in ("(null)", "none") else r


class SlurmBackend:
    name = "slurm"

    def __init__(self, *, scontrol="scontrol", scancel="scancel", squeue="squeue", timeout_s=15.0, env=None):
        self.scontrol, self.scancel, self.squeue = scontrol, scancel, squeue
        self.timeout_s = timeout_s
        self.env = env  # None: this process's (SLURM_CONF honoured as Slurm's tools honour it)
        self.history: list = []  # (argv, ok, seconds) of every command run, newest last (bounded)

    def _run(self, argv: list) -> str:
        """The one place a Slurm command runs: stdout, or BackendError with one line."""
        t0 = time.monotonic()
        ok = False
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s, env=self.env)
        except FileNotFoundError:
            raise BackendError("%s not found (set [slurm] %s to its path)" % (argv[0], _tool(argv[0]))) from None
        except PermissionError:
            raise BackendError("%s cannot be run: permission denied" % argv[0]) from None
        except subprocess.TimeoutExpired:
            raise BackendError(
                "%s did not answer within %.0f s (slurmctld slow or down?)" % (_tool(argv[0]), self.timeout_s)
            ) from None
        finally:
            self.history.append((list(argv), ok, time.monotonic() - t0))
            del self.history[:-200]
        if r.returncode != 0:
            why = _one_line(r.stderr) or _one_line(r.stdout) or "exit status %d" % r.returncode
            self.history[-1] = (list(argv), False, time.monotonic() - t0)
            if "not found" in why.lower() and argv[1:4] == ["-o", "show", "node"]:
                raise UnknownNode("Slurm does not know node %s" % argv[-1])
            words = [a for a in argv[1:] if not a.startswith("-") and "=" not in a][:2]
            raise BackendError("%s: %s" % (" ".join([_tool(argv[0])] + words), why))
        self.history[-1] = (list(argv), True, time.monotonic() - t0)
        return r.stdout

    # ---- nodes --------------------------------------------------------------------------------------------

    def node(self, name: str) -> NodeInfo:
        f = parse_fields(self._run([self.scontrol, "-o", "show", "node", name]))
        if f.get("NodeName") != name:
            raise UnknownNode("Slurm does not know node %s" % name)
        return NodeInfo(name, f.get("State", ""), _strip_stamp(f.get("Reason", "")))

    def drain(self, name: str, reason: str) -> list:
        argv = [self.scontrol, "update", "NodeName=" + name, "State=DRAIN", "Reason=" + reason]
        self._run(argv)
        return argv

    def resume(self, name: str) -> list:
        argv = [self.scontrol, "update", "NodeName=" + name, "State=RESUME"]
        try:
            self._run(argv)
        except BackendError:
            # Slurm 22.05 clears the drain of a node whose slurmd never registered (UNKNOWN) yet answers "Invalid
            # node state specified" (measured here): what counts is whether the drain is gone
            if self.node(name).drained:
                raise
        return argv

    # ---- jobs ---------------------------------------------------------------------------------------------

    def jobs_on(self, name: str) -> list:
        """Ids of the running jobs on node name."""
        out = self._run([self.squeue, "-h", "-w", name, "-t", "RUNNING", "-o", "%i"])
        return [ln.strip() for ln in out.splitlines() if ln.strip()]

    def signal(self, job_id: str, sig: str) -> list:
        # --full: the batch shell, its children and every step; a plain --signal misses a script without steps
        argv = [self.scancel, "--full", "--signal=" + sig, job_id]
        self._run(argv)
        return argv

    def requeue(self, job_id: str) -> list:
        argv = [self.scontrol, "requeue", job_id]
        self._run(argv)
        return argv

    def job(self, job_id: str) -> JobInfo | None:
        """The job's state and nodes; None when Slurm no longer knows it."""
        try:
            out = self._run([self.squeue, "-h", "-j", job_id, "-o", "%T|%N"])
        except BackendError as e:
            if "invalid job id" in str(e).lower():
                return None
            raise
        line = _one_line(out)
        if not line:
            return None
        state, _, nodes = line.partition("|")
        return JobInfo(job_id, state, nodes)


def _tool(path: str) -> str:
    return path.rsplit("/", 1)[-1]
