"""Per-request ingest, side by side in one run: the RFC's Go gateway and ours, the same wrk script, the same slow
terminal. Printed: events/s, p99 latency, peak RSS, incidents delivered vs sent (issue 12).

The RFC's gateway is its Go code from the RFC document in ../shared/seeds (from `package main` to the end of
`main()`), extracted at run time and never kept in this repository; only its two addresses are changed (the
terminal's IP and the listen address, both to loopback ports), then it is built with Debian's golang-go
(`GOTOOLCHAIN=local`, `GOPROXY=off`: nothing is downloaded). Ours is `sentinel-gateway` with its defaults
(grouping, rate limit, persisted queue); `--servers` (default `epoll,epoll/2`) compares one event loop (the
default) with two (gateway.io_loops = 2). `--b-root DIR` adds ours as another checkout has it (e.g. the main branch:
a same-run A/B), run with DIR/.venv/bin/python where there is one.

The storm: `wrk -t1 -c16 -d<D>s --latency` with one Lua script (written here, used for both): one RFC body per
request, node after node of a 12,500-node cluster, each node's 8 GPUs in turn (so 1 in 8 requests is news to the
RFC's node-level debounce), 70 % NCCL_TIMEOUT, 25 % GPU_UTIL_DROP at 0-3 %, 3 % XID_FATAL, 2 % THERMAL.

The terminal: like a board, one request at a time (single-threaded, listen backlog 8), 1 s each, the core's
Receiver checking every signature (the RFC's key and ours in its keyring). "Delivered" is what the terminal
accepted: for the RFC's gateway one alarm per incident; ours carries a storm's incidents in a few summaries, and
counts each incident the alarm that carries it reached the terminal. After wrk stops each gateway gets the same
drain time (its queue empty, or the terminal idle 5 s, at most --drain seconds).

The figures, and the machine they were taken on, are in docs/GATEWAY.md ("Per request, beside the RFC's gateway").

"CPU us" is each gateway process's CPU time (user + system, /proc/<pid>/stat) over the wrk run, per request.

Run:   .venv/bin/python bench/bench_gateway_rfc.py [--duration 10] [--drain 90] [--rounds 3]
                                                    [--servers epoll,epoll/2] [--b-root /work/main]
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "firmware", "lib"))
sys.path.insert(0, ROOT)

from testkit.net import free_port, running, wait_port  # noqa: E402
from testkit.terminal import LoopbackTerminal  # noqa: E402

SECRET = "bench-secret-" + "y" * 20
NODES = 12_500

WRK_LUA = (
    r"""
-- one RFC gpu_event body per request: node after node, each node's 8 GPUs in turn
local i = 0
local NODES = %d
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local node = math.floor(i / 8) %% NODES
  local gpu = i %% 8
  i = i + 1
  local k = node %% 100
  local kind, util
  if k < 70 then kind, util = "NCCL_TIMEOUT", 100.0
  elseif k < 95 then kind, util = "GPU_UTIL_DROP", (node %% 4) * 1.0
  elseif k < 98 then kind, util = "XID_FATAL", 0.0
  else kind, util = "THERMAL", 97.0 end
  local body = string.format('{"cluster_rack":"R%%03d","node_host":"gpu-node-%%05d-%%08x","event_type":"%%s",' ..
                             '"gpu_index":%%d,"gpu_util":%%.1f}', node %% 125, node, (node * 2654435761) %% 4294967296,
                             kind, gpu, util)
  return wrk.format(nil, "/api/v1/gpu_event", nil, body)
end
"""
    % NODES
)


def find_rfc_source():
    """The RFC's Go gateway, from `package main` to the end of main(), out of the seed documents."""
    # ../shared/seeds beside the clone (a worktree one level deeper also finds it); SENTINEL_SEEDS overrides
    dirs = [
        os.environ.get("SENTINEL_SEEDS") or "",
        os.path.join(os.path.dirname(ROOT), "shared", "seeds"),
        os.path.join(os.path.dirname(os.path.dirname(ROOT)), "shared", "seeds"),
    ]
    seeds = next((d for d in dirs if d and os.path.isdir(d)), dirs[1])
    for path in sorted(glob.glob(os.path.join(seeds, "*"))):
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        if "package main" not in text or "handleGPUEventWebhook" not in text:
            continue
        lines = text[text.index("package main") :].splitlines()
        start = next(i for i, ln in enumerate(lines) if ln.startswith("func main()"))
        end = next(i for i in range(start, len(lines)) if lines[i] == "}")
        return path, "\n".join(lines[: end + 1]) + "\n"
    raise SystemExit("the RFC's Go code was not found in %s" % seeds)


def build_rfc(workdir, terminal_port, listen_port):
    """Extract, change the two addresses, build. Returns (binary, key, secret, seed name, build seconds)."""
    path, src = find_rfc_source()
    key = re.search(r'AuthAPIKey\s*=\s*"([^"]*)"', src).group(1)
    secret = re.search(r'AuthSecretKey\s*=\s*"([^"]*)"', src).group(1)
    # only the addresses change: the terminal's IP (the URL is http://%s/api/v1/send_msg) and the listen address
    src, n1 = re.subn(r'(PhysicalHardwareIP\s*=\s*)"[^"]*"', r'\1"127.0.0.1:%d"' % terminal_port, src)
    src, n2 = re.subn(r'http\.ListenAndServe\(":8080"', 'http.ListenAndServe("127.0.0.1:%d"' % listen_port, src)
    if (n1, n2) != (1, 1):
        raise SystemExit("the RFC's addresses were not found where expected (%d, %d)" % (n1, n2))
    go = shutil.which("go")
    if not go:
        raise SystemExit("go is not installed (golang-go; tools/install-system-deps.sh)")
    with open(os.path.join(workdir, "main.go"), "w", encoding="utf-8") as f:
        f.write(src)
    # the build cache outlives the run (the compiler's own packages take ~30 s the first time); the source does not
    env = dict(
        os.environ,
        GOCACHE=os.path.join(tempfile.gettempdir(), "sentinel-bench-gocache"),
        GOPATH=os.path.join(workdir, "gopath"),
        GOTOOLCHAIN="local",
        GOPROXY="off",
        GOFLAGS="",
        CGO_ENABLED="0",
    )
    t = time.time()
    subprocess.run([go, "build", "-o", "rfcgw", "main.go"], cwd=workdir, env=env, check=True)
    return os.path.join(workdir, "rfcgw"), key, secret, os.path.basename(path), time.time() - t


class RssSampler:
    def __init__(self, pid):
        self.pid = pid
        self.peak = 0
        self._stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self._stop:
            try:
                with open("/proc/%d/status" % self.pid) as f:
                    for ln in f:
                        if ln.startswith("VmRSS:"):
                            self.peak = max(self.peak, int(ln.split()[1]))
            except OSError:
                return
            time.sleep(0.05)

    def stop(self):
        self._stop = True
        self.t.join(1)
        return self.peak


def cpu_s(pid):
    """The process's user + system CPU seconds so far (/proc/<pid>/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(port, script, duration, connections):
    out = subprocess.run(
        [
            "wrk",
            "-t1",
            "-c%d" % connections,
            "-d%ds" % duration,
            "--latency",
            "--timeout",
            "10s",
            "-s",
            script,
            "http://127.0.0.1:%d" % port,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    text = out.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    total = int(re.search(r"(\d+) requests in", text).group(1))
    m = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    p99 = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    errors = re.search(r"Socket errors: (.*)", text)
    return {
        "rps": rps,
        "requests": total,
        "p99_ms": p99,
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": errors.group(1).strip() if errors else "",
        "raw": text,
    }


def metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for ln in text.splitlines():
        if ln and not ln.startswith("#"):
            name, _, v = ln.rpartition(" ")
            out[name] = float(v)
    return out


def board_terminal(keys, port=0):
    """One request at a time, 1 s each, a listen backlog of 8: what a board busy speaking can take."""
    return LoopbackTerminal(keys, delay_s=1.0, one_at_a_time=True, backlog=8, port=port, replay_capacity=8192).start()


def fate(m, name):
    return int(m.get('sentinel_gateway_incidents_total{terminal="room",fate="%s"}' % name, 0))


def bench_rfc(rfc, script, args):
    binary, key, secret, seed, build_s, term_port, port = rfc
    term = board_terminal({key: secret}, port=term_port)
    proc = subprocess.Popen([binary], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, alive=running(proc))
        rss = RssSampler(proc.pid)
        cpu0 = cpu_s(proc.pid)
        w = run_wrk(port, script, args.duration, args.connections)
        w["cpu_us"] = (cpu_s(proc.pid) - cpu0) / max(w["requests"], 1) * 1e6
        end = time.monotonic() + args.drain
        while time.monotonic() < end and time.monotonic() - term.last < 5:
            time.sleep(0.2)
        peak = rss.stop()
        sent = min(NODES, (w["requests"] + 7) // 8)  # every node's first event passes the RFC's debounce
        return {
            "name": "RFC Go gateway",
            "wrk": w,
            "rss_kb": peak,
            "sent": sent,
            "delivered": sum(1 for r in term.accepted if r.alarm is not None),
            "terminal_requests": term.requests,
            "build_s": build_s,
            "seed": seed,
        }
    finally:
        proc.kill()
        proc.wait()
        term.close()


def bench_ours(workdir, script, args, server, root=ROOT):
    term = board_terminal({"bench": SECRET})
    port = free_port()
    state = tempfile.mkdtemp(dir=workdir)
    cfg = os.path.join(workdir, "gw-%s.toml" % server.replace("/", "-").replace(":", "-"))
    front, _, loops = server.partition("/")  # "epoll/2": 2 event loops
    with open(cfg, "w") as f:
        f.write(
            '[gateway]\nhost = "127.0.0.1"\nport = %d\nstate_dir = "%s"\nserver = "%s"\nlog_format = "json"\n'
            '%s[terminals.room]\nurl = "%s"\nkey_id = "bench"\nsecret_env = "BENCH_SECRET"\n'
            % (port, state, front, "io_loops = %d\n" % int(loops) if loops else "", term.url)
        )
    env = dict(
        os.environ, BENCH_SECRET=SECRET, PYTHONPATH=os.pathsep.join([root, os.path.join(root, "firmware", "lib")])
    )
    py = os.path.join(root, ".venv", "bin", "python")
    log = cfg + ".log"
    proc = subprocess.Popen(
        [py if root != ROOT and os.path.exists(py) else sys.executable, "-m", "host_client.gateway.cli", "-c", cfg]
        + ["--log-level", "warning"],
        env=env,
        cwd=root,  # python -m puts the working directory first on sys.path
        stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),  # the child holds it; read on failure
    )
    url = "http://127.0.0.1:%d" % port
    try:
        wait_port(port, alive=running(proc, log=log))
        rss = RssSampler(proc.pid)
        cpu0 = cpu_s(proc.pid)
        w = run_wrk(port, script, args.duration, args.connections)
        w["cpu_us"] = (cpu_s(proc.pid) - cpu0) / max(w["requests"], 1) * 1e6
        end = time.monotonic() + args.drain
        while time.monotonic() < end:
            m = metrics(url)
            if m.get('sentinel_gateway_queue_depth{terminal="room"}', 1) == 0:
                break
            time.sleep(0.5)
        peak = rss.stop()
        m = metrics(url)
        sent = fate(m, "alone") + fate(m, "folded") + fate(m, "attached")
        delivered = fate(m, "delivered") + fate(m, "attached")
        return {
            "name": "ours (%s)" % server if root == ROOT else "ours at %s (%s)" % (root, server),
            "wrk": w,
            "rss_kb": peak,
            "sent": sent,
            "delivered": delivered,
            "terminal_requests": term.requests,
            "lost": fate(m, "expired") + fate(m, "dropped") + fate(m, "refused") + fate(m, "dead"),
        }
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        term.close()


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=int, default=10)
    p.add_argument("--drain", type=float, default=90)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--servers", default="epoll,epoll/2")
    p.add_argument("--b-root", help="another checkout of this repository: its gateway runs too (an A/B)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    if not shutil.which("wrk"):
        print("wrk is not installed (tools/install-system-deps.sh installs it); skipped")
        return 0
    workdir = tempfile.mkdtemp(prefix="bench-rfc-")
    script = os.path.join(workdir, "storm.lua")
    with open(script, "w") as f:
        f.write(WRK_LUA)
    term_port, port = free_port(), free_port()
    rfc = build_rfc(workdir, term_port, port) + (term_port, port)
    rounds = []
    try:
        for _ in range(args.rounds):
            rows = [bench_rfc(rfc, script, args)]
            for server in args.servers.split(","):
                rows.append(bench_ours(workdir, script, args, server.strip()))
            if args.b_root:
                rows.append(bench_ours(workdir, script, args, "epoll", root=os.path.abspath(args.b_root)))
            rounds.append(rows)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for i, rows in enumerate(rounds):
        print("round %d of %d" % (i + 1, len(rounds)))
        _table(rows, args)
    if len(rounds) > 1:
        print("median over %d rounds (each round: the RFC's gateway, then ours, back to back):" % len(rounds))
        for j in range(1, len(rounds[0])):
            rs = sorted(r[j]["wrk"]["rps"] / r[0]["wrk"]["rps"] for r in rounds)
            ms = sorted(r[j]["rss_kb"] / max(r[0]["rss_kb"], 1) for r in rounds)
            ps = sorted(r[j]["wrk"]["p99_ms"] / max(r[0]["wrk"]["p99_ms"], 1e-9) for r in rounds)
            print(
                "  %s / RFC: events/s %.2fx (%s), RSS %.2fx, p99 %.2fx"
                % (
                    rounds[0][j]["name"],
                    rs[len(rs) // 2],
                    ", ".join("%.2f" % x for x in rs),
                    ms[len(ms) // 2],
                    ps[len(ps) // 2],
                )
            )
    return 0


def _table(rows, args):
    go = rows[0]
    print(
        "wrk -t1 -c%d -d%ds, one RFC body per request, %d-node storm; terminal: one request at a time, 1 s each"
        % (args.connections, args.duration, NODES)
    )
    print(
        "(the RFC's gateway from %s, built in %.1f s with %s)"
        % (go["seed"], go["build_s"], subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip())
    )
    hdr = "%-40s %10s %9s %9s %8s %10s %10s %8s %6s" % (
        "gateway",
        "events/s",
        "p99 ms",
        "RSS MB",
        "CPU us",
        "sent",
        "delivered",
        "loss",
        "term.",
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        loss = 1.0 - (r["delivered"] / r["sent"]) if r["sent"] else 0.0
        print(
            "%-40s %10.0f %9.2f %9.1f %8.1f %10d %10d %7.1f%% %6d"
            % (
                r["name"][:40],
                r["wrk"]["rps"],
                r["wrk"]["p99_ms"],
                r["rss_kb"] / 1024,
                r["wrk"]["cpu_us"],
                r["sent"],
                r["delivered"],
                100 * loss,
                r["terminal_requests"],
            )
        )
        if r["wrk"]["non2xx"] or r["wrk"]["socket_errors"]:
            print("   %s: non-2xx %d, socket errors: %s" % (r["name"], r["wrk"]["non2xx"], r["wrk"]["socket_errors"]))
    for r in rows[1:]:
        print(
            "%s / RFC: events/s %.2fx, p99 %.2fx, RSS %.2fx"
            % (
                r["name"],
                r["wrk"]["rps"] / go["wrk"]["rps"],
                r["wrk"]["p99_ms"] / max(go["wrk"]["p99_ms"], 1e-9),
                r["rss_kb"] / max(go["rss_kb"], 1),
            )
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
