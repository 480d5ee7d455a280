"""The probe's pure parts against the failures that end a job: the restarted job clears its stall at once, the
forms already claimed in all their shapes (nvidia-smi's "GPU<n>: <bus>" row, MIG Xid lines), the dump-signal line
folded into the rank's own timeout, and one event per (log, rank) for a job-killing failure however many lines it
prints."""

from hypothesis import given, settings
from hypothesis import strategies as st

from host_client.probes import events, nccl, xid
from host_client.probes.gpu_checks import GpuChecker
from host_client.probes.gpu_source import parse_smi_csv
from host_client.probes.progress import ProgressRules, ProgressTracker


def _tracker(dead, **kw):
    return ProgressTracker(ProgressRules(**kw), alive=lambda pid: pid not in dead)


def _beat(tr, t, pid, job="train", **extra):
    tr.message(dict({"kind": "beat", "job": job, "pid": pid, "step": int(t * 10)}, **extra), t)


def _stall(tr, pids, job="train"):
    for i in range(5):
        for pid in pids:
            _beat(tr, i * 0.1, pid, job)
    fs = tr.evaluate(3.0)
    assert [f.extra["revision"] for f in fs] == ["stalled"]


def test_restart_faster_than_the_death_check_clears_at_the_new_process_first_message():
    # the hung process is killed and its replacement beats before the 0.5 s recheck saw the death (torchelastic,
    # Slurm requeue): before issue 24 the stall then stood "died while stalled" for dead_clear_s
    for first in ("beat", "start"):
        dead = set()
        tr = _tracker(dead, dead_clear_s=300, early_floor_s=1)
        _stall(tr, [7])
        dead.add(7)  # SIGKILL, not yet noticed
        tr.message({"kind": first, "job": "train", "pid": 8}, 3.1)
        assert tr.dirty  # the daemon re-evaluates at once
        assert tr.evaluate(3.1) == [], first


def test_several_ranks_on_one_node_restarted_clear_when_the_first_new_one_beats():
    dead = set()
    tr = _tracker(dead, dead_clear_s=300, early_floor_s=1)
    _stall(tr, [7, 9, 11])  # three ranks of one job: one condition
    (f,) = tr.evaluate(3.6)
    assert f.extra["revision"] == "stalled"
    dead.update((7, 9))  # two of them seen dead by the recheck, the third killed just now
    (f,) = tr.evaluate(4.2)
    dead.add(11)
    _beat(tr, 4.3, 20)  # the restarted job's first rank
    assert tr.evaluate(4.3) == []


def test_a_healthy_rank_of_the_job_beating_clears_a_dead_stalled_rank_not_a_live_one():
    dead = set()
    tr = _tracker(dead, dead_clear_s=300, early_floor_s=1)
    _stall(tr, [7])
    _beat(tr, 3.2, 8)  # another process of the job, registered while 7 is stalled and alive
    assert [f.extra["revision"] for f in tr.evaluate(3.2)] == ["stalled"]  # 7 is alive: still a stall
    dead.add(7)
    _beat(tr, 3.3, 8)  # 8 beats again; 7 died meanwhile
    assert tr.evaluate(3.3) == []


def test_a_job_that_stays_dead_clears_only_after_dead_clear_s():
    dead = set()
    tr = _tracker(dead, dead_clear_s=60, early_floor_s=1)
    _stall(tr, [7])
    dead.add(7)
    (f,) = tr.evaluate(3.6)
    assert f.extra["revision"] == "died"
    _beat(tr, 4.0, 8, job="other-job")  # another job beating is no restart of this one
    assert tr.evaluate(62.0) and tr.evaluate(63.7) == []


def test_smi_index_first_row_is_gpu_lost_with_its_bus_in_any_case():
    # FACTS.md section 10: current drivers print the index before the bus id
    for line, bus in (
        ("Unable to determine the device handle for GPU0: 0000:01:00.0: Unknown Error", "0000:01:00.0"),
        ("Unable to determine the device handle for GPU1: 0000:C3:00.0: Unknown Error", "0000:C3:00.0"),
    ):
        text = "0, 00000000:18:00.0, 5, 16, 60, 97, P0, 5, 16, 550.00, 700.00\n" + line + "\n"
        devices, readings = parse_smi_csv(text)
        lost = [d for d in devices if d["lost"]]
        assert [(d["bus_id"], d["error"]) for d in lost] == [(bus, "Unknown Error")]
        fs = [f for f in GpuChecker(devices).check(readings, 0.0) if f.event_type == events.GPU_LOST]
        assert [(f.extra["bus_id"], f.extra["pci"]) for f in fs] == [(bus, xid.pci_text(xid.pci_key(bus)))]
    devices, _ = parse_smi_csv("Unable to determine the device handle for GPU3: 0000:81:00.0: Unknown Error\n")
    assert devices[0]["index"] == 3  # the printed index, not the row's place


def test_mig_xid_keeps_gpu_and_compute_instance():
    x = xid.parse("NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 13, pid=9, name=a, Graphics Exception")
    assert (x.xid, xid.pci_text(x.pci), x.gpu_instance, x.compute_instance) == (13, "0000:3b:00", 1, 2)
    f = xid.finding(x, 4)
    assert f.extra["gpu_instance"] == 1 and "MIG GPU instance 1" in f.detail
    assert xid.parse("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 48, pid=1, DBE").severity == "fatal"


def test_dump_signal_with_pending_work_joins_the_ranks_own_timeout():
    log = nccl.NcclLog()
    tail = " and we will try our best to dump the debug info. Last enqueued NCCL work: 9, last completed NCCL work: 8."
    a = log.finding(
        "[rank2]:[E1 ProcessGroupNCCL.cpp:1] [PG 0 Rank 2] Received a dump signal due to a collective "
        "timeout from  rank 6" + tail,
        "job.log",
    )
    b = log.finding(
        "[rank2]:[E1 ProcessGroupNCCL.cpp:2] [Rank 2] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600020 milliseconds before timing "
        "out.",
        "job.log",
    )
    assert a.key == b.key and a.extra["from_rank"] == 6 and b.extra["op"] == "ALLREDUCE"
    c = log.finding(
        "[rank3]:[E1 ProcessGroupNCCL.cpp:1] [PG 0 Rank 3] Received a dump signal due to a collective "
        "timeout from  rank 6 and we will try our best to dump the debug info. Last enqueued NCCL work: 9, "
        "last completed NCCL work: 9.",
        "job.log",
    )
    assert c.event_type == events.NCCL_TIMEOUT and c.extra["seq"] is None and "had finished" in c.detail


def test_one_failure_one_event_per_log_and_rank():
    log = nccl.NcclLog()
    lines = [
        "[rank5]:[E207 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 5] Process group watchdog thread "
        "terminated with exception: NCCL error: remote process exited or there was a network error, NCCL 2",
        "[rank5]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
        "prematurely.",
        "[rank5]: torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error, NCCL version 2",
    ]
    keys = {log.finding(ln, "a.log").key for ln in lines}
    assert len(keys) == 1
    assert log.finding(lines[0].replace("rank5", "rank6"), "a.log").key not in keys
    assert log.finding(lines[0], "b.log").key not in keys
    f = log.finding(
        "host1:11:12 [3] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer n2<51159>",
        "a.log",
    )
    assert (f.event_type, f.extra["peer"], f.extra["cuda_dev"], f.key[-3:-1]) == (
        events.NCCL_PEER_LOST,
        "n2<51159>",
        3,
        ("host1", 11),
    )


def test_failure_parse_never_raises_on_odd_text():
    for text in ("", "NCCL", "nccl" * 1000, "CUDA error: ", "Net : \x00", "socketProgress" + "\xff" * 10):
        nccl.parse_failure(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("NCcl WARN:<>[]0123456789rank.socketProgressNet")), max_size=200))
def test_failure_parse_never_raises_property(text):
    f = nccl.parse_failure(text)
    assert f is None or f.cls in nccl.CLASSES
