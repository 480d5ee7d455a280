"""Issue 7's latency acceptance end to end on loopback: probe daemon -> gateway (its HTTP front) -> signed HTTP ->
emulator (its own front, the core's Receiver and state machine). Times are taken at the emulator's /api/v1/status."""

import time

import pytest

pytest.importorskip("emulator.harness")

from probe_fakes import FakeSource

from emulator.harness import Harness
from host_client.beat import Beat
from host_client.gateway.config import Config
from host_client.probes import config
from host_client.probes.daemon import Daemon


class Gateway:
    def __init__(self, h, language="zh"):
        from gateway_front import ServedGateway

        cfg = Config.from_dict(
            {
                "gateway": {"language": language},
                "terminals": {"emu": {"url": h.url, "key_id": h.cfg["key_id"], "secret_env": "EMU_SECRET"}},
                "delivery": {"rate_interval_s": 0, "backoff_initial_s": 0.05, "backoff_max_s": 0.2},
            },
            env={"EMU_SECRET": h.cfg["secret"]},
        )
        self.server = ServedGateway(cfg)
        self.url = self.server.url

    def close(self):
        self.server.close(2)


@pytest.fixture
def chain(tmp_path):
    with Harness(str(tmp_path / "emu")) as h:
        gw = Gateway(h)
        try:
            yield h, gw
        finally:
            gw.close()


def probe(tmp_path, gw, rack, source=None, **over):
    kern = tmp_path / ("kern-%s.log" % rack)
    kern.write_text("")
    raw = {
        "node": {"rack": rack, "host": "gpu-worker-08", "gateway": gw.url},
        "gpu": {"util_drop": False},  # default 1 s sampling, confirm 2
        "xid": {"source": "file", "path": str(kern)},
        "progress": {"socket": str(tmp_path / ("p-%s.sock" % rack))},
        "status": {"listen": ""},
    }
    for k, v in over.items():
        raw[k].update(v)
    return Daemon(config.build(raw), gpu=source).start(), kern


def first_seen(h, key, level, timeout):
    """Poll the emulator until the incident `key` is shown at `level`; return the monotonic time it was."""
    st = h.wait_for(lambda s: any(a["key"] == key and a["level"] == level for a in s["active"]), timeout, 0.01)
    return time.monotonic(), st


@pytest.mark.serial  # asserts a latency bound: run alone (tools/run-tests.sh)
def test_stalled_training_loop_is_p0_on_the_emulator_within_2s(tmp_path, chain):
    h, gw = chain
    d, _ = probe(tmp_path, gw, "A01")
    try:
        b = Beat(path=d.cfg["progress"]["socket"], job="llama-70b", rank=0, local_rank=0)
        for i in range(15):
            b.beat(i)
            last = time.monotonic()
            time.sleep(0.2)
        t, st = first_seen(h, "A01:gpu-worker-08:PROGRESS_STALL", "P0", 5)
        print("e2e PROGRESS_STALL shown %.3fs after the last beat" % (t - last))
        assert t - last < 2.0, "P0 shown %.2fs after the last beat" % (t - last)
        assert st["shown"]["pattern"] == "flash"
        b.beat(15)  # steps resume: the incident turns NORMAL (green)
        h.wait_for(
            lambda s: all(
                a["level"] == "NORMAL" for a in s["active"] if a["key"] == "A01:gpu-worker-08:PROGRESS_STALL"
            ),
            5,
        )
    finally:
        d.close()


@pytest.mark.serial  # asserts a latency bound: run alone (tools/run-tests.sh)
def test_xid_line_is_on_the_emulator_within_1s(tmp_path, chain):
    h, gw = chain
    d, kern = probe(tmp_path, gw, "A02", source=FakeSource(count=8))
    try:
        time.sleep(0.3)  # the follower is at the end of the file
        with open(kern, "a") as f:
            t0 = time.monotonic()
            f.write("NVRM: Xid (PCI:0000:58:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n")
        t, st = first_seen(h, "A02:gpu-worker-08:XID_FATAL:gpu4", "P0", 3)
        print("e2e XID_FATAL shown %.3fs after the line was written" % (t - t0))
        assert t - t0 < 1.0, "XID shown after %.2fs" % (t - t0)
        (a,) = [a for a in st["active"] if a["key"] == "A02:gpu-worker-08:XID_FATAL:gpu4"]
        # the room hears the RFC's words, then the XID, what it means, the GPU's PCI address and the action
        assert a["text"] == (
            "硬件致命故障，机架 A02 节点 gpu-worker-08 第 4 号卡发生驱动级报错"
            "，XID 79 GPU 掉卡，PCI 0000:58:00，请重启节点"
        )  # bus 0x58 is the fake's GPU 4
        assert st["shown"]["text"] == "A02 gpu-worker-08 XID_FATAL gpu4"  # the matrix label (Chinese: the key)
    finally:
        d.close()


@pytest.mark.serial  # asserts a latency bound: run alone (tools/run-tests.sh)
def test_english_room_hears_the_xid_its_meaning_the_gpu_and_the_action_and_the_label_leads_with_the_place(tmp_path):
    """Issue 37: an application XID on GPU 4 through probe, gateway (language en) and emulator: the spoken text
    carries XID 13, its catalogue meaning, GPU index and PCI address and the catalogue's action; the matrix label
    (its first 32 characters) leads with the rack and the node."""
    with Harness(str(tmp_path / "emu")) as h:
        gw = Gateway(h, language="en")
        d, kern = probe(tmp_path, gw, "A07", source=FakeSource(count=8))
        try:
            time.sleep(0.3)
            with open(kern, "a") as f:
                f.write("NVRM: Xid (PCI:0000:58:00): 13, pid=2411, name=python3, Graphics Exception: ESR 0x404600\n")
            key = "A07:gpu-worker-08:XID_WARNING:gpu4"
            _, st = first_seen(h, key, "P1", 5)
            (a,) = [a for a in st["active"] if a["key"] == key]
            assert a["text"] == (
                "Rack A07 node gpu-worker-08: GPU warning, GPU 4 reported an XID error; XID 13, graphics engine "
                "exception; PCI 0000:58:00; restart the job"
            )
            assert st["shown"]["text"] == "Rack A07 node gpu-worker-08: GPU"
        finally:
            d.close()
            gw.close()


def test_pcie_downgrade_is_on_the_emulator_within_two_intervals(tmp_path, chain):
    h, gw = chain
    src = FakeSource(count=8)
    d, _ = probe(tmp_path, gw, "A03", source=src, xid={"source": "none"})
    try:
        time.sleep(1.3)
        t0 = time.monotonic()
        src.set(3, gen=3, width=4)  # the seed's story: busy GPU falls from Gen5 x16 to Gen3 x4
        t, _ = first_seen(h, "A03:gpu-worker-08:PCIE_DOWNGRADE:gpu3", "P1", 4)
        interval = d.cfg["gpu"]["interval_s"]
        print("e2e PCIE_DOWNGRADE shown %.3fs after the link changed (interval %.1fs)" % (t - t0, interval))
        assert t - t0 < 2 * interval + 0.1, "PCIe downgrade shown after %.2fs" % (t - t0)
    finally:
        d.close()


def test_idle_gpu_at_gen1_never_reaches_the_emulator(tmp_path, chain):
    h, gw = chain
    src = FakeSource(count=3)
    src.idle(0, pstate=8, gen=1)
    src.idle(1, gen=1)  # idle H100s sit in P0: Gen1 there is power saving too
    src.idle(2, width=8)  # and so is a narrowed link on an idle GPU
    d, _ = probe(tmp_path, gw, "A04", source=src, xid={"source": "none"}, gpu={"interval_s": 0.05, "util_drop": False})
    try:
        time.sleep(1.0)
        assert d.samples >= 10 and d.sender.sent == 0
        assert not any(a["key"].startswith("A04:") for a in h.status()["active"])
    finally:
        d.close()


def test_every_probe_event_passes_the_gateways_validation():
    from host_client.gateway.events import parse_event
    from host_client.probes import events, nccl, xid

    ident = events.Identity("A03", "gpu-worker-08-5c9e38f4a1")
    findings = [
        xid.finding(xid.parse("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."), 2),
        xid.finding(xid.parse("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, Graphics Exception\x7f\x01"), 2),
        nccl.finding(
            nccl.parse("[PG ID 0 PG GUID 0(default_pg) Rank 5]  failure detected by watchdog at work sequence id: 7"),
            "/x",
        ),
        events.Finding(("pcie", 3), events.PCIE_DOWNGRADE, 3, "PCIe link Gen3 x4, expected Gen5 x16"),
        events.Finding(("thermal", 1), events.THERMAL, 1, "t"),
        events.Finding(("nvlink", 1), events.NVLINK_ERROR, 1, "n"),
        events.Finding(("util", 1), events.GPU_UTIL_DROP, 1, "u"),
        events.Finding(("progress", "j"), events.PROGRESS_STALL, events.NODE_WIDE, "p" * 300, stalled_ranks=[0, 1]),
    ]
    for f in findings:
        for util in (None, 0.0, 97.5):
            if f.event_type == events.GPU_UTIL_DROP and util is None:
                continue  # the probe always has a utilisation for this one: it is the reading that fired it
            ev = parse_event(events.body(ident, f, util))
            assert ev.event_type == f.event_type and ev.host == "gpu-worker-08"
            rec = parse_event(events.body(ident, f, util, recovered=True))
            assert rec.event_type == "RECOVERED" and rec.recovers == f.event_type


def test_xid_on_an_unknown_bus_is_p0_on_the_emulator(tmp_path, chain):
    """A GPU neither NVML nor the driver lists (it fell off the bus before the probe started): the probe sends
    gpu_index -1 and the PCI address; the gateway must take it and the room must see the P0, worded for the node."""
    h, gw = chain
    d, kern = probe(tmp_path, gw, "A05", source=FakeSource(count=2))
    try:
        assert (0x0, 0xE1, 0x0) not in d._pci
        time.sleep(0.3)
        with open(kern, "a") as f:
            t0 = time.monotonic()
            f.write("NVRM: Xid (PCI:0000:e1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n")
        t, st = first_seen(h, "A05:gpu-worker-08:XID_FATAL", "P0", 3)
        print("e2e unnumbered XID_FATAL shown %.3fs after the line was written" % (t - t0))
        (a,) = [a for a in st["active"] if a["key"] == "A05:gpu-worker-08:XID_FATAL"]
        assert a["text"] == (
            "硬件致命故障，机架 A05 节点 gpu-worker-08 一张 GPU 卡发生驱动级报错"
            "，XID 79 GPU 掉卡，PCI 0000:e1:00，请重启节点"
        )
        assert d.sender.sent == 1 and d.sender.rejected == 0
    finally:
        d.close()


def test_two_gpus_degrade_one_recovers_through_the_probe(tmp_path, chain):
    """Issue 6/7 seam through the real chain: GPUs 3 and 5 fall to Gen3 x4 in the same sampling round (the sender
    posts both in one array); GPU 3 recovers: the room keeps the P1; GPU 5 recovers: NORMAL."""
    h, gw = chain
    src = FakeSource(count=8)
    d, _ = probe(tmp_path, gw, "A06", source=src, xid={"source": "none"}, gpu={"interval_s": 0.2})
    key = "A06:gpu-worker-08:PCIE_DOWNGRADE:gpu"

    def shown(s):
        return {a["key"]: a["level"] for a in s["active"] if a["key"].startswith(key)}

    try:
        time.sleep(0.5)
        src.set(3, gen=3, width=4)
        src.set(5, gen=3, width=4)
        st = h.wait_for(lambda s: "P1" in shown(s).values(), 5, 0.02)
        assert list(shown(st).values()) == ["P1"]  # one alarm; the other GPU was debounced and attached
        assert wait_until(lambda: d.sender.sent == 2)
        src.set(3, gen=5, width=16)
        assert wait_until(lambda: d.sender.sent == 3)  # GPU 3's RECOVERED reached the gateway
        time.sleep(0.5)
        st = h.status()
        assert list(shown(st).values()) == ["P1"] and st["shown"]["level"] == "P1"
        src.set(5, gen=5, width=16)
        st = h.wait_for(lambda s: list(shown(s).values()) == ["NORMAL"], 5, 0.02)
        assert d.sender.rejected == 0
    finally:
        d.close()


def wait_until(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


# --- issue 11: the lifecycle and the lost GPU, end to end ---------------------------------------------------------

_CHILD = """
import sys, time
sys.path.insert(0, %r)
from host_client.beat import Beat
b = Beat(path=%r, job=%r, rank=0, local_rank=0)
b.start()
for i in range(%d):
    b.beat(i)
    time.sleep(0.1)
if %r == "hang":
    time.sleep(600)      # hung in a collective: no more beats, the process stays
# "exit": leaves without end() (a crash): the parent does not reap it, so it is a zombie
"""


def _child(sock, job, beats, mode):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.Popen([sys.executable, "-c", _CHILD % (root, sock, job, beats, mode)])


@pytest.mark.serial  # asserts a latency bound: run alone (tools/run-tests.sh)
def test_hang_at_the_first_collective_before_any_beat_is_p0_within_the_first_step_deadline(tmp_path, chain):
    h, gw = chain
    d, _ = probe(tmp_path, gw, "A06", progress={"first_step_s": 1.5})
    try:
        b = Beat(path=d.cfg["progress"]["socket"], job="llama-405b", rank=0, local_rank=2)
        t0 = time.monotonic()
        b.start()  # then NCCL init and the first all-reduce (SeqNum=1) hang: not one beat
        t, st = first_seen(h, "A06:gpu-worker-08:PROGRESS_STALL", "P0", 6)
        print("e2e first-step hang shown %.3fs after start() (deadline 1.5 s)" % (t - t0))
        assert 1.5 <= t - t0 < 1.5 + 2.0
        (ev,) = [e for e in d.recent if e["event_type"] == "PROGRESS_STALL"]
        assert "first step" in ev["detail"] and ev["gpu_index"] == 2
    finally:
        d.close()


def test_hung_job_killed_with_sigkill_is_reported_then_clears(tmp_path, chain):
    h, gw = chain
    d, _ = probe(tmp_path, gw, "A07", progress={"dead_clear_s": 1.0})
    p = _child(d.cfg["progress"]["socket"], "killed-job", 8, "hang")
    try:
        first_seen(h, "A07:gpu-worker-08:PROGRESS_STALL", "P0", 20)  # 8 steps of 0.1 s: learned, 0.5 s floor
        p.kill()
        p.wait()
        assert wait_until(
            lambda: any(
                "died while stalled" in e.get("detail", "") for e in d.recent if e["event_type"] == "PROGRESS_STALL"
            ),
            5,
        )
        # the incident stays P0 while dead_clear_s runs, then RECOVERED clears it
        h.wait_for(
            lambda s: all(
                a["level"] == "NORMAL" for a in s["active"] if a["key"] == "A07:gpu-worker-08:PROGRESS_STALL"
            ),
            8,
        )
        assert [
            e["event_type"] for e in d.recent if e.get("job") == "killed-job" or e.get("recovers") == "PROGRESS_STALL"
        ][-1] == "RECOVERED"
    finally:
        p.kill()
        p.wait()
        d.close()


def test_zombie_that_exited_without_end_raises_no_p0(tmp_path, chain):
    h, gw = chain
    d, _ = probe(tmp_path, gw, "A08", progress={"early_floor_s": 1.0})
    p = _child(d.cfg["progress"]["socket"], "crashed-job", 3, "exit")
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # exited, not reaped: a zombie that kill(pid, 0) still finds
            try:
                with open("/proc/%d/stat" % p.pid) as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break
            except OSError:
                break
            time.sleep(0.05)
        time.sleep(2.5)  # well past its limit (early floor 1 s)
        assert not any(e["event_type"] == "PROGRESS_STALL" for e in d.recent)
        assert not any(a["key"].startswith("A08:") for a in h.status()["active"])
    finally:
        p.wait()
        d.close()


def test_gpu_lost_at_start_is_p0_and_the_node_keeps_reporting_everything_else(tmp_path, chain):
    import pynvml
    from probe_fakes import FakeNvml

    from host_client.probes.gpu_source import NvmlSource

    h, gw = chain
    nvml = FakeNvml(count=8)
    nvml.fail("nvmlDeviceGetHandleByIndex", 5, pynvml.NVMLError_GpuIsLost)
    src = NvmlSource(nvml=nvml)
    d, kern = probe(tmp_path, gw, "A09", source=src)
    try:
        t, st = first_seen(h, "A09:gpu-worker-08:GPU_LOST:gpu5", "P0", 4)
        (ev,) = [e for e in d.recent if e["event_type"] == "GPU_LOST"]
        assert ev["gpu_index"] == 5 and "NVMLError_GpuIsLost" in ev["detail"]
        time.sleep(0.3)
        with open(kern, "a") as f:  # the kernel log is still followed
            f.write("NVRM: Xid (PCI:0000:38:00): 13, pid=1, name=python3, Graphics Exception: ESR 0x0\n")
        first_seen(h, "A09:gpu-worker-08:XID_WARNING:gpu2", "P1", 3)
        nvml.gen[1], nvml.width[1] = 3, 4  # and the other GPUs are still checked
        first_seen(h, "A09:gpu-worker-08:PCIE_DOWNGRADE:gpu1", "P1", 4)
        b = Beat(path=d.cfg["progress"]["socket"], job="on-a-sick-node", rank=0, local_rank=0)
        for i in range(10):  # and the progress socket is still read
            b.beat(i)
            time.sleep(0.1)
        first_seen(h, "A09:gpu-worker-08:PROGRESS_STALL", "P0", 4)
    finally:
        d.close()
