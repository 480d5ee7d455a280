"""Issue 36 end to end: the real `sentinel-probe` (its console script, in its own process) follows a training log on
disk and sends its events to the real gateway, which drives the emulator. A log holding five failures told in many
lines each (NCCL's WARN, PyTorch's exception, the traceback, torchelastic's summary, interleaved ranks, lines with no
rank, a store that never answered) and healthy chatter between them gives exactly five events, each at its level."""

import json
import os
import time
import urllib.request

import pytest

pytest.importorskip("emulator.harness")

from deploy_live import REPLAY
from opcheck import script
from test_probes_e2e import chain, first_seen  # noqa: F401  (chain is a fixture)

from testkit.net import free_port

PROBE = script("sentinel-probe", "host_client.probes.cli")

# one failure each, told the way the real tools tell it (the corpus holds the public lines these follow)
RANK3_PEER_LOST = [
    "gpu-node-2:4288:4421 [3] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
    "gpu-node-5<51159>",
    "[rank3]:[E207 19:37:09.983600771 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 3] Process "
    "group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, "
    "NCCL version 2.21.5",
    "[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
    "remote process exited or there was a network error, NCCL version 2.21.5",
    "[rank3]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
]
INTERLEAVED = [
    "\x1b[31m[rank1]:[E1 ProcessGroupNCCL.cpp:1] [Rank 1] Process group watchdog thread terminated with exception: "
    "CUDA error: unspecified launch failure\x1b[0m",
    "[rank2]:[E1 ProcessGroupNCCL.cpp:1] [Rank 2] Process group watchdog thread terminated with exception: CUDA error: "
    "unspecified launch failure",
    "[rank1]: RuntimeError: CUDA error: unspecified launch failure",
    "[rank2]: RuntimeError: CUDA error: unspecified launch failure",
    "[rank1]: Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
]
SUMMARY = [
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "train.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "[1]:",
    "  rank      : 1 (local_rank: 1)",
    "  exitcode  : -15 (pid: 7001)",
    "  traceback : Signal 15 (SIGTERM) received by PID 7001",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2025-07-10_21:46:37",
    "  host      : gpu-node-2",
    "  rank      : 3 (local_rank: 3)",
    "  exitcode  : -6 (pid: 7003)",
    "  error_file: <N/A>",
    "  traceback : Signal 6 (SIGABRT) received by PID 7003",
    "============================================================",
]
OOM_NO_RANK = [
    "Traceback (most recent call last):",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB",
    "terminate called after throwing an instance of 'c10::Error'",
]
STORE = [
    "[W socket.cpp:601] [c10d] The client socket has failed to connect to [master-0]:29500 (errno: 111).",
    "[E108 20:04:34.467642512 socket.cpp:957] [c10d] The client socket has timed out after 900s while trying to "
    "connect to (10.1.2.3, 29500).",
    "torch.distributed.DistNetworkError: The client socket has timed out after 900s while trying to connect to "
    "(10.1.2.3, 29500).",
]
HEALTHY = [
    "gpu-node-2:4288:4288 [3] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
    "gpu-node-2:4288:4421 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] via P2P/IPC",
    "gpu-node-2:4288:4421 [3] NCCL INFO include/alloc.h:246 -> 1",
    "train.py:196: FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
    "`torch.amp.GradScaler('cuda', args...)` instead.",
    "step 1200 | loss 2.31 | val error 0.04 | lr 3e-4",
    "[W CUDAAllocatorConfig.cpp:28] CUDA error: out of memory; retrying the allocation after freeing cached blocks",
]
# the log as the file gets it: healthy chatter between the failures, a progress bar's CR, a CRI line prefix
LOG = (
    HEALTHY[:3]
    + RANK3_PEER_LOST
    + HEALTHY[3:5]
    + INTERLEAVED
    + ["2025-07-10T21:46:37.000000001Z stderr F " + s for s in SUMMARY]
    + HEALTHY[5:]
    + ["Epoch 3:  41%|████      | 410/1000 [03:12<04:36]\r" + OOM_NO_RANK[0]]
    + OOM_NO_RANK[1:]
    + STORE
)
WANT = {
    # the first sign is NCCL's WARN, which names its process (gpu-node-2:4288 [3]) but no rank: the event goes then,
    # and rank 3's exception, its ncclRemoteError and the launcher's summary join it
    ("NCCL_PEER_LOST", None),
    ("CUDA_ERROR", 1),
    ("CUDA_ERROR", 2),
    ("PROGRAM_ERROR", None),
    ("RENDEZVOUS_FAILED", None),
}


def _status(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/status" % port, timeout=2) as r:
        return json.loads(r.read())


def test_real_probe_following_a_log_gives_one_event_per_failure(tmp_path, chain):  # noqa: F811
    import subprocess

    h, gw = chain
    log = tmp_path / "train.log"
    log.write_text("")
    port = free_port()
    cfg = tmp_path / "probe.toml"
    cfg.write_text(
        '[node]\nrack = "B05"\nhost = "gpu-worker-08"\ngateway = "%s"\n\n[gpu]\nsource = "replay"\nreplay = "%s"\n'
        'util_drop = false\n\n[xid]\nsource = "none"\n\n[nccl]\nlogs = ["%s"]\n\n[progress]\nsocket = "%s"\n\n'
        '[status]\nlisten = "127.0.0.1:%d"\n' % (gw.url, REPLAY, log, tmp_path / "p.sock", port)
    )
    p = subprocess.Popen(PROBE + ["-c", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:  # the daemon is up and follows the log
            try:
                st = _status(port)
                if any(f["name"] == str(log) for f in st["followers"]):
                    break
            except OSError:
                pass
            assert p.poll() is None, p.stderr.read()
            assert time.monotonic() < deadline, "sentinel-probe never answered /status"
            time.sleep(0.1)
        time.sleep(0.3)  # the follower is at the end of the file
        with open(log, "a") as f:
            for line in LOG:
                f.write(line + "\n")
                f.flush()
        first_seen(h, "B05:gpu-worker-08:NCCL_PEER_LOST", "P0", 10)
        first_seen(h, "B05:gpu-worker-08:PROGRAM_ERROR", "P1", 10)  # the program's own OOM: P1, not a page
        first_seen(h, "B05:gpu-worker-08:RENDEZVOUS_FAILED", "P0", 10)
        time.sleep(1.0)  # anything the probe would still send about these lines is sent by now
        st = _status(port)
        kinds = ("NCCL_PEER_LOST", "NCCL_ERROR", "CUDA_ERROR", "PROGRAM_ERROR", "JOB_FAILED", "RENDEZVOUS_FAILED")
        sent = [e for e in st["recent"] if e["event_type"] in kinds]
        assert {(e["event_type"], e.get("rank")) for e in sent} == WANT, sent
        assert len(sent) == len(WANT), [e["detail"] for e in sent]
        assert sum(v for k, v in st["events"].items() if k in kinds) == len(WANT), st["events"]
        (peer,) = [e for e in sent if e["event_type"] == "NCCL_PEER_LOST"]
        assert peer["peer"] == "gpu-node-5<51159>" and "gpu-node-2" in peer["detail"]
        (store,) = [e for e in sent if e["event_type"] == "RENDEZVOUS_FAILED"]
        assert store["peer"] == "10.1.2.3:29500"
        assert st["sender"]["rejected"] == {} and st["sender"]["dropped"] == 0
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    assert p.returncode is not None
    assert os.path.exists(cfg)
