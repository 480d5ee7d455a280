"""sentinel-remedy against a real single-host Slurm (testkit/slurm_live.py): how long from a probe's fault event
reaching the gateway to the node DRAINED in Slurm, to the checkpoint signal at the job, and to the job running
again after a requeue and the operator's resume.

    .venv/bin/python bench/bench_remedy.py [--faults N]

The chain is the shipped one: the gateway (its own process, its [remedy] lane) -> sentinel-remedy (its own process,
mode enforce) -> scontrol / squeue / scancel -> slurmctld. Each fault has its own rack, so the gateway's debounce
takes every one. DRAIN: XID 79 on a node defined without a slurmd, time read from remedy's audit line (written once
scontrol update returned). Signal: NCCL_TIMEOUT (signal only, no drain) on the node whose slurmd runs a batch job
that traps USR1 and writes the time it got it. Running again: XID 79 on that node with checkpoint_grace_s 0, then
`sentinel-remedy resume`; the requeued job waits for AuthInfo's cred_expire (5 s here; Slurm's default 120 s) + 1 s.
Needs root and Debian's slurm-wlm and munge (tools/install-system-deps.sh).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "firmware", "lib")]

from testkit.net import free_port, running, wait_port  # noqa: E402
from testkit.slurm_live import CRED_EXPIRE_S, REAL_NODE, SlurmCluster, SlurmUnavailable  # noqa: E402
from testkit.terminal import LoopbackTerminal  # noqa: E402

SECRET = "bench-remedy-secret-0123456789"
SIGNAL_JOB = """#!/bin/bash
trap 'date +%s.%N >> signals.txt' USR1
echo "start ${SLURM_RESTART_COUNT:-0}"
while true; do sleep 0.2 & wait $!; done
"""


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def line(name, xs):
    ms = [x * 1000 for x in xs]
    return "%-34s n=%-3d p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms" % (name, len(ms), pct(ms, 50), pct(ms, 99), max(ms))


def post(url, body):
    req = urllib.request.Request(
        url + "/api/v1/gpu_event", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status


def wait(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.005)
    raise SystemExit("bench_remedy: %s did not happen within %d s" % (what, timeout))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--faults", type=int, default=20)
    n = ap.parse_args().faults
    ghosts = ["gpu-bench-%02d" % i for i in range(n)]
    try:
        slurm = SlurmCluster(ghosts=ghosts).start()
    except SlurmUnavailable as e:
        print("bench_remedy: skipped, Slurm did not start: %s" % e)
        return 0
    tmp = tempfile.mkdtemp(prefix="bench-remedy-")
    procs = []
    term = LoopbackTerminal({"bench": SECRET}).start()
    try:
        gw_port, rem_port = free_port(), free_port()
        gw_url = "http://127.0.0.1:%d" % gw_port
        env = dict(
            slurm.env, BENCH_SECRET=SECRET, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "firmware", "lib")])
        )
        gcfg = os.path.join(tmp, "gateway.toml")
        with open(gcfg, "w") as f:
            f.write(
                '[gateway]\nhost = "127.0.0.1"\nport = %d\n[delivery]\nrate_interval_s = 0\n'
                '[terminals.room]\nurl = "%s"\nkey_id = "bench"\nsecret_env = "BENCH_SECRET"\n'
                '[remedy]\nurl = "http://127.0.0.1:%d"\nkey_id = "bench"\nsecret_env = "BENCH_SECRET"\n'
                % (gw_port, term.url, rem_port)
            )
        rcfg = os.path.join(tmp, "remedy.toml")
        with open(rcfg, "w") as f:
            f.write(
                'key_id = "bench"\nsecret_env = "BENCH_SECRET"\nport = %d\nmode = "enforce"\nstate_dir = "%s"\n'
                "[slurm]\ncheckpoint_grace_s = 0\n[breaker]\nmax_nodes = 1000\n"
                % (rem_port, os.path.join(tmp, "state"))
            )
        for name, argv in (
            ("gateway", [sys.executable, "-m", "host_client.gateway.cli", "-c", gcfg, "--log-level", "warning"]),
            ("remedy", [sys.executable, "-m", "host_client.remedy.cli", "--config", rcfg]),
        ):
            log = os.path.join(tmp, name + ".log")
            with open(log, "wb") as out:
                p = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
            procs.append(p)
            wait_port(gw_port if name == "gateway" else rem_port, 30, alive=running(p, log))
        audit = os.path.join(tmp, "state", "audit.jsonl")

        def audit_ts(action, incident_part):
            try:
                with open(audit, encoding="utf-8") as f:
                    for ln in f:
                        a = json.loads(ln)
                        if a["action"] == action and a["result"] == "ok" and incident_part in a["incident"]:
                            return a["ts"]
            except FileNotFoundError:
                pass
            return None

        # 1. event -> node DRAIN
        drain = []
        for i, node in enumerate(ghosts):
            rack = "D%03d" % i
            t0 = time.time()
            post(
                gw_url, {"cluster_rack": rack, "node_host": node, "event_type": "XID_FATAL", "gpu_index": 0, "xid": 79}
            )
            drained = wait(lambda part="%s:%s:" % (rack, node): audit_ts("drain", part), 30, "drain of " + node)
            drain.append(drained - t0)
        # 2. event -> signal at the job
        job = slurm.sbatch(SIGNAL_JOB)
        slurm.wait_started(job)
        sigfile = os.path.join(slurm.dir, "signals.txt")
        sig = []
        for i in range(n):
            before = len(open(sigfile).read().split()) if os.path.exists(sigfile) else 0
            t0 = time.time()
            post(
                gw_url,
                {"cluster_rack": "S%03d" % i, "node_host": REAL_NODE, "event_type": "NCCL_TIMEOUT", "gpu_index": -1},
            )
            stamps = wait(
                lambda b=before: (
                    os.path.exists(sigfile) and len(open(sigfile).read().split()) > b and open(sigfile).read().split()
                ),
                30,
                "signal",
            )
            sig.append(float(stamps[before]) - t0)
        slurm.run("scancel", job)
        # 3. event -> job running again (requeue at once, the operator's resume right after)
        again, after_resume = [], []
        for i in range(3):
            job = slurm.sbatch(SIGNAL_JOB, "--requeue", "--open-mode=append")
            slurm.wait_started(job)
            t0 = time.time()
            post(
                gw_url,
                {
                    "cluster_rack": "R%03d" % i,
                    "node_host": REAL_NODE,
                    "event_type": "XID_FATAL",
                    "gpu_index": 1,
                    "xid": 79,
                },
            )
            wait(lambda j=job: slurm.job(j).get("Restarts") == "1", 30, "requeue")
            r = subprocess.run(
                [sys.executable, "-m", "host_client.remedy.cli", "--config", rcfg, "resume", REAL_NODE],
                env=env,
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            if r.returncode != 0:
                raise SystemExit("bench_remedy: resume failed: %s" % r.stderr.strip())
            t1 = time.time()
            wait(lambda j=job: slurm.job(j).get("JobState") == "RUNNING", 60, "job running again")
            again.append(time.time() - t0)
            after_resume.append(time.time() - t1)
            slurm.run("scancel", job)
        print(
            "sentinel-remedy on Slurm %s, loopback, %d faults (gateway -> remedy -> slurmctld)"
            % (slurm.run("scontrol", "--version").stdout.split()[-1], n)
        )
        print(line("event -> node DRAIN", drain))
        print(line("event -> checkpoint signal at job", sig))
        print(line("event -> job running again", again))
        print(line("resume -> job running again", after_resume))
        print(
            "(a requeued job waits cred_expire + 1 s = %d s here before it may start; Slurm's default is 121 s)"
            % (CRED_EXPIRE_S + 1)
        )
        return 0
    finally:
        if os.environ.get("BENCH_REMEDY_KEEP"):
            print("logs kept in", tmp)
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        term.close()
        slurm.stop()


if __name__ == "__main__":
    sys.exit(main())
