"""A real single-host Slurm for tests and the bench: munged on a private socket and key, slurmctld and one slurmd
on free loopback ports, all in one temporary directory, torn down afterwards.

Debian's slurm-wlm and munge (tools/install-system-deps.sh). One node runs a slurmd (the node a job runs on); the
others are defined with no slurmd behind them, which Slurm still lets an operator drain (FACTS.md 11.10), for the
multi-node cases (the breaker). AuthInfo's cred_expire is set low so a requeued job can start again within
seconds instead of Slurm's default 120 s. Every daemon runs as this user (SlurmUser and SlurmdUser), root or not.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from host_client.remedy.slurm import parse_fields  # the one scontrol -o reader, checked against sinfo
from testkit.net import free_port

REAL_NODE = "gpu-worker-08"
GHOST_NODES = ("gpu-worker-01", "gpu-worker-02", "gpu-worker-03", "gpu-worker-04")
PARTITION = "gpu"
CRED_EXPIRE_S = 5  # the lowest Slurm 22.05 takes; a requeued job waits cred_expire + 1 s before it can start
BINARIES = ("munged", "slurmctld", "slurmd", "scontrol", "squeue", "scancel", "sbatch")


class SlurmUnavailable(RuntimeError):
    """Slurm could not be brought up here (binaries missing, not root, a daemon exited)."""


def missing_binaries():
    return [b for b in BINARIES if shutil.which(b) is None and not os.path.exists("/usr/sbin/" + b)]


def _which(name):
    return shutil.which(name) or "/usr/sbin/" + name


class SlurmCluster:
    """start() brings munged, slurmctld and slurmd up (SlurmUnavailable when it cannot); stop() ends them and
    removes the directory. env: the environment a client of this cluster needs (SLURM_CONF)."""

    def __init__(self, *, ghosts=GHOST_NODES, cred_expire_s=CRED_EXPIRE_S):
        self.ghosts = tuple(ghosts)
        self.cred_expire_s = cred_expire_s
        self.dir = ""
        self.conf = ""
        self.procs = {}
        self.env = dict(os.environ)

    # ---- lifecycle --------------------------------------------------------------------------------------

    def start(self, timeout=30.0):
        missing = missing_binaries()
        if missing:
            raise SlurmUnavailable("not installed: %s (tools/install-system-deps.sh)" % ", ".join(missing))
        self.dir = tempfile.mkdtemp(prefix="sentinel-slurm-")
        os.chmod(self.dir, 0o755)
        try:
            self._munge()
            self._write_conf()
            self.env["SLURM_CONF"] = self.conf
            self._daemon("slurmctld", [_which("slurmctld"), "-D", "-f", self.conf])
            self._wait(lambda: self.run("scontrol", "ping", check=False).returncode == 0, timeout, "slurmctld")
            self._daemon("slurmd", [_which("slurmd"), "-D", "-f", self.conf, "-N", REAL_NODE])
            self._wait(lambda: self.node_state(REAL_NODE).startswith("IDLE"), timeout, "slurmd")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        for name in ("slurmd", "slurmctld", "munged"):
            self.stop_daemon(name)
        if self.dir:
            self._kill_leftovers()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _kill_leftovers(self):
        """slurmstepd and the batch scripts it ran outlive slurmd (proctrack/linuxproc tracks, it does not reap):
        kill every process whose command line or environment names this cluster's directory."""
        mark = self.dir.encode()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    seen = mark in f.read()
                if not seen:
                    with open("/proc/%s/environ" % pid, "rb") as f:
                        seen = mark in f.read()
                if seen:
                    os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                continue  # gone, or not ours to read

    def stop_daemon(self, name):
        p = self.procs.pop(name, None)
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def restart_slurmctld(self, timeout=30.0):
        self._daemon("slurmctld", [_which("slurmctld"), "-D", "-f", self.conf])
        self._wait(lambda: self.run("scontrol", "ping", check=False).returncode == 0, timeout, "slurmctld")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---- helpers for tests ------------------------------------------------------------------------------

    def run(self, *argv, check=True, timeout=30.0):
        r = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), r.returncode, r.stderr.strip()))
        return r

    def node(self, name) -> dict:
        """scontrol show node's fields for name (State, Reason, ...)."""
        out = self.run("scontrol", "-o", "show", "node", name).stdout
        return parse_fields(out)

    def node_state(self, name) -> str:
        try:
            return self.node(name).get("State", "")
        except RuntimeError:
            return ""

    def job(self, job_id) -> dict:
        out = self.run("scontrol", "-o", "show", "job", str(job_id)).stdout
        return parse_fields(out)

    def sbatch(self, script_text, *args) -> str:
        path = os.path.join(self.dir, "job-%d.sh" % time.monotonic_ns())
        with open(path, "w", encoding="utf-8") as f:
            f.write(script_text)
        os.chmod(path, 0o755)
        r = self.run("sbatch", "--parsable", "-p", PARTITION, "-w", REAL_NODE, "-D", self.dir, *args, path)
        return r.stdout.strip().split(";")[0]

    def wait_started(self, job_id, line="start 0", timeout=30.0):
        """Until the job runs and its script printed line: Slurm says RUNNING before the script has set its trap,
        and a USR1 before the trap ends the job."""
        out = os.path.join(self.dir, "slurm-%s.out" % job_id)

        def started():
            if not os.path.exists(out):
                return False
            with open(out, encoding="utf-8", errors="replace") as f:
                return line in f.read()

        self._wait(started, timeout, "job %s" % job_id)

    def wait_for(self, predicate, timeout, what):
        self._wait(predicate, timeout, what)

    # ---- internals --------------------------------------------------------------------------------------

    def _daemon(self, name, argv):
        log = open(os.path.join(self.dir, name + ".out"), "wb")
        self.procs[name] = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def _wait(self, predicate, timeout, what):
        end = time.monotonic() + timeout
        while True:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise SlurmUnavailable("%s exited with %s: %s" % (name, p.returncode, self._tail(name)))
            if predicate():
                return
            if time.monotonic() > end:
                raise SlurmUnavailable("%s not ready after %.0f s: %s" % (what, timeout, self._tail(what)))
            time.sleep(0.1)

    def _tail(self, name):
        out = ""
        for p in (name + ".log", name + ".out"):
            try:
                with open(os.path.join(self.dir, p), encoding="utf-8", errors="replace") as f:
                    out += f.read()[-800:]
            except OSError:
                pass
        return out.strip() or "(no log)"

    def _munge(self):
        d = self.dir
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.socket = os.path.join(d, "munge.sock")
        self._daemon(
            "munged",
            [
                _which("munged"),
                "--foreground",
                "--force",
                "--socket=" + self.socket,
                "--key-file=" + key,
                "--pid-file=" + os.path.join(d, "munged.pid"),
                "--log-file=" + os.path.join(d, "munged.log"),
                "--seed-file=" + os.path.join(d, "munged.seed"),
            ],
        )
        self._wait(lambda: os.path.exists(self.socket), 10.0, "munged")

    def _write_conf(self):
        d = self.dir
        host = socket.gethostname()
        user = pwd.getpwuid(os.geteuid()).pw_name
        ctld, slurmd, ghost_port = free_port(), free_port(), free_port()
        cpus = 2
        lines = [
            "ClusterName=sentinel",
            "SlurmctldHost=%s(127.0.0.1)" % host,
            "SlurmctldPort=%d" % ctld,
            "SlurmdPort=%d" % slurmd,
            # this user runs every daemon and every job (root is not needed: jobs are this user's own)
            "SlurmUser=%s" % user,
            "SlurmdUser=%s" % user,
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "AuthInfo=socket=%s,cred_expire=%d" % (self.socket, self.cred_expire_s),
            "StateSaveLocation=%s/state" % d,
            "SlurmdSpoolDir=%s/spool-%%n" % d,
            "SlurmctldPidFile=%s/slurmctld.pid" % d,
            "SlurmdPidFile=%s/slurmd-%%n.pid" % d,
            "SlurmctldLogFile=%s/slurmctld.log" % d,
            "SlurmdLogFile=%s/slurmd.log" % d,
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/builtin",
            # scheduling passes every second (default 60 s): a requeued job starts as soon as it is eligible
            "SchedulerParameters=sched_interval=1,sched_min_interval=100000",
            "SelectType=select/linear",
            "MpiDefault=none",
            "ReturnToService=1",
            "SlurmctldTimeout=10",
            "SlurmdTimeout=30",
            "MessageTimeout=3",
            "KillWait=2",
            "MinJobAge=300",
            "NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 CPUs=%d State=UNKNOWN" % (REAL_NODE, host, cpus),
        ]
        for g in self.ghosts:
            # no slurmd listens on this port: Slurm knows the node, never reaches it
            lines.append("NodeName=%s NodeAddr=127.0.0.1 Port=%d CPUs=%d State=UNKNOWN" % (g, ghost_port, cpus))
        lines.append("PartitionName=%s Nodes=ALL Default=YES MaxTime=INFINITE State=UP" % PARTITION)
        os.makedirs(os.path.join(d, "state"))
        self.conf = os.path.join(d, "slurm.conf")
        with open(self.conf, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


# A training job as Slurm runs it: traps the checkpoint signal, writes a checkpoint line, runs until cancelled.
# `sleep & wait`: bash runs a trap as soon as `wait` is interrupted, not after a foreground sleep ends.
CHECKPOINTING_JOB = """#!/bin/bash
trap 'echo "checkpoint ${SLURM_RESTART_COUNT:-0}" >> checkpoint-$SLURM_JOB_ID.txt' USR1
echo "start ${SLURM_RESTART_COUNT:-0}"
while true; do sleep 0.2 & wait $!; done
"""


def cluster_for_tests():
    """A started SlurmCluster; where Slurm cannot start, a skip on a developer's machine and a failure in CI."""
    import pytest

    try:
        return SlurmCluster().start()
    except SlurmUnavailable as e:
        if os.environ.get("CI"):
            pytest.fail("real Slurm is required in CI and did not start: %s" % e)
        pytest.skip("real Slurm did not start here: %s" % e)
