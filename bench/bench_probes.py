"""Probe detection latency per fault class, and the daemon's own cost on a training node.

    .venv/bin/python bench/bench_probes.py [--quick]

Latency: from the moment a fault becomes observable (last beat of a stopped loop, an XID line written to the
followed kernel log, an NCCL watchdog line written to a followed log pipe, a PCIe downgrade / NVLink error
appearing in the GPU readings) to the event's arrival at a recording HTTP sink on loopback that stands in for
the gateway. The GPU classes use the default sampling interval (1 s) and a fake NVML source.

Issue 11 classes: GPU_LOST (a GPU that stops answering NVML, fake source), FIRST_STEP (a job that called start()
and never beat: time past its first-step deadline), STALL_DIED (a hung child process killed with SIGKILL: time from
the kill to the "died while stalled" report), the R570 multi-line fallen-off-the-bus record, the watchdog-stuck and
NET/IB lines.

Issue 24 classes: NCCL_PEER_LOST, NCCL_ERROR, CUDA_ERROR (a job-killing failure line written to a followed log pipe),
DUMP_SIGNAL (the flight recorder's line) and RESTART (a hung job killed and restarted under the same name: time from
the new process's first message to the stall's RECOVERED).

False positives: healthy loops in virtual time through the daemon's own decision code (ProgressTracker, GpuChecker,
the Conditions ledger): jittery steps (log-normal, occasional 3x stragglers), periodic checkpoints inside pause(),
evaluations announced with beat(next_s=...), jobs that end, GPUs that go idle in P0 at Gen1 or x8 between jobs and
whose link retrains a sample late, and the training logs' healthy chatter (the corpus's quiet NCCL/PyTorch lines:
NCCL INFO at every job start, warnings that mention a hang or a timeout, store sockets reset at job end) through the
NCCL log parser. Counts every P0 and P1 raised (target: 0 P0). The same run with the checkpoints
*not* wrapped in pause() is printed too, to show what an unannounced long step costs.

Cost: the real daemon (`python -m host_client.probes.cli`) in a subprocess with 8 replayed GPUs (18 NVLink links
each), the default intervals, the status server on, a followed kernel log and NCCL log, and 8 ranks beating every
200 ms; CPU from /proc/<pid>/stat over the run, memory from VmRSS / VmHWM.
"""

import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))  # the test doubles (FakeSource) live with the tests

from probe_fakes import FakeSource  # noqa: E402

from host_client.beat import Beat  # noqa: E402
from host_client.probes import config  # noqa: E402
from host_client.probes.daemon import Daemon  # noqa: E402
from host_client.probes.gpu_source import NVLINK_COUNTERS  # noqa: E402

FIELD = {  # FACTS.md section 7
    "PROGRESS_STALL": "PyTorch NCCL watchdog 10-30 min; sichek hang rule 60-90 s",
    "NCCL_TIMEOUT": "the line itself appears after the 10-30 min collective timeout",
    "XID": "gpud 30-60 s; DCGM policy 10 s sampling",
    "PCIE_DOWNGRADE": "gpud 30-60 s; dcgm-exporter 30 s + scrape + for:",
    "NVLINK_ERROR": "dcgm-exporter 30 s + scrape + for:; DCGM policy 10 s",
    "GPU_LOST": "the seed probe crashed at start (issue 11)",
    "FIRST_STEP": "the seed: never (no beat, no watch)",
    "STALL_DIED": "the seed: stall stood forever",
    "XID79_R570": "the seed: missed (no Xid number)",
    "WATCHDOG_STUCK": "PyTorch heartbeat monitor 480-600 s",
    "NCCL_PEER_LOST": "before issue 24: nothing until the 10-30 min timeout, or never",
    "NCCL_ERROR": "before issue 24: nothing until the 10-30 min timeout, or never",
    "CUDA_ERROR": "before issue 24: nothing (the job just died)",
    "DUMP_SIGNAL": "before issue 24: nothing on a rank whose work finished",
    "RESTART": "before issue 24: stall stood dead_clear_s (300 s)",
}
TARGET = {
    "PROGRESS_STALL": "< 2 s after the last beat (issue 7)",
    "XID": "< 1 s (issue 7)",
    "GPU_LOST": "<= 1 sampling interval",
    "FIRST_STEP": "< 2 s past the first-step deadline",
    "STALL_DIED": "< 1 s (a stalled pid is checked every 0.5 s)",
    "XID79_R570": "< 1 s",
    "WATCHDOG_STUCK": "< 1 s",
    "NCCL_TIMEOUT": "< 1 s",
    "PCIE_DOWNGRADE": "<= 2 sampling intervals = 2 s (issue 7)",
    "NVLINK_ERROR": "<= 1 sampling interval (5 with real NVML's nvlink_every)",
    "NCCL_PEER_LOST": "< 1 s (issue 24)",
    "NCCL_ERROR": "< 1 s (issue 24)",
    "CUDA_ERROR": "< 1 s (issue 24)",
    "DUMP_SIGNAL": "< 1 s (issue 24)",
    "RESTART": "< 2 s after the new first beat (issue 24)",
}

# one real form per issue 24 class (tests/fixtures/probes/corpus.jsonl has them with their sources); %d is the rank
FAILURE_LINES = {
    "NCCL_PEER_LOST": "[rank%d]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/"
    "distributed/c10d/ProcessGroupNCCL.cpp:3763, remote process exited or there was a network error, NCCL version "
    "2.28.8\n",
    "NCCL_ERROR": "[rank%d]: ncclUnhandledCudaError: Call to CUDA function failed.\n",
    "CUDA_ERROR": "[rank%d]:[E504 23:32:59.338859795 ProcessGroupNCCL.cpp:1896] [PG ID 0 PG GUID 0(default_pg) Rank "
    "0] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was "
    "encountered\n",
    "DUMP_SIGNAL": "[rank%d]:[E723 01:58:45.667329643 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank "
    "5] Received a dump signal due to a collective timeout from  rank 2 and we will try our best to dump the debug "
    "info. Last enqueued NCCL work: 136, last completed NCCL work: 136.\n",
}
CORPUS = os.path.join(ROOT, "tests", "fixtures", "probes", "corpus.jsonl")


def quiet_log_lines():
    """The corpus's training-log lines that must raise nothing (issue 24's negatives and the older ones)."""
    with open(CORPUS, encoding="utf-8") as f:
        entries = [json.loads(line) for line in f]
    return [e["line"] for e in entries if e["kind"] == "nccl" and not e["expect"]]


class Sink:
    def __init__(self):
        self.events = []  # (arrival, event, request number)
        self.requests = 0
        self.cv = threading.Condition()
        sink = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                # the sender puts what is queued together into one JSON array
                evs = body if isinstance(body, list) else [body]
                with sink.cv:
                    sink.requests += 1
                    now = time.monotonic()
                    for ev in evs:
                        sink.events.append((now, ev, sink.requests))
                    sink.cv.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d/api/v1/gpu_event" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, pred, timeout, since=0.0):
        end = time.monotonic() + timeout
        with self.cv:
            while True:
                for t, ev, _r in self.events:
                    if t >= since and pred(ev):
                        return t
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self.cv.wait(left)


def stats(name, lat):
    lat = [x for x in lat if x is not None]
    return {"class": name, "n": len(lat), "mean_s": statistics.mean(lat), "worst_s": max(lat), "best_s": min(lat)}


def beating_loop(cfg, job, local_rank, n_beats, stops):
    b = Beat(path=cfg["progress"]["socket"], job=job, local_rank=local_rank)
    for i in range(n_beats):
        b.beat(i)
        stops[job] = time.monotonic()  # the last beat is the last one sent
        time.sleep(0.2)


def latency(trials):
    tmp = tempfile.mkdtemp(prefix="probe-bench-")
    kern = os.path.join(tmp, "kern.log")
    fifo = os.path.join(tmp, "train.fifo")
    open(kern, "w").close()
    os.mkfifo(fifo)
    sink = Sink()
    cfg = config.build(
        {
            "node": {"rack": "A03", "host": "gpu-worker-08", "gateway": sink.url},
            "gpu": {"util_drop": False},  # defaults otherwise: 1 s sampling, confirm 2
            "xid": {"source": "file", "path": kern, "hold_s": 0.0},
            "nccl": {"logs": [fifo]},
            "progress": {"socket": os.path.join(tmp, "p.sock"), "first_step_s": 2.0, "dead_clear_s": 2.0},
            "status": {"listen": ""},
        }
    )
    src = FakeSource(count=8, nvlinks=18)
    d = Daemon(cfg, gpu=src).start()
    time.sleep(0.5)
    results = []

    # progress: loops beating every 200 ms stop; several jobs at once, staggered
    lat = []
    rounds = max(1, trials // 5)
    for rnd in range(rounds):
        stops = {}
        threads = [
            threading.Thread(target=beating_loop, args=(cfg, "job%d-%d" % (rnd, j), j, 8 + j, stops)) for j in range(5)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for j in range(5):
            job = "job%d-%d" % (rnd, j)
            t = sink.wait(lambda e, job=job: e["event_type"] == "PROGRESS_STALL" and e.get("job") == job, 5)
            lat.append(None if t is None else t - stops[job])
    results.append(stats("PROGRESS_STALL", lat))

    # XID lines appended to the followed kernel log
    lat = []
    for i in range(trials):
        x = 1000 + i  # distinct unclassified XIDs -> XID_WARNING; fatal ones behave the same
        line = "[ %d.0] NVRM: Xid (PCI:0000:18:00): %d, pid=1, name=python3, bench\n" % (i, x)
        with open(kern, "a") as f:
            t0 = time.monotonic()
            f.write(line)
        t = sink.wait(lambda e, x=x: e.get("xid") == x, 3)
        lat.append(None if t is None else t - t0)
        time.sleep(random.uniform(0.01, 0.05))
    results.append(stats("XID", lat))

    # A burst: one line per GPU written at once (a node-wide fault). The sender takes what is queued when it
    # wakes: the first event alone, at once; the rest together in one array.
    burst = []
    for i in range(max(1, trials // 5)):
        xs = [3000 + 8 * i + g for g in range(8)]
        lines = "".join("[ %d.0] NVRM: Xid (PCI:0000:18:00): %d, pid=1, name=python3, burst\n" % (i, x) for x in xs)
        with open(kern, "a") as f:
            t0 = time.monotonic()
            f.write(lines)
        ts = [sink.wait(lambda e, x=x: e.get("xid") == x, 3) for x in xs]
        with sink.cv:
            reqs = {r for _t, e, r in sink.events if e.get("xid") in xs}
        if None not in ts:
            burst.append((min(ts) - t0, max(ts) - t0, len(reqs)))
        time.sleep(0.1)
    results.append({"class": "XID_BURST", "burst": burst})

    # NCCL watchdog lines through a pipe
    lat = []
    fd = os.open(fifo, os.O_WRONLY)
    for i in range(trials):
        line = (
            "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=%d, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.\n" % (5000 + i)
        )
        t0 = time.monotonic()
        os.write(fd, line.encode())
        t = sink.wait(lambda e, s=5000 + i: e["event_type"] == "NCCL_TIMEOUT" and e.get("seq") == s, 3)
        lat.append(None if t is None else t - t0)
        time.sleep(random.uniform(0.01, 0.05))
    os.close(fd)
    results.append(stats("NCCL_TIMEOUT", lat))

    # PCIe downgrades (GPUs 0-3) and NVLink errors (GPUs 4-7) at random phases of the 1 s sampling clock
    pl, nl = [], []
    rounds = max(1, trials // 8)
    for rnd in range(rounds):
        t0 = {}
        for g in random.sample(range(8), 8):
            time.sleep(random.uniform(0.0, 0.25))
            t0[g] = time.monotonic()
            if g < 4:
                src.set(g, gen=3, width=4)
            else:
                src.set(
                    g,
                    nvlink={
                        "%d:%s" % (link, c): (rnd + 1) * 7 if (link, c) == (2, "crc_flit") else 0
                        for link in range(18)
                        for c in NVLINK_COUNTERS
                    },
                )
        for g in range(8):
            typ = "PCIE_DOWNGRADE" if g < 4 else "NVLINK_ERROR"
            t = sink.wait(lambda e, g=g, typ=typ: e["event_type"] == typ and e["gpu_index"] == g, 4, since=t0[g])
            (pl if g < 4 else nl).append(None if t is None else t - t0[g])
        for g in range(4):
            src.set(g, gen=5, width=16)
        # let PCIe recover (2 samples) and NVLink go quiet (60 s default is too long: bench clears by hand)
        time.sleep(2.5)
        for g in range(4, 8):
            d.checker._gpus[g].nvlink_last_inc = None
        time.sleep(1.2)
    results.append(stats("PCIE_DOWNGRADE", pl))
    results.append(stats("NVLINK_ERROR", nl))

    # a GPU that stops answering (GpuIsLost on every call), at random phases of the sampling clock
    lat = []
    for rnd in range(max(1, trials // 5)):
        g = rnd % 8
        time.sleep(random.uniform(0.0, 1.0))
        t0 = time.monotonic()
        src.set(g, lost=True, error="NVMLError_GpuIsLost")
        t = sink.wait(lambda e, g=g: e["event_type"] == "GPU_LOST" and e["gpu_index"] == g, 4, since=t0)
        lat.append(None if t is None else t - t0)
        src.set(g, lost=False, error=None)
        sink.wait(lambda e, g=g: e.get("recovers") == "GPU_LOST" and e["gpu_index"] == g, 5, since=t0)
    results.append(stats("GPU_LOST", lat))

    # start() and then a hang at the first collective: time past the first-step deadline (2 s here)
    lat = []
    for rnd in range(max(1, trials // 10)):
        job = "first-%d" % rnd
        b = Beat(path=cfg["progress"]["socket"], job=job, local_rank=0)
        t0 = time.monotonic()
        b.start()
        t = sink.wait(lambda e, job=job: e["event_type"] == "PROGRESS_STALL" and e.get("job") == job, 6, since=t0)
        lat.append(None if t is None else t - t0 - cfg["progress"]["first_step_s"])
        b.end()
    results.append(stats("FIRST_STEP", lat))

    # a hung process (beats, then sleeps in 'a collective') killed with SIGKILL
    lat = []
    child = (
        "import sys, time\nsys.path.insert(0, %r)\nfrom host_client.beat import Beat\n"
        "b = Beat(path=%r, job=sys.argv[1])\nb.start()\nfor i in range(5):\n    b.beat(i)\n"
        "    time.sleep(0.1)\ntime.sleep(600)\n"
    )
    for rnd in range(max(1, trials // 10)):
        job = "killed-%d" % rnd
        p = subprocess.Popen([sys.executable, "-c", child % (ROOT, cfg["progress"]["socket"]), job])
        sink.wait(lambda e, job=job: e["event_type"] == "PROGRESS_STALL" and e.get("job") == job, 90)
        t0 = time.monotonic()
        p.kill()
        p.wait()
        t = sink.wait(
            lambda e, job=job: (
                e["event_type"] == "PROGRESS_STALL"
                and e.get("job") == job
                and "died while stalled" in e.get("detail", "")
            ),
            5,
            since=t0,
        )
        lat.append(None if t is None else t - t0)
    results.append(stats("STALL_DIED", lat))

    # the forms issue 11 added, through the followed logs
    lat = []
    for i in range(max(1, trials // 3)):
        bus = 0x20 + i
        rec = (
            "[ %d.1] NVRM: The NVIDIA GPU 0000:%02x:00.0\n               NVRM: (PCI ID: 10de:26b5) installed in "
            "this system has\n               NVRM: fallen off the bus and is not responding to commands.\n" % (i, bus)
        )
        with open(kern, "a") as f:
            t0 = time.monotonic()
            f.write(rec)
        t = sink.wait(lambda e, bus=bus: e.get("xid") == 79 and e.get("pci") == "0000:%02x:00" % bus, 3, since=t0)
        lat.append(None if t is None else t - t0)
    results.append(stats("XID79_R570", lat))
    lat = []
    fd = os.open(fifo, os.O_WRONLY)
    for i in range(max(1, trials // 3)):
        line = (
            "[rank%d]:[E1019 01:04:03.356947152 ProcessGroupNCCL.cpp:1413] [PG 3 Rank %d] Heartbeat monitor "
            "timed out! Process will be terminated after dumping debug info. workMetaList_.size()=121\n" % (100 + i, i)
        )
        t0 = time.monotonic()
        os.write(fd, line.encode())
        t = sink.wait(lambda e, r=100 + i: e["event_type"] == "NCCL_TIMEOUT" and e.get("rank") == r, 3, since=t0)
        lat.append(None if t is None else t - t0)
    results.append(stats("WATCHDOG_STUCK", lat))

    # issue 24: job-killing failures and the dump signal, one rank per trial (one event per log and rank)
    for n, (cls, fmt) in enumerate(FAILURE_LINES.items()):
        etype = "NCCL_TIMEOUT" if cls == "DUMP_SIGNAL" else cls
        lat = []
        for i in range(trials):
            rank = 1000 * (n + 1) + i
            t0 = time.monotonic()
            os.write(fd, (fmt % rank).encode())
            t = sink.wait(lambda e, r=rank, et=etype: e["event_type"] == et and e.get("rank") == r, 3, since=t0)
            lat.append(None if t is None else t - t0)
            time.sleep(random.uniform(0.01, 0.05))
        results.append(stats(cls, lat))
    os.close(fd)

    # issue 24: a hung job killed and restarted at once under the same name (torchelastic, Slurm requeue): the next
    # generation is already imported and starts the moment the old one is killed, sooner than the 0.5 s death check
    lat = []
    gated = (
        "import sys, time\nsys.path.insert(0, %r)\nfrom host_client.beat import Beat\n"
        "b = Beat(path=%r, job=sys.argv[1])\nsys.stdin.readline()\nb.start()\nprint(time.monotonic(), flush=True)\n"
        "for i in range(100000):\n    b.beat(i)\n    time.sleep(0.1)\n"
    )
    for rnd in range(max(1, trials // 10)):
        job = "restarted-%d" % rnd
        old = subprocess.Popen([sys.executable, "-c", child % (ROOT, cfg["progress"]["socket"]), job])
        new = subprocess.Popen(
            [sys.executable, "-c", gated % (ROOT, cfg["progress"]["socket"]), job],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        sink.wait(lambda e, job=job: e["event_type"] == "PROGRESS_STALL" and e.get("job") == job, 90)
        t_stall = time.monotonic()
        old.kill()
        old.wait()
        new.stdin.write("go\n")
        new.stdin.flush()
        t_first = float(new.stdout.readline())
        t = sink.wait(
            lambda e, job=job: e.get("recovers") == "PROGRESS_STALL" and e.get("job") == job, 10, since=t_stall
        )
        lat.append(None if t is None else t - t_first)
        new.kill()
        new.wait()
        time.sleep(0.2)
    results.append(stats("RESTART", lat))
    d.close()
    sink.server.shutdown()
    return results


def healthy_run(hours, *, ranks=8, seed=7, pause_checkpoints=True, idle_rule=True):
    """Realistic healthy loops in virtual time through the daemon's decision code. Returns counts of P0 and P1
    conditions raised, and the number of steps and samples judged."""
    from host_client.probes import events as ev
    from host_client.probes import nccl
    from host_client.probes.gpu_checks import GpuChecker
    from host_client.probes.progress import ProgressTracker

    rnd = random.Random(seed)
    crnd = random.Random(seed + 1)  # the log chatter's own stream: the loops and GPUs stay as before issue 24
    quiet = quiet_log_lines()
    log = nccl.NcclLog()
    once = ev.Oneshots(600.0)
    log_lines = 0
    cfg = config.build({"node": {"rack": "A03", "host": "bench", "gateway": "http://127.0.0.1:1"}})
    tr = ProgressTracker(config.progress_rules(cfg), alive=lambda pid: True)
    src = FakeSource(count=8)
    rules = config.gpu_rules(cfg)
    if not idle_rule:
        rules.load_util_pct = 0.0  # every sample counts as loaded: issue 7's rules (gen in P0, width always)
    checker = GpuChecker(src.devices(), rules)
    led = ev.Conditions()
    raised = []
    end_t = hours * 3600.0
    # per rank: its next event time and state; jobs of 2-6 h, a new job (new pids) after a gap of idle GPUs
    jobs = []
    t = 0.0
    jid = 0
    while t < end_t:
        length = rnd.uniform(2, 6) * 3600
        jobs.append((t, min(end_t, t + length), jid, rnd.choice((0.2, 0.5, 1.0, 2.0))))
        jid += 1
        t += length + rnd.uniform(300, 1800)  # GPUs idle between jobs
    import heapq

    heap = [(start, "start", j, step, stop, 0) for start, stop, j, step in jobs]  # one entry per job: its ranks
    heapq.heapify(heap)  # step together (collectives)
    steps = samples = 0
    next_sample = 0.0
    ck_base = {}
    busy_until = {}  # gpu -> [(start, stop)]
    for start, stop, _j, _step in jobs:
        for g in range(8):
            busy_until.setdefault(g, []).append((start, stop))

    def gpu_state(g, now):
        for a, b in busy_until[g]:
            if a <= now < b:
                return True, now - a
        return False, 0.0

    def apply(check, findings, now):
        for f in led.update(check, findings, now)[0]:
            raised.append((now, f))

    def sample_until(now):
        nonlocal next_sample, samples
        while next_sample <= now:
            for g in range(8):
                busy, since = gpu_state(g, next_sample)
                if busy:
                    # the link retrains a sample after the load arrives: Gen1 with high utilisation once
                    gen = 1 if since < 1.0 else 5
                    src.set(
                        g,
                        util=rnd.randint(88, 100),
                        power_w=rnd.uniform(450, 690),
                        procs=1,
                        pstate=0,
                        gen=gen,
                        width=16,
                        temp=rnd.randint(55, 78),
                    )
                else:  # idle in P0 at Gen1; half of them also narrow the link; monitoring blips up to 12 %
                    src.idle(
                        g,
                        gen=1,
                        width=8 if g % 2 else 16,
                        util=rnd.choice((0, 0, 0, 3, 12)),
                        power_w=rnd.uniform(55, 95),
                        temp=rnd.randint(30, 40),
                    )
            apply("gpu", checker.check(src.sample(), next_sample), next_sample)
            samples += 1
            next_sample += 1.0

    def chatter(j, now, lines):
        # a job's training log: what each of its ranks prints (the quiet forms, with the rank's own prefix)
        nonlocal log_lines
        for r in range(ranks):
            for line in lines:
                f = log.finding(line.replace("[rank", "[rank%d%d" % (j, r), 1), "/var/log/train/job%d.log" % j)
                log_lines += 1
                if f is not None and once.admit(f.key, now):
                    raised.append((now, f))

    def send(j, now, **fields):
        for r in range(ranks):  # the ranks of a job, within a few ms of each other
            tr.message(dict(fields, job="job%d" % j, pid=10000 + j * 100 + r, rank=r, local_rank=r), now + r * 0.002)

    while heap:
        now, kind, j, step, stop, count = heapq.heappop(heap)
        while True:  # what the daemon's loop does: wake at the earliest progress deadline
            dl = tr.next_deadline()
            if dl is None or dl >= now:
                break
            apply("progress", tr.evaluate(dl + 0.001), dl + 0.001)
            if tr.next_deadline() == dl:
                break
        sample_until(now)
        if kind == "start":
            send(j, now, kind="start")
            chatter(j, now, quiet)  # NCCL INFO at init, the barrier's "can potentially cause a hang" warning, ...
            # first step: compile + NCCL init, 20-240 s
            heapq.heappush(heap, (now + rnd.uniform(20, 240), "beat", j, step, stop, 0))
            continue
        if now >= stop:
            send(j, now, kind="end")
            chatter(j, now, [ln for ln in quiet if "TCPStore" in ln or "driver shutting down" in ln])  # shutdown
            apply("progress", tr.evaluate(now), now)
            continue
        if kind == "beat" and count and count % 2000 == 0:
            # checkpoint: a job's takes 30-180 s, +-20 % from one to the next (storage load)
            ck = ck_base.setdefault(j, rnd.uniform(30, 180)) * rnd.lognormvariate(0, 0.2)
            if pause_checkpoints:
                send(j, now, kind="pause")
            else:
                send(j, now, kind="beat", step=count)
                steps += ranks
                count += 1
            heapq.heappush(heap, (now + ck, "after-checkpoint", j, step, stop, count))
            continue
        nxt = None
        if count % 1000 == 500:  # evaluation, announced
            nxt = rnd.uniform(20, 90)
            chatter(j, now, crnd.sample(quiet, 3))  # warnings now and then
        send(j, now, kind="beat", step=count, next_s=nxt)
        steps += ranks
        if tr.dirty:
            apply("progress", tr.evaluate(now), now)
        gap = nxt * rnd.uniform(0.5, 0.95) if nxt else step * rnd.lognormvariate(0, 0.1)
        if not nxt and rnd.random() < 0.003:
            gap = step * rnd.uniform(2.0, 3.0)  # a straggler step
        heapq.heappush(heap, (now + gap, "beat", j, step, stop, count + 1))
    p0 = [f for _t, f in raised if ev.LEVELS[f.event_type] == "P0"]
    p1 = [f for _t, f in raised if ev.LEVELS[f.event_type] == "P1"]
    return {
        "hours": hours,
        "jobs": len(jobs),
        "steps": steps,
        "samples": samples,
        "log_lines": log_lines,
        "p0": len(p0),
        "p1": len(p1),
        "p0_types": sorted({f.event_type for f in p0}),
        "p1_types": sorted({f.event_type for f in p1}),
    }


def proc_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def proc_mem(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                k, v = line.split(":")
                out[k] = int(v.split()[0])
    return out


def cost(seconds, gpus=8):
    tmp = tempfile.mkdtemp(prefix="probe-cost-")
    sink = Sink()
    links = {"%d:%s" % (link, c): 0 for link in range(18) for c in NVLINK_COUNTERS}
    replay = {
        "devices": [
            {
                "index": i,
                "bus_id": "00000000:%02X:00.0" % (0x18 + 0x10 * i),
                "max_gen": 5,
                "max_width": 16,
                "temp_slowdown": 87,
                "temp_max": 90,
                "nvlinks": 18,
            }
            for i in range(gpus)
        ],
        "frames": [
            [
                {
                    "index": i,
                    "gen": 5,
                    "width": 16,
                    "pstate": 0,
                    "temp": 60,
                    "util": 97,
                    "mem_util": 40,
                    "procs": 1,
                    "nvlink": links,
                }
                for i in range(gpus)
            ]
        ],
    }
    with open(os.path.join(tmp, "replay.json"), "w") as f:
        json.dump(replay, f)
    open(os.path.join(tmp, "kern.log"), "w").close()
    open(os.path.join(tmp, "train.log"), "w").close()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with open(os.path.join(tmp, "probe.toml"), "w") as f:
        f.write(
            '[node]\nrack = "A03"\nhost = "bench"\ngateway = "%s"\n[gpu]\nsource = "replay"\nreplay = "%s"\n'
            '[xid]\nsource = "file"\npath = "%s"\n[nccl]\nlogs = ["%s"]\n[progress]\nsocket = "%s"\n'
            '[status]\nlisten = "127.0.0.1:%d"\n'
            % (
                sink.url,
                os.path.join(tmp, "replay.json"),
                os.path.join(tmp, "kern.log"),
                os.path.join(tmp, "train.log"),
                os.path.join(tmp, "p.sock"),
                port,
            )
        )
    p = subprocess.Popen(
        [sys.executable, "-m", "host_client.probes.cli", "-c", os.path.join(tmp, "probe.toml")],
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            if os.path.exists(os.path.join(tmp, "p.sock")):
                break
            time.sleep(0.05)
        time.sleep(1.0)  # past start-up (imports) before measuring
        stop = threading.Event()

        def rank(r):
            b = Beat(path=os.path.join(tmp, "p.sock"), job="train", rank=r, local_rank=r)
            i = 0
            while not stop.is_set():
                b.beat(i)
                i += 1
                stop.wait(0.2)

        threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(gpus)]
        for t in threads:
            t.start()
        c0, w0 = proc_cpu(p.pid), time.monotonic()
        time.sleep(seconds)
        c1, w1 = proc_cpu(p.pid), time.monotonic()
        mem = proc_mem(p.pid)
        stop.set()
        cpu_pct = 100.0 * (c1 - c0) / (w1 - w0)
        return {
            "gpus": gpus,
            "seconds": round(w1 - w0, 1),
            "cpu_pct_of_core": cpu_pct,
            "cpu_pct_per_gpu": cpu_pct / gpus,
            "rss_mib": mem["VmRSS"] / 1024.0,
            "peak_rss_mib": mem["VmHWM"] / 1024.0,
            "events": len(sink.events),
        }
    finally:
        p.terminate()
        p.wait(5)
        sink.server.shutdown()


def beat_cost(n=20000):
    """What beat() costs the training loop, with the daemon's socket present (datagrams drained) and absent."""
    tmp = tempfile.mkdtemp(prefix="probe-beat-")
    path = os.path.join(tmp, "p.sock")
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.bind(path)
    rx.setblocking(False)
    b = Beat(path=path, job="bench", rank=0, local_rank=0)
    t0 = time.perf_counter()
    for i in range(n):
        b.beat(i)
        if i % 64 == 0:
            while True:
                try:
                    rx.recv(4096)
                except BlockingIOError:
                    break
    with_daemon = (time.perf_counter() - t0) / n
    rx.close()
    os.unlink(path)
    b = Beat(path=path, job="bench")
    t0 = time.perf_counter()
    for i in range(n):
        b.beat(i)
    return with_daemon, (time.perf_counter() - t0) / n


def main(argv):
    quick = "--quick" in argv
    trials = 10 if quick else 30
    print("Detection latency to a loopback sink (%d trials per class; default 1 s GPU sampling)" % trials)
    print("%-15s %4s %9s %9s %9s  %-40s %s" % ("class", "n", "mean", "worst", "best", "target", "field tools"))
    for r in latency(trials):
        if r["class"] == "XID_BURST":
            b = r["burst"]
            print(
                "%-15s %4d   first %.3fs, all 8 %.3fs (mean; worst %.3fs), in %.1f requests on average "
                "(8 XID lines written at once)"
                % (
                    "XID x8 at once",
                    len(b),
                    statistics.mean(x[0] for x in b),
                    statistics.mean(x[1] for x in b),
                    max(x[1] for x in b),
                    statistics.mean(x[2] for x in b),
                )
            )
            continue
        print(
            "%-15s %4d %8.3fs %8.3fs %8.3fs  %-40s %s"
            % (r["class"], r["n"], r["mean_s"], r["worst_s"], r["best_s"], TARGET[r["class"]], FIELD[r["class"]])
        )
    print()
    hours = 2 if quick else 8
    for paused, idle_rule, what in (
        (True, True, "checkpoints in pause(), evals announced"),
        (False, True, "same, checkpoints NOT in pause()"),
        (True, False, "same, with issue 7's PCIe rules (no idle rule)"),
    ):
        h = healthy_run(hours, pause_checkpoints=paused, idle_rule=idle_rule)
        print(
            "Healthy loops, %d h virtual (%d jobs x 8 ranks, %d steps, %d samples x 8 GPUs, %d log lines; %s): "
            "false P0 %d %s, false P1 %d %s"
            % (
                h["hours"],
                h["jobs"],
                h["steps"],
                h["samples"],
                h["log_lines"],
                what,
                h["p0"],
                h["p0_types"] or "",
                h["p1"],
                h["p1_types"] or "",
            )
        )
    print()
    secs = 10 if quick else 30
    c = cost(secs)
    print(
        "Daemon cost, %d replayed GPUs x 18 NVLink links, 1 s sampling, %d ranks beating at 5 Hz, %.0f s:"
        % (c["gpus"], c["gpus"], c["seconds"])
    )
    print(
        "  CPU %.3f %% of one core (%.4f %% per GPU); RSS %.1f MiB (peak %.1f MiB); events sent %d"
        % (c["cpu_pct_of_core"], c["cpu_pct_per_gpu"], c["rss_mib"], c["peak_rss_mib"], c["events"])
    )
    print("  (replayed readings: real NVML adds its own call cost per sample; see docs/PROBES.md)")
    w, wo = beat_cost()
    print(
        "beat() in the training loop: %.1f us per call with the daemon listening, %.1f us without" % (w * 1e6, wo * 1e6)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
