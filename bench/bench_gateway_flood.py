"""The gateway's memory after a flood of hostile requests: RSS at start, at the peak, and N s after the flood.

The gateway runs as its own process (sentinel-gateway, the CLI: its process set-up included), its one terminal at a
loopback port where nothing listens (deliveries fail and are retried, the queue stays bounded). A few clients then
pipeline N requests over keep-alive connections, a mix a hostile sender makes: events that look valid, each for a
node of its own (every one a new debounce key and a new incident), malformed JSON, fields that break a rule, a
batch too big, unknown paths, wrong methods, Alertmanager bodies that are not webhooks. Every answer is read and its
status counted. VmRSS is sampled every 50 ms from the start to --after seconds after the last answer, with the
debounce keys /metrics reports.

The documented claim (docs/GATEWAY.md, "Limits"): RSS is back within 10 MB of its start once the flood's debounce
window has passed; the run uses a short window (--window) so that it passes within the run.

A flood of connections (--per-connection 1: each request on a connection of its own, closed after its answer)
shows what closed connections leave behind.

Run:   .venv/bin/python bench/bench_gateway_flood.py [--requests 200000] [--window 20] [--after 40]
                                                     [--no-valid] [--per-connection N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_kb(pid):
    with open("/proc/%d/status" % pid, encoding="ascii") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1))


def metric(port, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        m = re.search(r"^%s (\d+)$" % re.escape(name), r.read().decode(), re.M)
    return int(m.group(1)) if m else None


def post(path, body, method="POST"):
    return b"%s %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        method.encode(),
        path.encode(),
        len(body),
        body,
    )


KINDS = ("NCCL_TIMEOUT", "GPU_UTIL_DROP", "XID_FATAL", "THERMAL")


def hostile(i, salt, valid=True):
    """The i-th request of the flood: about half look like valid events, each for a node of its own (valid=False:
    those are refused too, a field too long)."""
    k = i % 20
    if k < 10 and not valid:
        k = 12
    if k < 10:
        ev = {
            "cluster_rack": "R%03d" % (i % 997),
            "node_host": "spoof-%s-%07d" % (salt, i),
            "event_type": KINDS[i % 4],
            "gpu_index": i % 8,
            "gpu_util": 0.0,
        }
        return post("/api/v1/gpu_event", json.dumps(ev).encode())
    if k < 12:
        return post("/api/v1/gpu_event", b'{"cluster_rack": "R1", "node_host": ')  # cut short: not JSON
    if k < 14:
        return post("/api/v1/gpu_event", json.dumps({"cluster_rack": "R1", "node_host": "x" * 300}).encode())
    if k == 14:
        return post("/api/v1/gpu_event", json.dumps([{"a": 1}] * 1001).encode())
    if k == 15:
        return post("/nowhere/%d" % i, b"{}")
    if k == 16:
        return post("/api/v1/gpu_event", b"", "GET")
    if k == 17:
        return post("/api/v1/alertmanager", json.dumps({"version": "4", "alerts": "no"}).encode())
    if k == 18:
        return post("/api/v1/gpu_event", b'{"a": NaN}')
    return post("/api/v1/gpu_event", b'{"cluster_rack": "\\ud800", "node_host": "h", "event_type": "THERMAL"}')


def client(port, first, n, salt, statuses, valid=True, batch=64, per_connection=0):
    """Pipelines requests first..first+n in batches, reading every answer (its status) before the next batch.
    per_connection: a new connection after that many requests (0: one connection for them all)."""
    s = socket.create_connection(("127.0.0.1", port))
    buf = b""
    i = first
    end = first + n
    on_this = 0
    while i < end:
        if per_connection and on_this >= per_connection:
            s.close()
            s = socket.create_connection(("127.0.0.1", port))
            buf = b""
            on_this = 0
        k = min(batch, end - i, per_connection or batch)
        on_this += k
        s.sendall(b"".join(hostile(j, salt, valid) for j in range(i, i + k)))
        i += k
        got = 0
        while got < k:
            while b"\r\n\r\n" not in buf:
                chunk = s.recv(65536)
                if not chunk:
                    raise RuntimeError("the gateway closed a keep-alive connection")
                buf += chunk
            head, _, rest = buf.partition(b"\r\n\r\n")
            length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
            while len(rest) < length:
                rest += s.recv(65536)
            status = int(head.split(b" ", 2)[1])
            statuses[status] = statuses.get(status, 0) + 1
            buf = rest[length:]
            got += 1
    s.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--window", type=float, default=20.0, help="debounce.window_s of the gateway under test")
    ap.add_argument("--after", type=float, default=40.0, help="seconds to watch RSS after the flood")
    ap.add_argument(
        "--no-valid", action="store_true", help="refuse every request: no event that looks valid, so no incident"
    )
    ap.add_argument(
        "--per-connection",
        type=int,
        default=0,
        help="requests per connection, a new one after them (1: a flood of connections); 0: one per client",
    )
    a = ap.parse_args(argv)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="bench-flood-")
    cfg = os.path.join(tmp, "gw.toml")
    with open(cfg, "w", encoding="utf-8") as f:
        f.write(
            '[gateway]\nhost = "127.0.0.1"\nport = %d\nstate_dir = "%s"\n[debounce]\nwindow_s = %g\n'
            "[grouping]\nwindow_s = %g\n"
            '[terminals.room]\nurl = "http://127.0.0.1:9"\nkey_id = "k"\nsecret_env = "S"\n'
            % (port, os.path.join(tmp, "state"), a.window, min(60.0, a.window))
        )
    env = dict(os.environ, S="s", PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "firmware", "lib")]))
    gw = subprocess.Popen(
        [sys.executable, "-m", "host_client.gateway.cli", "-c", cfg, "--log-level", "error"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                metric(port, "sentinel_gateway_debounce_keys")
                break
            except OSError:
                time.sleep(0.05)
        warm = {}
        client(port, 0, 2000, "warm", warm)  # the code paths and state files are there before the baseline
        time.sleep(a.window + 2)
        metric(port, "sentinel_gateway_debounce_keys")
        time.sleep(1)
        start = rss_kb(gw.pid)
        peak = [start]
        stop = threading.Event()

        def sample():
            while not stop.wait(0.05):
                peak[0] = max(peak[0], rss_kb(gw.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        counts = [{} for _ in range(a.clients)]  # one per client thread, summed after
        per = a.requests // a.clients
        t0 = time.monotonic()
        threads = [
            threading.Thread(
                target=client, args=(port, c * per, per, "f", counts[c], not a.no_valid, 64, a.per_connection)
            )
            for c in range(a.clients)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - t0
        statuses = {}
        for cs in counts:
            for k, v in cs.items():
                statuses[k] = statuses.get(k, 0) + v
        keys = metric(port, "sentinel_gateway_debounce_keys")
        conns = a.clients * (-(-per // a.per_connection) if a.per_connection else 1)
        print(
            "flood: %d requests in %.1f s over %d connections; answers %s; debounce keys after it %s"
            % (per * a.clients, took, conns, dict(sorted(statuses.items())), keys)
        )
        t_end = time.monotonic()
        marks = sorted({5.0, a.window / 2, a.window + 5, a.after} - {0.0})
        for m in marks:
            time.sleep(max(0.0, t_end + m - time.monotonic()))
            print(
                "  %4.0f s after: RSS %.1f MB, debounce keys %s"
                % (m, rss_kb(gw.pid) / 1024, metric(port, "sentinel_gateway_debounce_keys"))
            )
        stop.set()
        end = rss_kb(gw.pid)
        print(
            "RSS start %.1f MB, peak %.1f MB, %.0f s after %.1f MB (%+.1f MB from start; debounce window %g s)"
            % (start / 1024, peak[0] / 1024, a.after, end / 1024, (end - start) / 1024, a.window)
        )
    finally:
        gw.terminate()
        gw.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
