"""Issue 24 end to end on loopback, through the real probe daemon, the gateway and the emulator (the harness of
tests/test_probes_e2e.py): a job-killing failure line appended to a followed training log lights the emulator within
1 s at its class's level, and a stalled job that is killed and restarted under the same job name clears within 2 s of
the restarted process's first beat, however the job name is given, with one rank or several on the node."""

import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("emulator.harness")

from test_probes_e2e import chain, first_seen, probe  # noqa: F401  (chain is a fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# one real line per new class (tests/fixtures/probes/corpus.jsonl has them with their sources), and the two forms
# of already-claimed lines issue 24 adds: the flight recorder's dump signal and a MIG Xid
CLASSES = [
    (
        "NCCL_PEER_LOST",
        "P0",
        "ng30903:3063025:3066048 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
        "ng30903-ib.narval.calcul.quebec<51159>",
    ),
    (
        "NCCL_ERROR",
        "P0",
        "[rank7]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
    ),
    (
        "CUDA_ERROR",
        "P0",
        "[rank0]:[E504 23:32:59.338859795 ProcessGroupNCCL.cpp:1896] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process "
        "group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
    ),
    (
        "NCCL_TIMEOUT",
        "P0",
        "[rank5]:[E723 01:58:45.667329643 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank 5] Received a "
        "dump signal due to a collective timeout from  rank 2 and we will try our best to dump the debug info. Last "
        "enqueued NCCL work: 136, last completed NCCL work: 136.",
    ),
]


def _probe_with_log(tmp_path, gw, rack, log):
    from host_client.probes import config
    from host_client.probes.daemon import Daemon

    raw = {
        "node": {"rack": rack, "host": "gpu-worker-08", "gateway": gw.url},
        "gpu": {"util_drop": False},
        "xid": {"source": "none"},
        "nccl": {"logs": [str(log)]},
        "progress": {"socket": str(tmp_path / ("p-%s.sock" % rack))},
        "status": {"listen": ""},
    }
    return Daemon(config.build(raw)).start()


@pytest.mark.serial  # asserts a latency bound: run alone (tools/run-tests.sh)
@pytest.mark.parametrize("etype,level,line", CLASSES, ids=[c[0] for c in CLASSES])
def test_failure_line_lights_the_emulator_within_1s_at_its_level(tmp_path, chain, etype, level, line):  # noqa: F811
    h, gw = chain
    log = tmp_path / "train-rank.log"
    log.write_text("")
    d = _probe_with_log(tmp_path, gw, "B01", log)
    try:
        time.sleep(0.3)  # the follower is at the end of the file
        with open(log, "a") as f:
            t0 = time.monotonic()
            f.write(line + "\n")
        t, st = first_seen(h, "B01:gpu-worker-08:%s" % etype, level, 3)
        print("e2e %s shown %.3fs after the line was written" % (etype, t - t0))
        assert t - t0 < 1.0, "%s shown after %.2fs" % (etype, t - t0)
        assert st["shown"]["pattern"] == "flash"  # P0: red, flashing, spoken
        (ev,) = [e for e in d.recent if e["event_type"] == etype]
        assert ev["log"] == str(log)
    finally:
        d.close()


def test_mig_xid_line_reaches_the_emulator_with_its_gpu_instance(tmp_path, chain):  # noqa: F811
    from probe_fakes import FakeSource

    h, gw = chain
    d, kern = probe(tmp_path, gw, "B02", source=FakeSource(count=8))
    try:
        time.sleep(0.3)
        with open(kern, "a") as f:
            f.write("NVRM: Xid (PCI:0000:58:00 GPU-I:05): 95, pid=7062, Uncontained: LTC TAG (0x2, 0x1). RST: Yes\n")
        first_seen(h, "B02:gpu-worker-08:XID_FATAL:gpu4", "P0", 3)  # bus 0x58 is the fake's GPU 4
        (ev,) = [e for e in d.recent if e["event_type"] == "XID_FATAL"]
        assert ev["gpu_instance"] == 5 and ev["xid"] == 95
    finally:
        d.close()


# --- restart clears (issue 24, point 3) -------------------------------------------------------------------------

_WORKER = """
import os, sys, time
sys.path.insert(0, %(root)r)
from host_client.beat import Beat
b = Beat(path=%(sock)r, **%(kw)r)
if %(gated)r:
    sys.stdin.readline()  # imported and waiting: released the moment the old generation is killed
b.start()
print(time.monotonic(), flush=True)  # when this process first said it was there
for i in range(%(beats)d):
    b.beat(i)
    time.sleep(0.1)
time.sleep(600)  # hung in a collective (the first generation) or still stepping slowly: the test ends it
"""

_JOB_ENV = ("SENTINEL_JOB", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")


def _worker(sock, env, kw, beats, rank, gated=False):
    e = {k: v for k, v in os.environ.items() if k not in _JOB_ENV}
    e.update(env, RANK=str(rank), LOCAL_RANK=str(rank))
    src = _WORKER % {"root": ROOT, "sock": sock, "kw": kw, "beats": beats, "gated": gated}
    return subprocess.Popen(
        [sys.executable, "-c", src], env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


NAMES = [
    ("argument", {}, {"job": "llama-70b"}),
    ("SENTINEL_JOB", {"SENTINEL_JOB": "llama-70b"}, {}),
    ("Slurm", {"SLURM_JOB_ID": "4242"}, {}),
    ("torchelastic", {"TORCHELASTIC_RUN_ID": "elastic-run-7"}, {}),
]


@pytest.mark.serial  # asserts a latency bound: run alone (tools/run-tests.sh)
@pytest.mark.parametrize("ranks", [1, 2], ids=["one-rank", "two-ranks"])
@pytest.mark.parametrize("how,env,kw", NAMES, ids=[n[0] for n in NAMES])
def test_killed_and_restarted_job_clears_within_2s_of_its_first_beat(tmp_path, chain, how, env, kw, ranks):  # noqa: F811
    h, gw = chain
    d, _ = probe(tmp_path, gw, "B03", xid={"source": "none"}, progress={"dead_clear_s": 300.0})
    sock = d.cfg["progress"]["socket"]
    key = "B03:gpu-worker-08:PROGRESS_STALL"
    old = [_worker(sock, env, kw, 8, r) for r in range(ranks)]
    new = []
    try:
        new = [_worker(sock, env, kw, 3000, r, gated=True) for r in range(ranks)]
        first_seen(h, key, "P0", 20)  # 8 steps of 0.1 s learned, then silence: the stall
        time.sleep(0.6)  # the stall stands a while before the job is torn down
        for p in old:  # torchelastic / Slurm requeue: kill the hung generation, start the next one at once (sooner
            p.kill()  # than the probe's 0.5 s death check of a stalled process)
        for p in old:
            p.wait()
        for p in new:
            p.stdin.write("go\n")
            p.stdin.flush()
        t_first = min(float(p.stdout.readline()) for p in new)
        h.wait_for(lambda s: all(a["level"] == "NORMAL" for a in s["active"] if a["key"] == key), 10, 0.01)
        t = time.monotonic()
        print(
            "e2e restart (%s, %d rank(s)) cleared %.3fs after the new process's first beat" % (how, ranks, t - t_first)
        )
        assert t - t_first < 2.0, "the stall stood %.2fs after the restarted process beat" % (t - t_first)
        assert [e["event_type"] for e in d.recent if e.get("recovers") == "PROGRESS_STALL"] == ["RECOVERED"]
    finally:
        for p in old + new:
            p.kill()
            p.wait()
        d.close()
