"""Instructions per event behind the HTTP front (decode_body + Gateway.gpu_event), under callgrind, with and
without parse_event's fast path: the figure that decides whether the fast path earns its keep (docs/PERFORMANCE.md).
A third mode takes each event's whole request through the front: the bytes wrk sends handed to a connection's
readable() (llhttp, the request's callbacks, the Gateway, the answer written), the socket a stand-in that returns
them and takes the answer, so the count is the loop thread's Python and C without the kernel's TCP.

The bodies are bench_gateway_rfc.py's storm, in the same order (node after node, each node's 8 GPUs in turn, 70 %
NCCL_TIMEOUT, 25 % GPU_UTIL_DROP, 3 % XID_FATAL, 2 % THERMAL). Each mode runs twice under callgrind, with N and 3N
events after the same warm-up; (instructions(3N) - instructions(N)) / 2N is the per-event figure, start-up and
warm-up cancelled. Instruction counts do not depend on what else the machine runs, unlike timings.

Run:   .venv/bin/python bench/bench_ingest_instructions.py [--events N] [--modes fast,full,front]
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


def request(raw):
    """The request wrk's script sends for one body (bench_gateway_rfc.py)."""
    return (
        b"POST /api/v1/gpu_event HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(raw), raw)
    )


class _Socket:
    """What the front's connection reads from and writes to: each request in one piece, every answer taken."""

    def __init__(self):
        self.pieces = []
        self.answers = 0

    def fileno(self):
        return 1 << 20  # never registered with epoll here

    def recv_into(self, buf):
        piece = self.pieces.pop()
        buf[: len(piece)] = piece
        return len(piece)

    def send(self, data):
        self.answers += 1
        return len(data)


def run_front(gw, n, made):
    from host_client.gateway import connection, server

    front = server.IngestFront(gw, gw.cfg)
    loop = server._Loop.__new__(server._Loop)  # its thread, epoll and pipe are not needed to read a connection
    loop.now, loop.conns = 0.0, {}
    loop.rview = memoryview(bytearray(connection.RECV))
    sock = _Socket()
    conn = connection.Conn(front.app, front.limits, loop, sock, 0.0)
    requests = [request(body(i)) for i in range(WARM + made)]
    for raw in requests[: WARM + n]:
        sock.pieces.append(raw)
        conn.readable()
    assert sock.answers == WARM + n == conn.served, (sock.answers, conn.served)


def run(n, made, full, front=False):
    """In the child: build a gateway (no threads, no disk), warm it, then ingest n storm bodies. Every run makes
    the same number of bodies (made), so that making them cancels out of the difference of two runs."""
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
    if front:
        run_front(gw, n, made)
        return
    bodies = [body(i) for i in range(WARM + made)]
    for raw in bodies[: WARM + n]:
        verdict, _ = gw.gpu_event(decode_body(raw), [])
        assert verdict == service.TAKEN, verdict


def instructions(n, made, full, front=False):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, sys.executable, __file__]
        cmd += ["--child", str(n), "--made", str(made)] + (["--full"] if full else []) + (["--front"] if front else [])
        # the same hash seed each run: dict probing, and so the count, does not move from run to run
        env = dict(os.environ, PYTHONHASHSEED="0")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        with open(out) as f:
            return int(re.search(r"^summary: (\d+)", f.read(), re.M).group(1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=4000, help="N: each mode runs N and 3N events")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--made", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--full", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--front", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--modes", default="fast,full,front", help="which of fast, full, front to count")
    a = ap.parse_args(argv)
    if a.child is not None:
        run(a.child, a.made, a.full, a.front)
        return 0
    n = a.events
    modes = {
        "fast": ("decode_body + gpu_event, fast path", False, False),
        "full": ("decode_body + gpu_event, _parse_full only", True, False),
        "front": ("the whole request through the HTTP front (llhttp, gateway, answer)", False, True),
    }
    per = {}
    for mode in a.modes.split(","):
        name, full, front = modes[mode.strip()]
        per[mode] = (instructions(3 * n, 3 * n, full, front) - instructions(n, 3 * n, full, front)) / (2 * n)
        print("%s: %.0f instructions per event (callgrind, %d storm events)" % (name, per[mode], 2 * n))
    if "fast" in per and "full" in per:
        fast, full = per["fast"], per["full"]
        print(
            "without the fast path: %+.0f instructions per event (%+.1f %%)"
            % (full - fast, 100.0 * (full - fast) / fast)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
