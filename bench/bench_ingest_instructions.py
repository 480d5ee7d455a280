"""Instructions per event behind the HTTP front (decode_body + Gateway.gpu_event), under callgrind, with and
without parse_event's fast path: the figure that decides whether the fast path earns its keep (docs/PERFORMANCE.md).

The bodies are bench_gateway_rfc.py's storm, in the same order (node after node, each node's 8 GPUs in turn, 70 %
NCCL_TIMEOUT, 25 % GPU_UTIL_DROP, 3 % XID_FATAL, 2 % THERMAL). Each mode runs twice under callgrind, with N and 3N
events after the same warm-up; (instructions(3N) - instructions(N)) / 2N is the per-event figure, start-up and
warm-up cancelled. Instruction counts do not depend on what else the machine runs, unlike timings.

Run:   .venv/bin/python bench/bench_ingest_instructions.py [--events N]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODES = 12_500
WARM = 2_000


def body(i):
    node, gpu = (i // 8) % NODES, i % 8
    k = node % 100
    if k < 70:
        kind, util = "NCCL_TIMEOUT", 100.0
    elif k < 95:
        kind, util = "GPU_UTIL_DROP", (node % 4) * 1.0
    elif k < 98:
        kind, util = "XID_FATAL", 0.0
    else:
        kind, util = "THERMAL", 97.0
    return (
        '{"cluster_rack":"R%03d","node_host":"gpu-node-%05d-%08x","event_type":"%s","gpu_index":%d,"gpu_util":%.1f}'
        % (node % 125, node, (node * 2654435761) % 4294967296, kind, gpu, util)
    ).encode()


def run(n, full):
    """In the child: build a gateway (no threads, no disk), warm it, then ingest n storm bodies."""
    sys.path[:0] = [os.path.join(ROOT, "firmware", "lib"), ROOT]
    from host_client.gateway import events, service
    from host_client.gateway.config import Config
    from host_client.gateway.ingest import decode_body

    if full:
        service.parse_event = lambda b, accept_unknown=True: events._parse_full(b, accept_unknown)
    cfg = Config.from_dict(
        {
            "terminals": {"room": {"url": "http://127.0.0.1:9", "key_id": "k", "secret_env": "S"}},
            "delivery": {"rate_interval_s": 0},
        },
        env={"S": "s"},
    )
    gw = service.Gateway(cfg, clients={"room": object()})
    bodies = [body(i) for i in range(WARM + n)]
    for raw in bodies:
        status, _ = gw.gpu_event(decode_body(raw), [])
        assert status == 200, status


def instructions(n, full):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, sys.executable, __file__]
        cmd += ["--child", str(n)] + (["--full"] if full else [])
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            return int(re.search(r"^summary: (\d+)", f.read(), re.M).group(1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=4000, help="N: each mode runs N and 3N events")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--full", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        run(a.child, a.full)
        return 0
    n = a.events
    per = {}
    for name, full in (("fast path", False), ("_parse_full only", True)):
        per[name] = (instructions(3 * n, full) - instructions(n, full)) / (2 * n)
        print(
            "decode_body + gpu_event, %s: %.0f instructions per event (callgrind, %d storm events)"
            % (name, per[name], 2 * n)
        )
    fast, full = per["fast path"], per["_parse_full only"]
    print(
        "without the fast path: %+.0f instructions per event (%+.1f %%)" % (full - fast, 100.0 * (full - fast) / fast)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
