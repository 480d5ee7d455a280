"""Cost per line of the training-log rule set (host_client/probes/nccl.py: hang forms, CUDA/NCCL/launcher failures).

    .venv/bin/python bench/bench_log_rules.py [--baseline CHECKOUT] [--lines N]

Two logs, each fed line by line through one ``NcclLog`` as the daemon does:
- healthy: an ``NCCL_DEBUG=INFO`` job log (the corpus's quiet lines: NCCL INFO at job start, NCCL_DEBUG dumps,
  PyTorch warnings, TensorFlow's info lines, loss lines), 9 lines of NCCL INFO to 1 of anything else;
- storm: every failure line of the corpus, with rotating ``[rankN]:`` prefixes (a node whose ranks all die at once).
``--baseline`` runs the same logs through another checkout's rules in a subprocess: issue 36 bounds the healthy cost
against the baseline's (docs/PROBES.md). Best of 5 runs; the machine's load moves the absolute figures.
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "fixtures", "probes", "corpus.jsonl")


def logs(n):
    entries = [json.loads(x) for x in open(CORPUS, encoding="utf-8")]
    nccl = [e for e in entries if e["kind"] == "nccl" and "\n" not in e["line"]]
    info = [e["line"] for e in nccl if not e["expect"] and "NCCL INFO" in e["line"]]
    other = [e["line"] for e in nccl if not e["expect"] and "NCCL INFO" not in e["line"]]
    healthy = []
    i = 0
    while len(healthy) < n:
        healthy.append(other[i % len(other)] if i % 10 == 9 else info[i % len(info)])
        i += 1
    fail = [e["line"] for e in nccl if e["expect"]]
    storm = ["[rank%d]: %s" % (i % 64, fail[i % len(fail)]) for i in range(n)]
    return healthy, storm


def measure(lines, repeats=5):
    from host_client.probes import nccl

    best = None
    for _ in range(repeats):
        log = nccl.NcclLog()
        t0 = time.perf_counter()
        for line in lines:
            log.finding(line, "/var/log/train/job.log")
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best / len(lines) * 1e9


def inner(n):
    healthy, storm = logs(n)
    print(json.dumps({"healthy_ns": measure(healthy), "storm_ns": measure(storm)}))


def run_in(checkout, n):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((checkout, os.path.join(checkout, "firmware", "lib"))))
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--inner", "--lines", str(n)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=checkout,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", help="another checkout whose rules to measure on the same logs")
    p.add_argument("--lines", type=int, default=50000)
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.inner:
        return inner(a.lines)
    rounds = 5 if a.baseline else 1
    now = base = None
    for _ in range(rounds):  # interleaved, best of each: the machine's load drifts between runs
        r = run_in(ROOT, a.lines)
        now = r if now is None else {k: min(v, r[k]) for k, v in now.items()}
        if a.baseline:
            b = run_in(os.path.abspath(a.baseline), a.lines)
            base = b if base is None else {k: min(v, b[k]) for k, v in base.items()}
    print("log rules, cost per line (best of 5 x %d rounds, %d lines each):" % (rounds, a.lines))
    print("  healthy NCCL_DEBUG=INFO log : %7.0f ns/line" % now["healthy_ns"])
    print("  failure storm               : %7.0f ns/line" % now["storm_ns"])
    if base is not None:
        ratio = now["healthy_ns"] / base["healthy_ns"]
        print(
            "  baseline %s: healthy %.0f ns/line, storm %.0f ns/line"
            % (a.baseline, base["healthy_ns"], base["storm_ns"])
        )
        print(
            "  healthy cost / baseline's: %.2fx (issue 36's bound: 1.5x) %s" % (ratio, "ok" if ratio <= 1.5 else "OVER")
        )
        return 0 if ratio <= 1.5 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
