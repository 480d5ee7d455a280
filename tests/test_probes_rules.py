"""GPU rules, the progress watchdog and the event ledger: exact events, and none while a condition persists."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from probe_fakes import FakeSource

from host_client.probes import config, events
from host_client.probes.gpu_checks import GpuChecker, GpuRules
from host_client.probes.gpu_source import SEED_FIELDS, ReplaySource, SourceError, parse_smi_csv
from host_client.probes.progress import ProgressRules, ProgressTracker

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "probes")


def run(source, rules=None, samples=None, dt=1.0):
    """Drive a checker through a ledger like the daemon does; returns [(t, type, gpu, recovers)]."""
    checker = GpuChecker(source.devices(), rules or GpuRules())
    led = events.Conditions()
    out = []
    n = samples or len(source._frames)
    for i in range(n):
        t = i * dt
        raised, cleared = led.update("gpu", checker.check(source.sample(), t), t)
        out += [(i, f.event_type, f.gpu_index, None) for f in raised]
        out += [(i, events.RECOVERED, f.gpu_index, f.event_type) for f in cleared]
    return out, led


def test_nvml_replay_exact_events():
    got, led = run(ReplaySource(os.path.join(FIX, "nvml_replay.json")), samples=14)
    assert got == [
        (2, "PCIE_DOWNGRADE", 3, None),  # busy GPU at Gen3 x4, second sample
        (5, "NVLINK_ERROR", 2, None),  # CRC flit counter increased
        (7, "THERMAL", 1, None),  # own slowdown threshold 87 C, second sample
        (9, "RECOVERED", 1, "THERMAL"),
        (9, "RECOVERED", 3, "PCIE_DOWNGRADE"),
    ]
    # nothing about GPU 0 idling at Gen1, nor its one P0 sample at Gen1 while the link retrained
    assert [f.event_type for f in led.active()] == ["NVLINK_ERROR"]


def test_nvml_replay_detail():
    src = ReplaySource(os.path.join(FIX, "nvml_replay.json"))
    checker = GpuChecker(src.devices())
    for i in range(3):
        fs = checker.check(src.sample(), float(i))
    (f,) = fs
    assert f.detail == "PCIe link Gen3 x4, expected Gen5 x16"
    assert f.extra == {"link_gen": 3, "link_width": 4, "max_gen": 5, "max_width": 16}


def _smi(name, fields):
    with open(os.path.join(FIX, name)) as f:
        devices, readings = parse_smi_csv(f.read(), fields)

    class Src:
        _frames = [readings] * 3

        def devices(self):
            return devices

        def sample(self):
            return [dict(r) for r in readings]

    return Src()


def test_smi_full_replay_events():
    from host_client.probes.gpu_source import SMI_FIELDS

    got, _ = run(_smi("smi_full.csv", SMI_FIELDS))
    # idle GPU 0 (P8, Gen1) and GPU 2 (Gen4 in a Gen4 system) are fine; 84 C > the seed's 82 C
    assert got == [(1, "PCIE_DOWNGRADE", 3, None), (1, "THERMAL", 4, None)]


def test_smi_seed_replay_events():
    got, _ = run(_smi("smi_seed.csv", SEED_FIELDS))
    # the seed's own rule would flag GPU 0 (Gen1 < 4); without a P-state we cannot tell power saving from a fault
    assert got == [(1, "PCIE_DOWNGRADE", 3, None), (1, "THERMAL", 4, None)]


def test_idle_is_not_a_fault_pcie_rules_judge_only_under_load():
    src = FakeSource(count=5)
    src.idle(0, gen=1)  # idle H100 in P0 at Gen1: power saving (they sit in P0)
    src.idle(1, width=8)  # idle in P0 at x8: "may be reduced when the GPU is not in use"
    src.set(2, width=8)  # busy (97 %, 560 W) at x8: a fault
    src.set(3, gen=3, util=2, power_w=400.0)  # 2 % utilisation but 400 W of 700 (a memory-bound kernel): loaded
    src.set(4, gen=1, util=None, power_w=None, pstate=8)  # no load signal, not in P0: seed rule, gen not judged
    checker = GpuChecker(src.devices())
    for t in range(5):
        fs = checker.check(src.sample(), t)
    assert [(f.event_type, f.gpu_index) for f in fs] == [("PCIE_DOWNGRADE", 2), ("PCIE_DOWNGRADE", 3)]


def test_load_needs_n_consecutive_loaded_samples():
    src = FakeSource(count=1)
    src.set(0, width=8)
    checker = GpuChecker(src.devices())
    assert not checker.check(src.sample(), 0)  # one loaded sample at x8
    src.idle(0, width=8)
    assert not checker.check(src.sample(), 1)  # idle: restarts the count
    src.set(0, util=97, power_w=560.0, procs=1)
    assert not checker.check(src.sample(), 2)
    assert [f.event_type for f in checker.check(src.sample(), 3)] == ["PCIE_DOWNGRADE"]


def test_seed_columns_without_load_signals_keep_the_seed_rules():
    src = FakeSource(count=2)
    src.set(0, util=None, power_w=None, pstate=None, width=8)  # the seed's five nvidia-smi columns: width judged
    src.set(1, util=None, power_w=None, pstate=0, gen=3)  # P0 and no load signal: the seed's P0 rule
    checker = GpuChecker(src.devices())
    for t in range(3):
        fs = checker.check(src.sample(), t)
    assert [(f.event_type, f.gpu_index) for f in fs] == [("PCIE_DOWNGRADE", 0), ("PCIE_DOWNGRADE", 1)]


def test_gen_downgrade_held_while_idle_until_seen_good():
    src = FakeSource(count=1)
    checker = GpuChecker(src.devices())
    src.set(0, gen=3)
    for t in range(2):
        fs = checker.check(src.sample(), t)
    assert fs and fs[0].event_type == "PCIE_DOWNGRADE"
    src.idle(0, pstate=8, gen=1)  # goes idle: cannot judge, keeps the condition
    for t in range(2, 6):
        assert checker.check(src.sample(), t)
    src.set(0, pstate=0, gen=5)
    assert checker.check(src.sample(), 6)  # one good sample is not enough
    assert not checker.check(src.sample(), 7)


def test_thermal_fallback_and_hysteresis():
    src = FakeSource(count=1, temp_slowdown=None)
    checker = GpuChecker(src.devices())
    src.set(0, temp=82)
    assert not checker.check(src.sample(), 0) and not checker.check(src.sample(), 1)  # seed: strictly above 82
    src.set(0, temp=83)
    checker.check(src.sample(), 2)
    (f,) = checker.check(src.sample(), 3)
    assert f.event_type == "THERMAL" and f.extra["limit_c"] == 82.0
    src.set(0, temp=80)  # within hysteresis (82 - 3 = 79): still hot
    assert checker.check(src.sample(), 4) and checker.check(src.sample(), 5)
    src.set(0, temp=78)
    checker.check(src.sample(), 6)
    assert not checker.check(src.sample(), 7)


def test_nvlink_counter_reset_is_not_an_error_and_quiet_clears():
    src = FakeSource(count=1, nvlinks=1)
    checker = GpuChecker(src.devices(), GpuRules(nvlink_quiet_s=10))
    checker.check(src.sample(), 0)
    src.set(0, nvlink={"0:replay": 5, "0:recovery": 0, "0:crc_flit": 0, "0:crc_data": 0})
    (f,) = checker.check(src.sample(), 1)
    assert f.event_type == "NVLINK_ERROR" and f.detail == "NVLink errors increasing: link 0 replay +5"
    assert checker.check(src.sample(), 10.5)
    assert not checker.check(src.sample(), 11)
    src.set(0, nvlink={"0:replay": 0, "0:recovery": 0, "0:crc_flit": 0, "0:crc_data": 0})  # GPU reset
    assert not checker.check(src.sample(), 12)


def test_util_drop_only_with_processes_attached():
    src = FakeSource(count=2)
    checker = GpuChecker(src.devices(), GpuRules(util_drop_s=5))
    for t in range(10):
        checker.check(src.sample(), t)
    src.set(0, util=0)  # hung: process still attached
    src.set(1, util=0, procs=0)  # job finished
    seen = []
    for t in range(10, 20):
        seen.append([(f.event_type, f.gpu_index) for f in checker.check(src.sample(), t)])
    assert seen[4] == [] and seen[5] == [("GPU_UTIL_DROP", 0)] and seen[9] == [("GPU_UTIL_DROP", 0)]
    src.set(0, util=97)
    assert checker.check(src.sample(), 20)
    assert not checker.check(src.sample(), 21)


def test_util_drop_needs_busy_before():
    src = FakeSource(count=1)
    src.set(0, util=2)
    checker = GpuChecker(src.devices(), GpuRules(util_drop_s=2))
    assert not any(checker.check(src.sample(), t) for t in range(60))


def test_replay_rejects_bad_files(tmp_path):
    p = tmp_path / "r.json"
    p.write_text('{"devices": []}')
    with pytest.raises(SourceError, match="non-empty 'frames'"):
        ReplaySource(str(p))
    with pytest.raises(SourceError, match="cannot read NVML replay"):
        ReplaySource(str(tmp_path / "missing.json"))


# --- progress ---------------------------------------------------------------------------------------------------


def beat(tr, t, step=None, job="train", pid=100, kind="beat", rank=0, local_rank=0):
    assert tr.message({"kind": kind, "job": job, "pid": pid, "step": step, "rank": rank, "local_rank": local_rank}, t)


def test_200ms_loop_flagged_well_within_2s():
    tr = ProgressTracker(alive=lambda pid: True)
    for i in range(20):
        beat(tr, i * 0.2, i)
    last = 19 * 0.2
    assert tr.next_deadline() == pytest.approx(last + 0.8)  # 4 x 200 ms, above the 0.5 s floor
    assert tr.evaluate(last + 0.79) == []
    (f,) = tr.evaluate(last + 0.81)
    assert f.event_type == "PROGRESS_STALL" and f.gpu_index == 0 and f.extra["step"] == 19
    beat(tr, last + 3.0, 20)
    assert tr.evaluate(last + 3.0) == []
    # the stall's gap was not learned as a step time
    assert tr.snapshot(last + 3.0)[0]["step_time_s"] == pytest.approx(0.2)


def test_floor_and_ceiling():
    tr = ProgressTracker(ProgressRules(k=4, floor_s=0.5, ceiling_s=30), alive=lambda pid: True)
    for i in range(10):
        beat(tr, i * 0.01, i, pid=1)
        beat(tr, i * 60.0, i, pid=2, job="slow")
    limits = {j["job"]: j["limit_s"] for j in tr.snapshot(600)}
    assert limits == {"train": 0.5, "slow": 30.0}


def test_warmup_uses_ceiling_and_pause_lifts_limit():
    tr = ProgressTracker(ProgressRules(ceiling_s=100), alive=lambda pid: True)
    beat(tr, 0.0, 0)
    beat(tr, 1.0, 1)
    assert tr.evaluate(50) == []  # one interval: not learned yet
    for i in range(2, 6):
        beat(tr, float(i), i)
    beat(tr, 6.0, kind="pause")
    assert tr.evaluate(60) == []  # checkpointing
    beat(tr, 61.0, kind="resume")
    assert tr.evaluate(64) == []
    (f,) = tr.evaluate(65.1)
    assert "limit 4.0s" in f.detail


def test_job_of_many_ranks_is_one_condition_and_end_forgets():
    tr = ProgressTracker(alive=lambda pid: True)
    for i in range(5):
        for r in range(4):
            beat(tr, i * 0.2 + r * 0.001, i, pid=200 + r, rank=r, local_rank=r)
    fs = tr.evaluate(5.0)
    assert len(fs) == 1 and fs[0].extra["stalled_ranks"] == [0, 1, 2, 3] and "4 processes" in fs[0].detail
    for r in range(4):
        beat(tr, 5.1, kind="end", pid=200 + r)
    assert tr.evaluate(6.0) == [] and tr.next_deadline() is None


def test_dead_process_is_forgotten_without_alarm():
    alive = {100: True}
    tr = ProgressTracker(alive=lambda pid: alive[pid])
    for i in range(5):
        beat(tr, i * 0.2, i)
    alive[100] = False
    assert tr.evaluate(10.0) == [] and tr.snapshot(10.0) == []


@pytest.mark.parametrize(
    "msg",
    [
        None,
        [],
        {"job": "x"},
        {"job": "", "pid": 1},
        {"job": "x", "pid": "1"},
        {"job": "x", "pid": 1, "kind": "explode"},
        {"job": "x" * 200, "pid": 1},
        {"job": "x", "pid": True},
    ],
)
def test_bad_beat_messages_are_counted_not_applied(msg):
    tr = ProgressTracker()
    assert tr.message(msg, 0.0) is False
    assert tr.rejected == 1 and tr.snapshot(0.0) == []


@settings(max_examples=50, deadline=None)
@given(st.floats(0.01, 120.0), st.integers(3, 40), st.floats(1.5, 10.0))
def test_stall_limit_is_clamped_multiple(step, n, k):
    rules = ProgressRules(k=k, floor_s=0.5, ceiling_s=600)
    tr = ProgressTracker(rules, alive=lambda pid: True)
    for i in range(n + 1):
        beat(tr, i * step, i)
    last = n * step
    expect = min(max(k * step, 0.5), 600)
    assert tr.next_deadline() == pytest.approx(last + expect, rel=1e-6)
    assert tr.evaluate(last + expect * 0.99) == []
    assert len(tr.evaluate(last + expect * 1.01 + 1e-6)) == 1


# --- ledger, body, config ------------------------------------------------------------------------------------------


def test_conditions_raise_once_clear_once():
    led = events.Conditions()
    f = events.Finding(("pcie", 3), events.PCIE_DOWNGRADE, 3, "x")
    assert led.update("gpu", [f]) == ([f], [])
    for _ in range(5):
        assert led.update("gpu", [events.Finding(("pcie", 3), events.PCIE_DOWNGRADE, 3, "y")]) == ([], [])
    assert led.update("gpu", []) == ([], [f])  # the finding first reported is the one that clears
    assert led.update("gpu", []) == ([], [])


def test_oneshots_hold_and_prune():
    o = events.Oneshots(10, capacity=3)
    assert o.admit("a", 0) and not o.admit("a", 9.9) and o.admit("a", 10)
    for k in "bcdef":
        o.admit(k, 11)
    assert len(o._seen) <= 3 and o.suppressed == 1


def test_event_body_rfc_fields_first():
    ident = events.Identity("A03", "gpu-worker-08")
    f = events.Finding(
        ("xid", 3, 79),
        events.XID_FATAL,
        3,
        "XID 79 (fatal): GPU has fallen off the bus.",
        xid=79,
        severity="fatal",
        pci="0000:5d:00",
    )
    ev = events.body(ident, f, 97.0, now=1000.0)
    assert list(ev)[:5] == ["cluster_rack", "node_host", "event_type", "gpu_index", "gpu_util"]
    assert (ev["cluster_rack"], ev["node_host"], ev["event_type"], ev["gpu_index"], ev["gpu_util"]) == (
        "A03",
        "gpu-worker-08",
        "XID_FATAL",
        3,
        97.0,
    )
    assert ev["xid"] == 79 and ev["state"] == "firing" and ev["key"] == "gpu-worker-08:xid:3:79"
    rec = events.body(ident, f, None, recovered=True)
    assert rec["event_type"] == "RECOVERED" and rec["recovers"] == "XID_FATAL" and rec["gpu_util"] is None
    assert rec["state"] == "recovered" and rec["event_id"] != ev["event_id"]


def test_finding_rejects_unknown_type():
    with pytest.raises(ValueError):
        events.Finding(("x",), "BOGUS", 0, "")
    with pytest.raises(ValueError):
        events.Identity("", "h")


@pytest.mark.parametrize(
    "raw,msg",
    [
        ({"bogus": {}}, "unknown section [bogus]"),
        ({"gpu": {"intervall_s": 1}}, "unknown key [gpu] intervall_s"),
        ({"gpu": {"interval_s": "1"}}, "[gpu] interval_s must be a number"),
        ({"gpu": {"interval_s": 0.001}}, "interval_s must be >= 0.05"),
        ({"gpu": {"source": "cuda"}}, "[gpu] source must be one of"),
        ({"gpu": {"source": "replay"}}, "needs [gpu] replay"),
        ({"gpu": {"confirm": 0}}, "confirm must be >= 1"),
        ({"xid": {"source": "file"}}, "needs [xid] path"),
        ({"xid": {"ignore": ["13"]}}, "[xid] ignore[0] must be an XID number"),
        ({"progress": {"k": 1.0}}, "progress k must be > 1"),
        ({"progress": {"floor_s": 5.0, "ceiling_s": 1.0}}, "floor_s <= ceiling_s"),
        ({"progress": {"enabled": 1}}, "[progress] enabled must be true or false"),
        ({"nccl": {"logs": "/var/log/x"}}, "[nccl] logs must be a list"),
        ({"status": {"listen": "9410"}}, "[status] listen must be host:port"),
        ({"node": {"rack": ""}}, "[node] rack must not be empty"),
        ({"sender": {"batch_max": 0}}, "[sender] batch_max must be 1..1000"),
        ({"sender": {"batch_max": 5000}}, "[sender] batch_max must be 1..1000"),
        ({"sender": {"batch_bytes": 10}}, "[sender] batch_bytes must be >= 1024"),
    ],
)
def test_config_errors_name_the_key(raw, msg):
    with pytest.raises(config.ConfigError) as e:
        config.build(raw)
    assert msg in str(e.value)


def test_example_config_loads():
    cfg = config.load(os.path.join(os.path.dirname(__file__), "..", "examples", "probe.toml"))
    assert cfg["node"]["rack"] == "A03" and cfg["gpu"]["interval_s"] == 1.0


class _FakePynvml:
    """Just enough of pynvml's surface for NvmlSource: two GPUs, GPU 1 busy at Gen3 x4, link 0 counting errors."""

    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
    NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3
    NVML_TEMPERATURE_GPU = 0
    NVML_NVLINK_MAX_LINKS = 18
    NVML_NVLINK_ERROR_DL_REPLAY, NVML_NVLINK_ERROR_DL_RECOVERY = 0, 1
    NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_DATA = 2, 3

    class NVMLError(Exception):
        pass

    def __init__(self):
        self.crc = 0

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetPciInfo(self, h):
        class P:
            busId = b"00000000:%02X:00.0" % (0x18 + 0x42 * h)

        return P()

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h):
        return "GPU-%d" % h

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 2:
            raise self.NVMLError("Invalid Argument")
        return 1

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetTemperatureThreshold(self, h, which):
        return {1: 87, 3: 90}[which]

    def nvmlDeviceGetUtilizationRates(self, h):
        class U:
            gpu, memory = 97, 40

        return U()

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 60

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [object()]

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        if counter == 3:
            raise self.NVMLError("Not Supported")
        return self.crc if (h, link, counter) == (0, 0, 2) else 0

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 3 if h == 1 else 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 4 if h == 1 else 16

    def nvmlDeviceGetPerformanceState(self, h):
        return 0


def test_nvml_source_adapter():
    from host_client.probes.gpu_source import NvmlSource

    fake = _FakePynvml()
    src = NvmlSource(nvml=fake, nvlink_every=2)
    d = src.devices()
    assert d[1]["bus_id"] == "00000000:5A:00.0" and d[1]["pci"] == (0, 0x5A, 0) and d[0]["nvlinks"] == 2
    assert (d[0]["max_gen"], d[0]["temp_slowdown"], d[0]["temp_max"]) == (5, 87, 90)
    checker = GpuChecker(d)
    r0 = src.sample()
    assert r0[1]["gen"] == 3 and r0[0]["nvlink"]["0:crc_flit"] == 0 and "0:crc_data" not in r0[0]["nvlink"]
    assert r0[0]["procs"] == 1 and r0[0]["util"] == 97
    checker.check(r0, 0)
    fake.crc = 9
    r1 = src.sample()
    assert r1[0]["nvlink"] is None  # counters read every second sample only
    assert [f.event_type for f in checker.check(r1, 1)] == ["PCIE_DOWNGRADE"]
    fs = checker.check(src.sample(), 2)
    assert sorted((f.event_type, f.gpu_index) for f in fs) == [("NVLINK_ERROR", 0), ("PCIE_DOWNGRADE", 1)]


def test_pause_as_first_message_pauses():
    tr = ProgressTracker(ProgressRules(ceiling_s=100), alive=lambda pid: True)
    beat(tr, 0.0, kind="pause")
    assert tr.snapshot(0.0)[0]["paused"] is True and tr.evaluate(99) == []


def test_no_driver_is_a_precise_source_error(monkeypatch):
    from host_client.probes import gpu_source

    class NoDriver(_FakePynvml):
        def nvmlInit(self):
            raise self.NVMLError("NVML Shared Library Not Found")

    with pytest.raises(SourceError, match="NVML unavailable: NVML Shared Library Not Found"):
        gpu_source.NvmlSource(nvml=NoDriver())
    real = gpu_source.NvmlSource
    monkeypatch.setattr(gpu_source, "NvmlSource", lambda **kw: real(nvml=NoDriver(), **kw))
    with pytest.raises(SourceError, match="no GPU source: NVML unavailable.*cannot run /nonexistent/nvidia-smi"):
        gpu_source.open_source("auto", smi_binary="/nonexistent/nvidia-smi")
    with pytest.raises(SourceError, match="unknown GPU source 'cuda'"):
        gpu_source.open_source("cuda")
    assert gpu_source.open_source("none") is None


def test_resume_after_a_stall_in_pause_clears_it():
    tr = ProgressTracker(ProgressRules(ceiling_s=10), alive=lambda pid: True)
    for i in range(5):
        beat(tr, float(i), i)
    beat(tr, 5.0, kind="pause")
    assert tr.evaluate(14.0) == [] and len(tr.evaluate(15.5)) == 1  # a checkpoint that never ends
    beat(tr, 16.0, kind="resume")
    assert tr.dirty and tr.evaluate(16.0) == []
    assert len(tr.evaluate(16.0 + 4.1)) == 1  # timed again from the resume


# --- issue 11: a lost GPU never crashes the probe --------------------------------------------------------------------


@pytest.mark.parametrize("exc_name", ["NVMLError_GpuIsLost", "NVMLError_Unknown", "NVMLError_NotSupported"])
def test_nvml_error_at_every_call_site_is_contained_to_that_gpu(exc_name, tmp_path):
    import pynvml
    from probe_fakes import PER_GPU_CALLS, FakeNvml

    from host_client.probes.gpu_source import NvmlSource

    exc = getattr(pynvml, exc_name)
    for call in PER_GPU_CALLS:
        nvml = FakeNvml(count=4, nvlinks=2)
        nvml.fail(call, 2, exc)
        # the driver's own GPU list names the bus of a GPU NVML cannot open
        for i in range(4):
            (tmp_path / ("0000:%02x:00.0" % (0x18 + 0x10 * i))).mkdir(exist_ok=True)
        src = NvmlSource(nvml=nvml, nvlink_every=1, proc_root=str(tmp_path))  # must not raise, whatever fails
        checker = GpuChecker(src.devices())
        for t in range(3):
            readings = src.sample()
            fs = checker.check(readings, t)
        assert [r["index"] for r in readings] == [0, 1, 2, 3], call
        for r in readings:
            if r["index"] != 2:  # the other GPUs are read in full
                assert (r["util"], r["temp"], r["gen"], r["lost"]) == (97, 60, 5, False), (call, r)
        lost = [f for f in fs if f.event_type == events.GPU_LOST]
        gone = (
            call == "nvmlDeviceGetHandleByIndex"
            and exc_name != "NVMLError_NotSupported"
            or (
                exc_name == "NVMLError_GpuIsLost"
                and call
                in (
                    "nvmlDeviceGetUtilizationRates",
                    "nvmlDeviceGetTemperature",
                    "nvmlDeviceGetComputeRunningProcesses",
                    "nvmlDeviceGetPowerUsage",
                    "nvmlDeviceGetCurrPcieLinkGeneration",
                    "nvmlDeviceGetCurrPcieLinkWidth",
                    "nvmlDeviceGetPerformanceState",
                )
            )
        )
        if call == "nvmlDeviceGetHandleByIndex" and exc_name == "NVMLError_NotSupported":
            gone = True  # no handle at all: the GPU cannot be watched
        assert bool(lost) == gone, (call, exc_name, fs)
        if lost:
            assert lost[0].gpu_index == 2 and lost[0].extra["pci"] == "0000:38:00", lost[0].extra


def test_lost_gpu_comes_back_after_a_reset_and_clears():
    import pynvml
    from probe_fakes import FakeNvml

    from host_client.probes.gpu_source import NvmlSource

    nvml = FakeNvml(count=2)
    nvml.fail("nvmlDeviceGetHandleByIndex", 1, pynvml.NVMLError_GpuIsLost)
    src = NvmlSource(nvml=nvml, reopen_every=2)
    checker = GpuChecker(src.devices())
    led = events.Conditions()
    raised, _ = led.update("gpu", checker.check(src.sample(), 0))
    assert [(f.event_type, f.gpu_index) for f in raised] == [("GPU_LOST", 1)]
    assert raised[0].detail.startswith("GPU 1 lost (")
    nvml.heal("nvmlDeviceGetHandleByIndex", 1)
    cleared = []
    for t in range(1, 6):
        cleared += led.update("gpu", checker.check(src.sample(), t))[1]
    assert [f.event_type for f in cleared] == ["GPU_LOST"]
    # opened again: its facts are known now, and after a refresh the PCIe rules judge it like the others
    assert src.generation == 1 and src.devices()[1]["max_gen"] == 5 and checker._gpus[1].dev["max_gen"] is None
    checker.refresh(src.devices())
    nvml.gen[1] = 3
    for t in range(6, 9):
        fs = checker.check(src.sample(), t)
    assert [(f.event_type, f.gpu_index) for f in fs] == [("PCIE_DOWNGRADE", 1)]


def test_smi_error_row_among_csv_rows_is_that_gpu_lost_the_others_parsed():
    text = (
        "0, 00000000:18:00.0, 5, 16, 34, 97, P0, 5, 16\n"
        "Unable to determine the device handle for GPU 0000:2A:00.0: Unknown Error\n"
        "2, 00000000:3A:00.0, 5, 16, 63, 97, P0, 5, 16\n"
    )
    devices, readings = parse_smi_csv(text)
    assert [(d["index"], d["lost"]) for d in devices] == [(0, False), (1, True), (2, False)]
    assert readings[2]["temp"] == 63 and readings[1]["lost"] is True
    fs = GpuChecker(devices).check(readings, 0)
    assert [(f.event_type, f.gpu_index, f.extra["pci"]) for f in fs] == [("GPU_LOST", 1, "0000:2a:00")]


def _tracker(**kw):
    alive = kw.pop("alive", lambda pid: True)
    return ProgressTracker(ProgressRules(**kw), alive=alive)


def test_first_step_deadline_and_early_floor():
    tr = _tracker(first_step_s=30, early_floor_s=5)
    tr.message({"kind": "start", "job": "j", "pid": 10}, 0.0)
    assert tr.evaluate(29.9) == [] and tr.evaluate(30.1)[0].extra["revision"] == "stalled"
    tr = _tracker(first_step_s=30, early_floor_s=5)
    tr.message({"kind": "start", "job": "j", "pid": 10, "first_step_s": 100}, 0.0)
    assert tr.evaluate(99) == []  # start(first_step_s=) sets it for that process
    beat(tr, 100.0, pid=10, job="j")
    beat(tr, 100.2, pid=10, job="j")  # one 0.2 s interval: warm-up, the early floor applies
    assert tr.evaluate(105.0) == [] and tr.evaluate(105.3)


def test_stalled_process_that_dies_is_reported_then_cleared_three_ways():
    dead = set()
    for clear in ("timeout", "end", "new_process"):
        tr = _tracker(dead_clear_s=60, early_floor_s=1, alive=lambda pid: pid not in dead)
        dead.clear()
        for i in range(5):
            beat(tr, i * 0.1, pid=7)
        (f,) = tr.evaluate(3.0)
        assert f.extra["revision"] == "stalled"
        dead.add(7)  # SIGKILL
        (f,) = tr.evaluate(4.5)
        assert f.extra["revision"] == "died" and "died while stalled" in f.detail
        if clear == "timeout":
            assert tr.evaluate(64.0) and tr.evaluate(64.6) == []
        elif clear == "end":
            tr.message({"kind": "end", "job": "train", "pid": 99}, 5.0)
            assert tr.evaluate(5.0) == []
        else:
            beat(tr, 6.0, pid=8)  # the job restarted under the same name
            assert tr.evaluate(6.0) == []


def test_zombie_counts_as_dead(tmp_path):
    from host_client.probes.progress import _pid_alive

    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "stat").write_text("4242 (python3 (x) y) Z 1 4242 4242 0 -1 4194564 0 0\n")
    import os

    assert _pid_alive(os.getpid()) is True
    # a pid that exists (ours) but whose stat says zombie
    (proc / str(os.getpid())).mkdir()
    (proc / str(os.getpid()) / "stat").write_text("%d (a) b) Z 1\n" % os.getpid())
    assert _pid_alive(os.getpid(), proc=str(proc)) is False


def test_announced_long_step_and_pause_raise_nothing():
    tr = _tracker(early_floor_s=1)
    for i in range(10):
        beat(tr, i * 0.2, pid=3)
    tr.message({"kind": "beat", "job": "train", "pid": 3, "step": 10, "next_s": 30.0}, 2.0)
    assert tr.evaluate(31.0) == []  # the announced long step
    beat(tr, 31.5, pid=3)
    assert tr.evaluate(32.4) and tr.snapshot(32.4)[0]["step_time_s"] == 0.2  # the long gap was not learned


def test_fallback_fills_what_nvml_failed_on_from_nvidia_smi_per_capability():
    import pynvml
    from probe_fakes import FakeNvml

    from host_client.probes.gpu_source import FallbackSource, NvmlSource, SmiSource

    nvml = FakeNvml(count=2)
    nvml.fail("nvmlDeviceGetCurrPcieLinkGeneration", 1, pynvml.NVMLError_Unknown)  # one capability of one GPU
    smi_out = (
        "0, 00000000:18:00.0, 5, 16, 60, 97, P0, 5, 16, 550.00, 700.00\n"
        "1, 00000000:28:00.0, 3, 16, 61, 96, P0, 5, 16, 540.00, 700.00\n"
    )
    runs = []
    src = FallbackSource(NvmlSource(nvml=nvml), lambda: SmiSource(runner=lambda argv: runs.append(argv) or smi_out))
    r = src.sample()
    assert (r[0]["gen"], r[1]["gen"]) == (5, 3)  # GPU 1's generation from nvidia-smi, the rest from NVML
    assert r[1]["util"] == 97 and src.filled == 1 and src.failures[(1, "nvmlDeviceGetCurrPcieLinkGeneration")]
    nvml.heal("nvmlDeviceGetCurrPcieLinkGeneration", 1)
    n = len(runs)
    src.sample()
    assert len(runs) == n  # nothing failing: nvidia-smi is not run


def test_recurring_unannounced_long_step_is_learned_after_two_and_other_steps_keep_their_limit():
    tr = _tracker(early_floor_s=1)
    t = 0.0
    p0 = []
    for _ck in range(4):  # a 30 s checkpoint every 100 steps of 0.2 s, not in pause()
        for _ in range(100):
            beat(tr, t, pid=3)
            t += 0.2
        t -= 0.2
        f = tr.evaluate(t + 25.0)  # 25 s into the checkpoint
        p0.append(bool(f))
        t += 30.0
    assert p0 == [True, True, False, False]  # the first two raise (and clear at their next beat), then allowed
    # a hang anywhere else is still seen at the normal limit
    for _ in range(10):
        beat(tr, t, pid=3)
        t += 0.2
    assert tr.evaluate(t + 1.0)


def test_an_allowed_recurring_long_step_is_not_learned_as_a_step_time():
    tr = _tracker(early_floor_s=1)
    t = 0.0
    for _ck in range(3):
        for _ in range(50):
            beat(tr, t, pid=3)
            t += 0.2
        tr.evaluate(t + 1.0)
        t += 30.0
    beat(tr, t, pid=3)
    assert tr.snapshot(t)[0]["step_time_s"] == 0.2 and max(tr._procs[("train", 3)].intervals) < 1


def test_auto_falls_back_to_the_drivers_gpu_list_when_nvml_and_nvidia_smi_fail(monkeypatch, tmp_path):
    from host_client.probes import gpu_source

    class NoDriver(_FakePynvml):
        def nvmlInit(self):
            raise self.NVMLError("Driver Not Loaded")

    real = gpu_source.NvmlSource
    monkeypatch.setattr(gpu_source, "NvmlSource", lambda **kw: real(nvml=NoDriver(), **kw))
    for bus in ("0000:b3:00.0", "0000:18:00.0"):
        (tmp_path / bus).mkdir()
    (tmp_path / "0000:18:00.0" / "information").write_text("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   42\n")
    src = gpu_source.open_source("auto", smi_binary="/nonexistent/nvidia-smi", proc_root=str(tmp_path))
    assert src.name == "proc"
    assert [(d["index"], d["bus_id"], d["name"]) for d in src.devices()] == [
        (0, "0000:18:00.0", "NVIDIA H100 80GB HBM3"),
        (1, "0000:b3:00.0", None),
    ]  # PCI order, as NVML numbers
    assert GpuChecker(src.devices()).check(src.sample(), 0) == []  # nothing known, nothing raised
