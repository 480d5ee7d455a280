"""Issue 35: the fabric and the hardware under the GPU, through the real sentinel-probe daemon.

Fake sysfs trees (tests/hw_fakes.py, the kernel's layouts), an ethtool printing recorded outputs and kernel /
Fabric Manager lines as posted (tests/fixtures/probes/hw/, each with its source URL and the document its level
comes from). The end-to-end tests run probe -> gateway -> emulator on loopback and read what the room is shown.
"""

import json
import time
from pathlib import Path

import pytest
from hw_fakes import FIXTURES, Fabric, FakeEthtool
from probe_fakes import FakeSource

from host_client.gateway.events import parse_event, speech
from host_client.probes import config, events, fabric, hwlog
from host_client.probes.daemon import Daemon
from sentinel_core.alarm import P0, P1


def _rows(name):
    return [json.loads(x) for x in (FIXTURES / name).read_text().splitlines() if x.strip()]


def _cfg(tmp_path, fb=None, et=None, gw=None, rack="A03", **over):
    kern = tmp_path / ("kern-%s.log" % rack)
    kern.touch()
    raw = {
        "node": {"rack": rack, "host": "gpu-worker-08", "gateway": gw.url if gw else ""},
        "gpu": {"util_drop": False},
        "xid": {"source": "file", "path": str(kern)},
        "progress": {"socket": str(tmp_path / ("p-%s.sock" % rack))},
        "status": {"listen": ""},
        "fabric": {
            "sysfs_root": str(fb.ib) if fb else str(tmp_path / "none"),
            "hwmon_root": str(fb.hwmon) if fb else str(tmp_path / "none"),
            "hwmon_interval_s": 0.2,
            "ethtool": str(et.path) if et else "",
            "interval_s": 0.1,
            "stats_interval_s": 0.2,
            "module_interval_s": 0.2,
            "window_s": 2.0,
            "up_hold_s": 0.5,
        },
        "pcie": {"sysfs_root": str(fb.pci) if fb else str(tmp_path / "none"), "interval_s": 0.2, "window_s": 2.0},
        "fabric_manager": {"log": str(tmp_path / "fabricmanager.log")},
    }
    for k, v in over.items():
        raw.setdefault(k, {}).update(v)
    return config.build(raw), kern


@pytest.fixture
def node(tmp_path):
    fb = Fabric(tmp_path / "sys")
    et = FakeEthtool(tmp_path / "bin")
    for i in range(8):
        et.set("ens%dnp0" % (i + 1), "m", "ethtool-m-sfp-normal.txt")
        et.stats("ens%dnp0" % (i + 1))
    return fb, et


# --- the recorded forms -------------------------------------------------------------------------------------------
def test_every_kernel_line_gives_its_event_through_the_daemon(tmp_path, node):
    fb, et = node
    cfg, _ = _cfg(tmp_path, fb, et)
    d = Daemon(cfg, gpu=FakeSource(count=8))
    rows = _rows("kernel_lines.jsonl")
    assert len(rows) >= 20 and all(r["source"] and r["level_from"] for r in rows)
    for i, r in enumerate(rows):
        before = len(d.recent)
        d.on_kernel_line(r["line"], float(i) * 1000)  # apart by more than the hold: each line judged alone
        got = d.recent[before:]
        if r["event_type"] is None:
            assert got == [], r["line"]
            continue
        assert got, r["line"]
        assert got[0]["event_type"] == r["event_type"], r["line"]
        if r["component"]:
            assert got[0]["component"] == r["component"], r["line"]
        ev = parse_event(got[0])  # the gateway takes it, at the probe's level for the type
        assert ev.level() == {"P0": P0, "P1": P1}[events.LEVELS[r["event_type"]]], r["line"]


def test_fatal_aer_on_a_root_port_is_the_gpu_and_the_nic_below_it(tmp_path, node):
    fb, et = node
    cfg, _ = _cfg(tmp_path, fb, et)
    d = Daemon(cfg, gpu=FakeSource(count=8))
    port = fb.root_port_of(fb.gpu_bdf[3])
    d.on_kernel_line("pcieport %s: AER: Uncorrected (Fatal) error received: %s" % (port, port), 1.0)
    got = {(e["event_type"], e["gpu_index"], e.get("component")) for e in d.recent}
    assert got == {("GPU_LOST", 3, None), ("NIC_FAILURE", -1, "mlx5_3")}
    # the same line again within the hold: no second alarm
    d.on_kernel_line("pcieport %s: AER: Uncorrected (Fatal) error received: %s" % (port, port), 2.0)
    assert len(d.recent) == 2


def test_fabric_manager_lines(tmp_path):
    for r in _rows("fabricmanager_lines.jsonl"):
        h = hwlog.parse_fabric_manager(r["line"])
        assert (h.event_type if h else None) == r["event_type"], r["line"]


def test_ethtool_forms():
    ok = fabric.parse_module((FIXTURES / "ethtool-m-sfp-normal.txt").read_text())
    assert ok["temp_c"] == 57.09 and ok["temp_warn_c"] == 70.0 and ok["rx_low_warn_mw"] == 0.0794
    assert fabric._module_problem(ok, None, 1.0) is None
    hot = fabric.parse_module((FIXTURES / "ethtool-m-sfp-hot.txt").read_text())
    assert "temperature 71.5" in fabric._module_problem(hot, None, 1.0)
    low = fabric.parse_module((FIXTURES / "ethtool-m-sfp-rxlow.txt").read_text())
    assert "rx power 0.0501" in fabric._module_problem(low, None, 1.0)
    st = fabric.parse_ethtool_stats((FIXTURES / "ethtool-S-mlx5-normal.txt").read_text())
    assert st["rx_prio3_pause_duration"] == 3400 and st["tx_pause_storm_error_events"] == 0


def _port(state="ACTIVE", rate=400.0, **counters):
    c = dict.fromkeys(fabric.WATCHED, 0)
    c.update(counters)
    return {
        "state": state,
        "phys": "LinkUp" if state == "ACTIVE" else "Polling",
        "rate": rate,
        "rate_text": "%g Gb/sec (4X NDR)" % rate,
        "layer": "InfiniBand",
        "netdev": None,
        "counters": c,
    }


def test_a_flapping_port_is_one_incident_with_a_count():
    ch = fabric.FabricChecker(fabric.FabricRules(window_s=60, up_hold_s=10, flap_downs=3))
    from host_client.probes.events import Conditions

    led = Conditions()
    sent = []
    t = 0.0
    for state in ["ACTIVE", "DOWN", "ACTIVE", "DOWN", "ACTIVE", "DOWN", "ACTIVE", "ACTIVE"]:
        found = ch.check({("mlx5_3", 1): _port(state)}, t)
        rev = led.revise("fabric", found)
        raised, cleared = led.update("fabric", found, t)
        sent += (
            [("revised", f.detail) for f in rev]
            + [("raised", f.detail) for f in raised]
            + [("cleared", "")] * len(cleared)
        )
        t += 1.0
    assert [s[0] for s in sent] == ["raised", "revised"]  # one incident, said again once as a flap
    assert "flapping: 3 link downs" in sent[1][1]
    for _ in range(12):  # held ACTIVE past up_hold_s: the source says it is healthy
        found = ch.check({("mlx5_3", 1): _port()}, t)
        _, cleared = led.update("fabric", found, t)
        t += 1.0
        if cleared:
            break
    assert cleared and cleared[0].event_type == events.IB_PORT_DOWN


def test_rates_not_absolute_values_and_resets_are_silent():
    ch = fabric.FabricChecker(fabric.FabricRules(window_s=10, bit_errors=10))
    p = ("mlx5_0", 1)
    # a port up for months: huge totals that do not move
    assert ch.check({p: _port(symbol_error=65535, port_rcv_errors=40000)}, 0.0) == []
    assert ch.check({p: _port(symbol_error=65535, port_rcv_errors=40000)}, 1.0) == []
    # opensm clears the counters: values fall to 0 (a reset, not an error)
    assert ch.check({p: _port(symbol_error=0)}, 2.0) == []
    # 12 symbol errors within the window: the RFC's bit-error warning
    found = ch.check({p: _port(symbol_error=12)}, 3.0)
    assert [f.event_type for f in found] == [events.OPTICS_WARNING]
    # the window passes with no new errors: healthy again (the counter's rate says so)
    assert ch.check({p: _port(symbol_error=12)}, 20.0) == []


def test_rate_below_first_trained_or_configured():
    ch = fabric.FabricChecker(fabric.FabricRules(expected_rate_gbps=400))
    p = ("mlx5_1", 1)
    assert ch.check({p: _port(rate=400.0)}, 0.0) == []
    f = ch.check({p: _port(rate=200.0)}, 1.0)
    assert [x.event_type for x in f] == [events.IB_LINK_DEGRADED] and "trained at 400" in f[0].detail
    ch2 = fabric.FabricChecker(fabric.FabricRules(expected_rate_gbps=400))
    assert [x.event_type for x in ch2.check({p: _port(rate=200.0)}, 0.0)] == [events.IB_LINK_DEGRADED]


def test_missing_or_refused_ethtool_is_said_once_in_status_never_a_crash(tmp_path, node, caplog):
    fb, _ = node
    cfg, _ = _cfg(tmp_path, fb, None, fabric={"ethtool": str(tmp_path / "no-such-ethtool")})
    d = Daemon(cfg, gpu=FakeSource(count=8))
    with caplog.at_level("WARNING", logger="sentinel.probe"):
        for i in range(3):
            d.on_fabric(d.read_fabric(), float(i))
    st = d.snapshot()["hardware"]
    assert st["commands"] == {
        "%s -S" % (tmp_path / "no-such-ethtool"): "%s: not installed (not found on PATH)"
        % (tmp_path / "no-such-ethtool"),
        "%s -m" % (tmp_path / "no-such-ethtool"): "%s: not installed (not found on PATH)"
        % (tmp_path / "no-such-ethtool"),
    }
    assert len([r for r in caplog.records if r.getMessage() == "reading_command_failed"]) == 2  # once each
    et = FakeEthtool(tmp_path / "bin2")  # present, but the module read is refused (no CAP_NET_ADMIN)
    for i in range(8):
        et.stats("ens%dnp0" % (i + 1))
    cfg, _ = _cfg(tmp_path, fb, et)
    d = Daemon(cfg, gpu=FakeSource(count=8))
    d.on_fabric(d.read_fabric(), 0.0)
    assert "not permitted" in d.snapshot()["hardware"]["commands"]["%s -m" % et.path]
    assert d.recent == []
    # a module read refused from the start is the node's set-up (no CAP_NET_ADMIN): /status only, no alarm; one
    # that answered and then stops is a dead source of the probe (source_health), its own P1
    d.evaluate_sources()
    assert d.recent == []
    sources = {x["name"]: x["state"] for x in d.snapshot()["sources"] if x["kind"] == "ethtool"}
    assert sources == {"%s -S ens%dnp0" % (et.path, i + 1): "ok" for i in range(8)}
    et.set("ens3np0", "m", "ethtool-m-sfp-normal.txt")
    d.on_fabric(d.read_fabric(), 1.0)
    (et.dir / "ens3np0.m").unlink()  # the module read that worked is refused now
    d.on_fabric(d.read_fabric(), 2.0)
    assert {x["name"]: x["state"] for x in d.snapshot()["sources"]}["%s -m ens3np0" % et.path] == "down"
    d.evaluate_sources()
    (ev,) = d.recent
    assert ev["event_type"] == "PROBE_SOURCE_DOWN" and ev["source"] == "ethtool"
    assert "not permitted" in ev["detail"] and "ens3np0" in ev["detail"]
    assert (
        speech(parse_event(ev), "en")
        == "Rack A03 node gpu-worker-08: probe blind, NIC statistics and optics unreadable"
    )


def test_unreadable_sysfs_root_is_in_status(tmp_path):
    cfg, _ = _cfg(tmp_path)
    d = Daemon(cfg, gpu=FakeSource(count=1))
    assert d.snapshot()["hardware"]["fabric"] is False  # off where the source does not exist
    r = d.read_fabric()
    d.on_fabric(r, 0.0)
    assert list(d.snapshot()["hardware"]["errors"]["fabric"].values()) == ["No such file or directory"]


# --- end to end: probe -> gateway -> emulator ---------------------------------------------------------------------
@pytest.fixture
def chain(tmp_path):
    pytest.importorskip("emulator.harness")
    from test_probes_e2e import Gateway

    from emulator.harness import Harness

    with Harness(str(tmp_path / "emu")) as h:
        gw = Gateway(h)
        try:
            yield h, gw
        finally:
            gw.close()


def _shown(h, key, level, timeout):
    st = h.wait_for(lambda s: any(a["key"] == key and a["level"] == level for a in s["active"]), timeout, 0.02)
    return time.monotonic(), next(a for a in st["active"] if a["key"] == key)


def _sent(d, etype):
    return [e for e in d.recent if e["event_type"] == etype]


@pytest.mark.serial  # asserts a latency bound
def test_port_down_is_p0_on_the_emulator_and_recovers(tmp_path, node, chain):
    h, gw = chain
    fb, et = node
    cfg, _ = _cfg(tmp_path, fb, et, gw)
    d = Daemon(cfg, gpu=FakeSource(count=8)).start()
    try:
        time.sleep(0.5)  # the ports were seen ACTIVE
        t0 = time.monotonic()
        fb.port("mlx5_3", state="DOWN", phys="Polling")
        t, a = _shown(h, "A03:gpu-worker-08:IB_PORT_DOWN:mlx5_3", "P0", 3)
        print("IB_PORT_DOWN shown %.3fs after the port went down" % (t - t0))
        assert t - t0 < 2.0
        assert a["text"] == "网络致命故障，机架 A03 节点 gpu-worker-08 InfiniBand 端口 mlx5_3 断开"
        (ev,) = _sent(d, "IB_PORT_DOWN")
        assert (
            speech(parse_event(ev), "en")
            == "Rack A03 node gpu-worker-08: fatal network fault, InfiniBand port mlx5_3 is down"
        )
        fb.port("mlx5_3", state="ACTIVE", phys="LinkUp")
        h.wait_for(
            lambda s: all(a["level"] == "NORMAL" for a in s["active"] if a["key"].endswith("IB_PORT_DOWN:mlx5_3")), 5
        )
        assert len(_sent(d, "IB_PORT_DOWN")) == 1
    finally:
        d.close()


@pytest.mark.serial
def test_hot_module_is_the_rfc_p1_and_a_hang_after_it_says_so(tmp_path, node, chain):
    from host_client.beat import Beat

    h, gw = chain
    fb, et = node
    cfg, _ = _cfg(tmp_path, fb, et, gw, rack="A04")
    d = Daemon(cfg, gpu=FakeSource(count=8)).start()
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        et.set("ens6np0", "m", "ethtool-m-sfp-hot.txt")  # mlx5_5's transceiver over its own warning threshold
        t, a = _shown(h, "A04:gpu-worker-08:OPTICS_WARNING:mlx5_5", "P1", 3)
        print("OPTICS_WARNING shown %.3fs after the module ran hot" % (t - t0))
        assert t - t0 < 2.0
        assert (
            a["text"] == "光模块误码告警，机架 A04 节点 gpu-worker-08 网卡端口 mlx5_5 光模块或链路报错，请检查光纤跳线"
        )
        st = h.status()
        assert a["pattern"] == "breathe" if "pattern" in a else st["shown"]["level"] == "P1"
        # the RFC's T+04s: the ring hangs
        b = Beat(path=d.cfg["progress"]["socket"], job="llama-70b", rank=0, local_rank=0)
        for i in range(12):
            b.beat(i)
            time.sleep(0.15)
        _, a = _shown(h, "A04:gpu-worker-08:PROGRESS_STALL", "P0", 5)
        # the P0 says where to look first, in the room's words
        assert a["text"] == (
            "训练进度停滞，机架 A04 节点 gpu-worker-08 训练步数停止增长，此前网卡端口 mlx5_5 光模块误码"
        )
        (stall,) = _sent(d, "PROGRESS_STALL")
        assert stall["detail"].startswith("after optical-module errors on mlx5_5")
        assert stall["after"] == "after optical-module errors on mlx5_5"
        assert speech(parse_event(stall), "en") == (
            "Rack A04 node gpu-worker-08: training stalled, no progress, after optical-module bit errors on port mlx5_5"
        )
        et.set("ens6np0", "m", "ethtool-m-sfp-normal.txt")  # the module cools: the source says healthy
        h.wait_for(
            lambda s: all(a["level"] == "NORMAL" for a in s["active"] if a["key"].endswith("OPTICS_WARNING:mlx5_5")),
            5,
        )
    finally:
        d.close()


@pytest.mark.serial
def test_pfc_storm_and_bit_errors_are_p1_and_clear(tmp_path, node, chain):
    h, gw = chain
    fb, et = node
    cfg, _ = _cfg(tmp_path, fb, et, gw, rack="A05")
    d = Daemon(cfg, gpu=FakeSource(count=8)).start()
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        et.stats("ens2np0", tx_pause_storm_warning_events=1)  # the NIC's own pause-storm detector fired
        fb.add_counter("mlx5_6", "symbol_error", 50)
        t, a = _shown(h, "A05:gpu-worker-08:NIC_CONGESTION:mlx5_1", "P1", 3)
        assert t - t0 < 2.0
        assert "mlx5_1" in a["text"] and "PFC" in a["text"]
        _shown(h, "A05:gpu-worker-08:OPTICS_WARNING:mlx5_6", "P1", 3)
        # no new storm events and no new symbol errors for a window: both clear
        h.wait_for(
            lambda s: all(
                a["level"] == "NORMAL"
                for a in s["active"]
                if a["key"].endswith(("NIC_CONGESTION:mlx5_1", "OPTICS_WARNING:mlx5_6"))
            ),
            6,
        )
    finally:
        d.close()


@pytest.mark.serial
def test_switch_fabric_manager_aer_and_gpu_init_lines_reach_the_room(tmp_path, node, chain):
    h, gw = chain
    fb, et = node
    fm = tmp_path / "fabricmanager.log"
    fm.write_text("[Jun 10 2024 09:12:01] [INFO] [tid 2201] Fabric Manager version 535.154.05 is running\n")
    cfg, kern = _cfg(tmp_path, fb, et, gw, rack="A06")
    d = Daemon(cfg, gpu=FakeSource(count=8)).start()
    try:
        time.sleep(0.4)
        port = fb.root_port_of(fb.gpu_bdf[2])
        t0 = time.monotonic()
        with open(kern, "a") as f:
            f.write("nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 11001, Fatal, ingress invalid command\n")
            f.write("pcieport %s: AER: Uncorrected (Fatal) error received: %s\n" % (port, port))
            f.write("NVRM: GPU 0000:78:00.0: RmInitAdapter failed! (0x62:0x40:2168)\n")  # GPU 6's bus
        with open(fm, "a") as f:
            f.write(_rows("fabricmanager_lines.jsonl")[0]["line"] + "\n")
        for key in (
            "A06:gpu-worker-08:NVSWITCH_FATAL:nvswitch0",
            "A06:gpu-worker-08:GPU_LOST:gpu2",
            "A06:gpu-worker-08:NIC_FAILURE:mlx5_2",
            "A06:gpu-worker-08:FABRIC_MANAGER_ERROR",
        ):
            t, a = _shown(h, key, "P0", 3)
            assert t - t0 < 2.0, key
        # GPU 6's init failure came within the RFC's debounce window of GPU 2's loss: the gateway attaches it to
        # that alarm (GPU_SCOPED debounce, docs/GATEWAY.md); the probe sent it and the gateway took it
        assert {e["gpu_index"] for e in _sent(d, "GPU_LOST")} == {2, 6}
        assert d.sender.rejected == 0
        texts = {a["key"]: a["text"] for a in h.status()["active"]}
        assert texts["A06:gpu-worker-08:NVSWITCH_FATAL:nvswitch0"] == (
            "硬件致命故障，机架 A06 节点 gpu-worker-08 NVSwitch nvswitch0 致命错误"
        )
        assert (
            texts["A06:gpu-worker-08:GPU_LOST:gpu2"]
            == "硬件致命故障，机架 A06 节点 gpu-worker-08 第 2 号卡失联，PCI 0000:38:00.0"
        )
    finally:
        d.close()


@pytest.mark.serial  # asserts a latency bound
def test_hot_module_through_hwmon_where_ethtool_m_is_refused(tmp_path, node, chain):
    """The shipped unit has no CAP_NET_ADMIN: ethtool -m is refused, the NIC's hwmon module sensor still warns."""
    h, gw = chain
    fb, _ = node
    et = FakeEthtool(tmp_path / "bin-nocap")  # -S answers, -m is refused as without CAP_NET_ADMIN
    for i in range(8):
        et.stats("ens%dnp0" % (i + 1))
    cfg, _ = _cfg(tmp_path, fb, et, gw, rack="A06")
    d = Daemon(cfg, gpu=FakeSource(count=8)).start()
    try:
        time.sleep(0.5)
        assert d.recent == []  # eight modules at 62 C under a crit of 75 C: silent
        t0 = time.monotonic()
        fb.module_temp("mlx5_4", 76.5)  # mlx5_4's transceiver over the firmware's module threshold
        t, a = _shown(h, "A06:gpu-worker-08:OPTICS_WARNING:mlx5_4", "P1", 3)
        print("OPTICS_WARNING (hwmon) shown %.3fs after the module ran hot" % (t - t0))
        assert t - t0 < 2.0
        assert a["text"] == (
            "光模块误码告警，机架 A06 节点 gpu-worker-08 网卡端口 mlx5_4 光模块或链路报错，请检查光纤跳线"
        )
        (ev,) = _sent(d, "OPTICS_WARNING")
        assert ev["component"] == "mlx5_4" and "temperature 76.5 C (its critical threshold 75.0 C" in ev["detail"]
        assert "mlx5_4" in speech(parse_event(ev), "en")
        hw = d.snapshot()["hardware"]
        assert hw["optics"]["mlx5_4"] == ("hwmon5 (temperature); rx power unwatched: ethtool -m refused or absent")
        assert "not permitted" in hw["commands"]["%s -m" % et.path]
        fb.module_temp("mlx5_4", 74.5)  # under crit but within the 1 C hysteresis: still standing
        time.sleep(0.6)
        assert [a["level"] for a in h.status()["active"] if a["key"].endswith("OPTICS_WARNING:mlx5_4")] == ["P1"]
        fb.module_temp("mlx5_4", 73.5)  # cooled: the source says healthy
        h.wait_for(
            lambda s: all(a["level"] == "NORMAL" for a in s["active"] if a["key"].endswith("OPTICS_WARNING:mlx5_4")),
            5,
        )
        assert len(_sent(d, "OPTICS_WARNING")) == 1
    finally:
        d.close()


def test_hot_module_seen_by_ethtool_and_hwmon_is_one_incident(tmp_path, node):
    fb, et = node
    cfg, _ = _cfg(tmp_path, fb, et)
    d = Daemon(cfg, gpu=FakeSource(count=8))
    d.on_fabric(d.read_fabric(), 0.0)
    assert d.snapshot()["hardware"]["optics"]["mlx5_2"] == "ethtool -m (temperature, rx power); hwmon3 (temperature)"
    et.set("ens3np0", "m", "ethtool-m-sfp-hot.txt")  # both paths see mlx5_2's module hot
    fb.module_temp("mlx5_2", 76.0)
    for t in (1.0, 2.0):
        d.on_fabric(d.read_fabric(), t)
    (ev,) = d.recent
    assert ev["event_type"] == "OPTICS_WARNING" and ev["component"] == "mlx5_2"
    assert "temperature 71.5 C (its warning threshold 70.0 C)" in ev["detail"]  # the module's own words first
    et.set("ens3np0", "m", "ethtool-m-sfp-normal.txt")  # ethtool cool, hwmon still over crit: still one incident
    d.on_fabric(d.read_fabric(), 3.0)
    assert len(d.recent) == 1
    fb.module_temp("mlx5_2", 70.0)  # both cool: one RECOVERED
    d.on_fabric(d.read_fabric(), 4.0)
    assert [(e["event_type"], e.get("recovers")) for e in d.recent[1:]] == [("RECOVERED", "OPTICS_WARNING")]
    # silence is no recovery: a hot module whose hwmon vanished stays raised
    fb.module_temp("mlx5_2", 80.0)
    d.on_fabric(d.read_fabric(), 5.0)
    assert len(d.recent) == 3
    import shutil

    shutil.rmtree(fb.hwmon)
    d.on_fabric(d.read_fabric(), 6.0)
    assert len(d.recent) == 3 and not fb.hwmon.exists()


def test_an_unreadable_module_sensor_is_said_in_status_and_is_no_fault(tmp_path, node):
    fb, et = node
    cfg, _ = _cfg(tmp_path, fb, et)
    d = Daemon(cfg, gpu=FakeSource(count=8))
    d.on_fabric(d.read_fabric(), 0.0)
    sensor = fb.hwmon / "hwmon1" / "temp2_input"  # mlx5_0's module sensor (hwmon0 is the ACPI zone)
    sensor.unlink()  # its firmware access fails (as an EIO would)
    d.on_fabric(d.read_fabric(), 1.0)
    st = d.snapshot()
    assert st["hardware"]["errors"]["hwmon"] == {str(sensor): "No such file or directory"}
    assert "fabric" not in st["hardware"]["errors"] and d.recent == []
    assert {x["state"] for x in st["sources"] if x["kind"] == "fabric"} == {"ok"}


def test_hwmon_forms():
    """The channel the hwmon path takes: the firmware's "Module<N>", or "sensor<64+N>" where it gave no name."""
    assert fabric._module_channel("Module0") and fabric._module_channel("sensor64")
    assert not fabric._module_channel("asic") and not fabric._module_channel("sensor1")
    hot = {"temp_c": 75.0, "crit_c": 75.0, "label": "Module0", "hwmon": "hwmon3"}
    assert fabric._sensor_problem(hot, None, 1.0) == "temperature 75.0 C (its critical threshold 75.0 C, hwmon Module0)"
    assert fabric._sensor_problem(dict(hot, crit_c=0.0), None, 1.0) is None  # no threshold: no verdict


def test_forty_benign_samples_stay_silent(tmp_path, node):
    """Idle ports that were never up, counters that only reset or creep, modules at normal temperature, corrected
    AER at a low rate, ordinary PFC pauses, chatter lines: >= 40 polls, not one event."""
    fb, et = node
    fb.port("mlx5_7", state="DOWN", phys="Polling")  # never cabled: DOWN from the first look
    cfg, _ = _cfg(tmp_path, fb, et, fabric={"window_s": 60.0})
    d = Daemon(cfg, gpu=FakeSource(count=8))
    benign = [
        lambda i: fb.counter("mlx5_0", "symbol_error", 0),  # reset by the subnet manager
        lambda i: fb.counter("mlx5_1", "port_xmit_wait", 1000 * i),  # congestion ticks: not watched as an error
        lambda i: fb.add_counter("mlx5_2", "np_cnp_sent", 500),  # congestion control at work
        lambda i: fb.aer_corrected(fb.gpu_bdf[1], i),  # one corrected error per poll: far below a storm
        lambda i: et.stats("ens4np0", rx_prio3_pause=1200 + 10 * i, rx_prio3_pause_duration=3400 + 200 * i),
        lambda i: et.set("ens5np0", "m", "ethtool-m-sfp-normal.txt"),
        lambda i: fb.port("mlx5_7", state="INIT" if i % 2 else "DOWN", phys="Polling"),  # never ACTIVE
        lambda i: fb.add_counter("mlx5_4", "port_rcv_errors", 1 if i % 10 == 0 else 0),  # a stray error a window
        lambda i: fb.module_temp("mlx5_3", 60 + i % 15),  # a warm module, under its hwmon crit (75 C)
        lambda i: fb.module_temp("mlx5_6", 0 if i % 2 else 61),  # no module in the cage: its sensor reads 0
    ]
    lines = [r["line"] for r in _rows("kernel_lines.jsonl") if r["event_type"] is None]
    for i in range(48):
        benign[i % len(benign)](i)
        d.on_fabric(d.read_fabric(), float(i))
        d.on_pcie(d.read_pcie(), float(i))
        d.on_kernel_line(lines[i % len(lines)], float(i))
    assert d.hw_polls >= 40
    assert d.recent == [], d.recent
    assert 'sentinel_probe_pcie_corrected_errors{device="%s"} 43' % fb.gpu_bdf[1] in d.metrics()


def test_corrected_aer_storm_is_p1_and_clears(tmp_path, node):
    fb, et = node
    cfg, _ = _cfg(tmp_path, fb, et, pcie={"window_s": 10.0, "corrected_storm": 100})
    d = Daemon(cfg, gpu=FakeSource(count=8))
    bdf = fb.gpu_bdf[4]
    for i, total in enumerate([5, 10, 400, 800]):
        fb.aer_corrected(bdf, total)
        d.on_pcie(d.read_pcie(), float(i))
    (ev,) = _sent(d, "PCIE_AER_STORM")
    assert ev["component"] == bdf and "(GPU 4)" in ev["detail"]
    assert speech(parse_event(ev), "en").startswith("Rack A03 node gpu-worker-08: PCIe warning, PCIe device %s" % bdf)
    for i in range(4, 20):
        d.on_pcie(d.read_pcie(), float(i))
    assert [e["recovers"] for e in d.recent if e["event_type"] == "RECOVERED"] == ["PCIE_AER_STORM"]


def test_every_new_type_has_both_tables_and_words():
    from host_client.gateway.events import EVENT_TYPES

    new = [t for t in events.EVENT_TYPES if t not in ("RECOVERED",) and t in events.LEVELS]
    for t in new:
        spec = EVENT_TYPES[t]
        assert spec["zh"] and spec["en"] and spec["zh_phrase"] and spec["en_phrase"], t
    assert Path(__file__).name in (Path(__file__).parent / "README.md").read_text()


# --- GPU memory health, throttling, init failures (NVML fakes and nvidia-smi -q) ----------------------------------
def test_smi_q_sections():
    from host_client.probes.gpu_health import SW_POWER_CAP, parse_smi_q

    (h,) = parse_smi_q((FIXTURES / "smi-q-remap-pending.txt").read_text()).values()
    assert h == {"remap": (1, 0, True, False), "pages_pending": False, "ecc_unc": 0, "reasons": SW_POWER_CAP}


def test_smi_source_health_and_no_devices_found_is_every_gpu_lost(tmp_path):
    from host_client.probes.gpu_source import SmiSource

    csv = "0, 00000000:18:00.0, 5, 16, 60, 97, P0, 5, 16, 550.00, 700.00\n"
    answer = {"csv": csv}

    def run(argv):
        return (FIXTURES / "smi-q-remap-pending.txt").read_text() if "-q" in argv else answer["csv"]

    src = SmiSource(runner=run)
    cfg, _ = _cfg(tmp_path, gpu_health={"memory_every": 1})
    d = Daemon(cfg, gpu=src)
    d.sample_gpus(0.0)
    (ev,) = d.recent
    assert ev["event_type"] == "GPU_RESET_PENDING" and ev["gpu_index"] == 0
    assert speech(parse_event(ev), "en") == (
        "Rack A03 node gpu-worker-08: GPU memory warning, "
        "GPU 0 needs a reset at the next drain to apply a memory repair"
    )
    # the driver lost the GPU (RmInitAdapter failed, issue #789): nvidia-smi now says "No devices were found"
    answer["csv"] = "No devices were found\n"
    d.sample_gpus(1.0)
    assert [e["event_type"] for e in d.recent[1:]] == ["GPU_LOST"] and d.recent[1]["gpu_index"] == 0


@pytest.mark.serial
def test_remap_ecc_and_throttle_through_nvml_reach_the_room_and_clear(tmp_path, chain):
    import pynvml
    from probe_fakes import FakeNvml

    from host_client.probes.gpu_source import NvmlSource

    h, gw = chain
    nv = FakeNvml(count=8)
    cfg, _ = _cfg(
        tmp_path, gw=gw, rack="A07", gpu={"interval_s": 0.2}, gpu_health={"throttle_s": 0.6, "memory_every": 1}
    )
    d = Daemon(cfg, gpu=NvmlSource(nvml=nv)).start()
    try:
        nv.reasons[1] = pynvml.nvmlClocksEventReasonSwPowerCap  # the power limit at work: not a fault
        time.sleep(1.0)
        assert d.recent == []
        t0 = time.monotonic()
        nv.remap[2] = [0, 1, 1, 0]  # an uncorrectable error remapped a row: pending until a reset
        nv.remap[5] = [0, 3, 0, 1]  # a remap failed: no spare row
        nv.reasons[3] = pynvml.nvmlClocksEventReasonHwSlowdown | pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
        t, a = _shown(h, "A07:gpu-worker-08:GPU_MEMORY_ERROR:gpu5", "P0", 3)
        assert t - t0 < 2.0
        assert a["text"] == "硬件致命故障，机架 A07 节点 gpu-worker-08 第 5 号卡显存不可纠正错误"
        _shown(h, "A07:gpu-worker-08:GPU_RESET_PENDING:gpu2", "P1", 3)
        t, a = _shown(h, "A07:gpu-worker-08:GPU_THROTTLE:gpu3", "P1", 3)
        assert t - t0 < 2.0
        (thr,) = _sent(d, "GPU_THROTTLE")
        assert thr["reasons"] == "HW slowdown, HW power brake"
        nv.remap[2] = [0, 1, 0, 0]  # reset: the remap took effect
        nv.reasons[3] = 0
        h.wait_for(
            lambda s: all(
                a["level"] == "NORMAL"
                for a in s["active"]
                if a["key"].endswith(("GPU_RESET_PENDING:gpu2", "GPU_THROTTLE:gpu3"))
            ),
            5,
        )
        assert not _sent(d, "GPU_LOST")
    finally:
        d.close()


def test_a_short_hw_slowdown_and_the_sw_power_cap_stay_silent():
    from host_client.probes.gpu_health import HW_SLOWDOWN, SW_POWER_CAP, HealthChecker

    hc = HealthChecker(throttle_s=10.0)
    for t in range(40):  # 40 samples: power cap throughout, a 5 s HW slowdown blip in the middle
        bits = SW_POWER_CAP | (HW_SLOWDOWN if 10 <= t < 15 else 0)
        health = {0: {"reasons": bits, "remap": (2, 0, False, False), "pages_pending": False, "ecc_unc": 0}}
        assert hc.check(health, float(t)) == []


@pytest.mark.serial
def test_slower_link_aer_storm_and_nonfatal_sxid_are_p1_in_the_room(tmp_path, node, chain):
    h, gw = chain
    fb, et = node
    cfg, kern = _cfg(tmp_path, fb, et, gw, rack="A08", pcie={"corrected_storm": 100})
    d = Daemon(cfg, gpu=FakeSource(count=8)).start()
    try:
        time.sleep(0.5)  # every port seen ACTIVE at 400 Gb/sec
        t0 = time.monotonic()
        fb.port("mlx5_4", rate="200 Gb/sec (4X HDR)")  # retrained at half the rate
        fb.aer_corrected(fb.nic_bdf["mlx5_6"], 5000)
        with open(kern, "a") as f:
            f.write(
                "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error\n"
            )
        for key in (
            "A08:gpu-worker-08:IB_LINK_DEGRADED:mlx5_4",
            "A08:gpu-worker-08:PCIE_AER_STORM:%s" % fb.nic_bdf["mlx5_6"],
            "A08:gpu-worker-08:NVSWITCH_WARNING:nvswitch3 link 32",
        ):
            t, a = _shown(h, key, "P1", 3)
            assert t - t0 < 2.0, key
        (storm,) = _sent(d, "PCIE_AER_STORM")
        assert "(NIC mlx5_6)" in storm["detail"]
        fb.port("mlx5_4", rate="400 Gb/sec (4X NDR)")
        h.wait_for(
            lambda s: all(a["level"] == "NORMAL" for a in s["active"] if a["key"].endswith("IB_LINK_DEGRADED:mlx5_4")),
            5,
        )
        # the totals stop rising: the storm ends with the window (2 s here)
        h.wait_for(
            lambda s: all(a["level"] == "NORMAL" for a in s["active"] if "PCIE_AER_STORM" in a["key"]),
            6,
        )
    finally:
        d.close()


def test_status_and_metrics_serve_the_hardware_sources(tmp_path, node):
    """/status is JSON with the sources' state; /metrics has the counters (real HTTP on loopback)."""
    import urllib.request

    fb, et = node
    cfg, _ = _cfg(tmp_path, fb, et, status={"listen": "127.0.0.1:0"}, node={"gateway": "http://127.0.0.1:9"})
    d = Daemon(cfg, gpu=FakeSource(count=8)).start()
    try:
        deadline = time.monotonic() + 5
        while d.hw_polls < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        host, port = d.status_address
        st = json.loads(urllib.request.urlopen("http://%s:%d/status" % (host, port), timeout=5).read())
        assert st["hardware"]["fabric"] is True and st["hardware"]["fabric_ports"] == 8
        assert st["hardware"]["commands"] == {} and st["hardware"]["errors"] == {}
        text = urllib.request.urlopen("http://%s:%d/metrics" % (host, port), timeout=5).read().decode()
        assert 'sentinel_probe_fabric_port_counter{device="mlx5_0",port="1",counter="symbol_error"} 0' in text
        assert 'sentinel_probe_module_temperature_celsius{device="mlx5_0",sensor="Module0"} 62.0' in text
        assert 'sentinel_probe_module_temperature_crit_celsius{device="mlx5_0",sensor="Module0"} 75.0' in text
        assert st["hardware"]["optics"]["mlx5_0"] == "ethtool -m (temperature, rx power); hwmon1 (temperature)"
        assert 'sentinel_probe_pcie_corrected_errors{device="%s"} 0' % fb.gpu_bdf[0] in text
    finally:
        d.close()


def test_once_reads_the_fabric_and_memory_and_exits_1_on_a_weak_module(tmp_path, node, monkeypatch):
    import io

    from probe_fakes import FakeNvml

    from host_client.probes import cli
    from host_client.probes.gpu_source import NvmlSource

    fb, et = node
    cfg, _ = _cfg(tmp_path, fb, et)
    nv = FakeNvml(count=8)
    out = io.StringIO()
    monkeypatch.setattr(cli, "_open_gpu", lambda cfg, required: (NvmlSource(nvml=nv), None))  # the fake NVML
    assert cli.run_once(cfg, out=out) == 0
    assert "fabric" in out.getvalue() and "8 ports, 8 ACTIVE" in out.getvalue()
    et.set("ens3np0", "m", "ethtool-m-sfp-rxlow.txt")  # mlx5_2's rx power under its own low warning threshold
    nv.remap[1] = [0, 1, 1, 0]
    out = io.StringIO()
    assert cli.run_once(cfg, out=out) == 1
    text = out.getvalue()
    assert "OPTICS_WARNING" in text and "rx power 0.0501 mW" in text
    assert "GPU_RESET_PENDING" in text
    # without CAP_NET_ADMIN: the hwmon path alone still finds a hot module in one look
    cfg, _ = _cfg(tmp_path, fb, None, fabric={"ethtool": ""})
    fb.module_temp("mlx5_6", 77.0)
    nv.remap[1] = [0, 0, 0, 0]
    out = io.StringIO()
    assert cli.run_once(cfg, out=out) == 1
    assert "OPTICS_WARNING" in out.getvalue() and "temperature 77.0 C (its critical threshold 75.0 C" in out.getvalue()


def test_a_port_whose_device_vanished_is_down_and_an_unreadable_tree_keeps_what_stood(tmp_path, node):
    import shutil

    fb, et = node
    cfg, _ = _cfg(tmp_path, fb, et)
    d = Daemon(cfg, gpu=FakeSource(count=8))
    d.on_fabric(d.read_fabric(), 0.0)
    shutil.rmtree(fb.ib / "mlx5_2")  # the HCA fell off the bus: its sysfs directory is gone
    d.on_fabric(d.read_fabric(), 1.0)
    (ev,) = d.recent
    assert ev["event_type"] == "IB_PORT_DOWN" and ev["component"] == "mlx5_2" and "no longer in sysfs" in ev["detail"]
    (fb.ib / "mlx5_3" / "ports" / "1" / "state").unlink()  # a read error: mlx5_3 unknown this time, not down
    d.on_fabric(d.read_fabric(), 2.0)
    assert len(d.recent) == 1  # mlx5_2 still down (not cleared by an unreadable poll), mlx5_3 not raised
    assert "mlx5_3" in str(d.snapshot()["hardware"]["errors"]["fabric"])
    (src,) = [x for x in d.snapshot()["sources"] if x["kind"] == "fabric"]
    assert src["state"] == "down" and "mlx5_3" in src["error"]
    fb.port("mlx5_3", state="ACTIVE")  # readable again
    d.on_fabric(d.read_fabric(), 3.0)
    (src,) = [x for x in d.snapshot()["sources"] if x["kind"] == "fabric"]
    assert src["state"] == "ok"
