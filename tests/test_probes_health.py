"""A dead source is an alarm (issue 37): a probe source that cannot be read is refused by --check-config where it can
be, logged once at ERROR, shown by `sentinel-probe status` (text, exit 2), exported as sentinel_probe_source_up, and
reported through a real gateway to the emulator as the probe's own P1; it clears (RECOVERED) once the source works.
Also the small items of the probe's command line: `status` after the global options and in --help, `--once --json`.
"""

import json
import logging
import os
import time
import urllib.request

import pytest

pytest.importorskip("emulator.harness")

from opcheck import run, script
from probe_fakes import FakeSource

from emulator.harness import Harness
from host_client.beat import Beat
from host_client.gateway.config import Config
from host_client.probes import cli, config
from host_client.probes.daemon import Daemon
from testkit.net import free_port

PROBE = script("sentinel-probe", "host_client.probes.cli")
FIX = os.path.join(os.path.dirname(__file__), "fixtures", "probes")
KEY = "A03:gpu-worker-08:PROBE_SOURCE_DOWN"


@pytest.fixture
def chain(tmp_path):
    from gateway_front import ServedGateway

    with Harness(str(tmp_path / "emu")) as h:
        cfg = Config.from_dict(
            {
                "terminals": {"emu": {"url": h.url, "key_id": h.cfg["key_id"], "secret_env": "EMU_SECRET"}},
                "delivery": {"rate_interval_s": 0, "backoff_initial_s": 0.05, "backoff_max_s": 0.2},
            },
            env={"EMU_SECRET": h.cfg["secret"]},
        )
        gw = ServedGateway(cfg)
        try:
            yield h, gw
        finally:
            gw.close(2)


def probe_raw(tmp_path, gateway, port, **over):
    raw = {
        "node": {"rack": "A03", "host": "gpu-worker-08", "gateway": gateway},
        "gpu": {"util_drop": False},
        "xid": {"source": "none"},
        "progress": {"socket": str(tmp_path / "p.sock")},
        "status": {"listen": "127.0.0.1:%d" % port},
        # the test machine's own PCIe and InfiniBand trees are not this fake node's sources (issue 35's sources)
        "pcie": {"enabled": False},
        "fabric": {"enabled": False},
    }
    for k, v in over.items():
        raw.setdefault(k, {}).update(v)
    return raw


def toml_of(raw):
    out = []
    for sect, kv in raw.items():
        out.append("[%s]" % sect)
        for k, v in kv.items():
            out.append("%s = %s" % (k, json.dumps(v)))
    return "\n".join(out) + "\n"


def metric(port, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=3) as r:
        text = r.read().decode()
    return [ln for ln in text.splitlines() if ln.startswith(name)]


def test_a_missing_nccl_log_is_the_probes_own_p1_in_every_place_and_clears_when_it_appears(tmp_path, chain, caplog):
    h, gw = chain
    log_path = tmp_path / "nccl" / "train.log"
    port = free_port()
    raw = probe_raw(tmp_path, gw.url, port, nccl={"logs": [str(log_path)]})
    cfgfile = tmp_path / "probe.toml"
    cfgfile.write_text(toml_of(raw))

    # --check-config says it before the daemon runs: one line, exit 2
    p = run(PROBE + ["--check-config", "-c", str(cfgfile)])
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [
        "sentinel-probe: source error: [nccl] logs: %s does not exist (a log that comes with each job: use a glob "
        "pattern)" % log_path
    ]
    # the unit's pre-start check warns and lets the daemon start, which then tells the room
    p = run(PROBE + ["--check-config", "--warn-sources", "-c", str(cfgfile)])
    assert p.returncode == 0 and "configuration OK" in p.stdout
    assert p.stderr.startswith("sentinel-probe: source warning: [nccl] logs: %s does not exist" % log_path)

    caplog.set_level(logging.INFO, logger="sentinel.probe")
    d = Daemon(config.build(raw), gpu=FakeSource(count=2)).start()
    try:
        # the room: the probe's own P1, in the RFC's order, naming the source
        st = h.wait_for(lambda s: any(a["key"] == KEY and a["level"] == "P1" for a in s["active"]), 5)
        (a,) = [a for a in st["active"] if a["key"] == KEY]
        assert a["text"] == "探针预警，机架 A03 节点 gpu-worker-08 的探针无法读取NCCL 日志"
        # the log: once, at ERROR, the project's one dialect (an event name and its fields), the error in words
        errors = [(r.getMessage(), r.fields) for r in caplog.records if r.levelno == logging.ERROR]
        why = "No such file or directory: %s" % log_path
        assert errors == [("source_down", {"source": str(log_path), "kind": "nccl_log", "error": why})]
        # status, after the global options: the source named, exit 2
        p = run(PROBE + ["-c", str(cfgfile), "status"])
        assert p.returncode == 2, p.stderr
        assert "source nccl_log %s: DOWN: No such file or directory" % log_path in p.stdout
        assert "PROBE_SOURCE_DOWN" in p.stdout and "probe on gpu-worker-08: NCCL log unreadable" in p.stdout
        # the metric
        assert metric(port, "sentinel_probe_source_up{") == [
            'sentinel_probe_source_up{source="gpu",kind="gpu"} 1',
            'sentinel_probe_source_up{source="%s",kind="nccl_log"} 0' % log_path,
            'sentinel_probe_source_up{source="%s",kind="progress"} 1' % (tmp_path / "p.sock"),
        ]

        # the log appears: the source works again, the alarm clears on the emulator
        log_path.parent.mkdir()
        log_path.write_text("")
        h.wait_for(lambda s: all(a["level"] == "NORMAL" for a in s["active"] if a["key"] == KEY), 5)
        assert d.counts["RECOVERED"] == 1
        p = run(PROBE + ["-c", str(cfgfile), "status"])
        assert p.returncode == 0, p.stdout + p.stderr
        assert "DOWN" not in p.stdout
        assert 'sentinel_probe_source_up{source="%s",kind="nccl_log"} 1' % log_path in metric(port, "sentinel_probe")
        ups = [(r.levelno, r.fields) for r in caplog.records if r.getMessage() == "source_up"]
        assert ups == [(logging.INFO, {"source": str(log_path), "kind": "nccl_log"})]
    finally:
        d.close()


def test_an_unreadable_kernel_log_is_refused_by_check_config_and_raised_by_the_daemon(tmp_path):
    kmsg = str(tmp_path / "no-such-kmsg")
    raw = probe_raw(tmp_path, "http://127.0.0.1:9", free_port(), xid={"source": "kmsg", "path": kmsg})
    cfgfile = tmp_path / "probe.toml"
    cfgfile.write_text(toml_of(raw))
    p = run(PROBE + ["--check-config", "-c", str(cfgfile)])
    assert p.returncode == 2
    assert p.stderr.strip() == (
        "sentinel-probe: source error: [xid] source kmsg: cannot read %s: No such file or directory" % kmsg
    )

    class Sink:
        def __init__(self):
            self.events = []

        def start(self):
            return self

        def submit(self, ev):
            self.events.append(ev)

        def close(self):
            pass

    sink = Sink()
    d = Daemon(config.build(raw), sender=sink).start()  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 5
        while not sink.events and time.monotonic() < deadline:
            time.sleep(0.02)
        (ev,) = sink.events
        assert ev["event_type"] == "PROBE_SOURCE_DOWN" and ev["source"] == "kernel_log" and ev["gpu_index"] == -1
        assert ev["detail"] == "probe on gpu-worker-08: kernel log unreadable: No such file or directory: %s" % kmsg
        from host_client.gateway.events import parse_event

        spoken = parse_event(ev)
        assert (
            spoken.level() == 1
            and spoken.text("en") == "Rack A03 node gpu-worker-08: probe blind, kernel log unreadable"
        )
    finally:
        d.close()


def test_gpu_readings_that_stop_are_a_source_down_until_they_come_back(tmp_path):
    flag = tmp_path / "broken"
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n[ -e %s ] && exit 9\ncat %s\n" % (flag, os.path.join(FIX, "smi_full.csv")))
    smi.chmod(0o755)
    from host_client.probes.gpu_source import SmiSource

    raw = probe_raw(tmp_path, "", 0)
    raw["status"]["listen"] = ""
    d = Daemon(config.build(raw), gpu=SmiSource(str(smi)))
    d.sample_gpus(0.0)
    assert d.health.down() == []
    flag.write_text("")
    for i in range(Daemon.GPU_DOWN_AFTER):
        d.sample_gpus(float(i + 1))
    (down,) = d.health.down()
    assert down.kind == "gpu" and "3 samples in a row failed" in down.why
    d.evaluate_sources()
    assert [f.event_type for f in d.conditions.active()] == ["PROBE_SOURCE_DOWN"]
    flag.unlink()
    d.sample_gpus(10.0)
    d.evaluate_sources()
    assert d.health.down() == [] and d.counts["RECOVERED"] == 1
    assert "PROBE_SOURCE_DOWN" not in [f.event_type for f in d.conditions.active()]


def test_a_removed_progress_socket_is_down_then_bound_again_and_beats_arrive(tmp_path):
    raw = probe_raw(tmp_path, "", 0)
    raw["status"]["listen"] = ""
    raw["node"]["gateway"] = "http://127.0.0.1:9"
    d = Daemon(config.build(raw), gpu=None).start()
    try:
        sock = str(tmp_path / "p.sock")
        os.unlink(sock)  # a tmp cleaner
        deadline = time.monotonic() + 5
        while not os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(sock)
        b = Beat(path=sock, job="llama", rank=0, local_rank=0)
        deadline = time.monotonic() + 5
        while not d.tracker.snapshot(time.monotonic()) and time.monotonic() < deadline:
            b.beat(1)
            time.sleep(0.05)
        assert d.tracker.snapshot(time.monotonic()), "no beat reached the rebound socket"
        (src,) = [s for s in d.health.snapshot() if s["kind"] == "progress"]
        assert src["state"] == "ok"
    finally:
        d.close()


def test_status_is_in_help_and_once_json_prints_every_row(tmp_path, capsys):
    p = run(PROBE + ["--help"])
    assert p.returncode == 0 and "status" in p.stdout and "{status}" in p.stdout
    healthy = {
        "devices": [{"index": 0, "bus_id": "00000000:18:00.0", "max_gen": 5, "max_width": 16, "temp_slowdown": 87}],
        "frames": [
            [{"index": 0, "gen": 5, "width": 16, "pstate": 0, "temp": 31, "util": 95}],
            [{"index": 0, "gen": 5, "width": 16, "pstate": 0, "temp": 31, "util": 95}],
            [{"index": 0, "gen": 5, "width": 4, "pstate": 0, "temp": 31, "util": 95}],
        ],
    }
    rp = tmp_path / "r.json"
    rp.write_text(json.dumps(healthy))
    cfgfile = tmp_path / "probe.toml"
    cfgfile.write_text('[gpu]\ninterval_s = 0.05\nconfirm = 3\n[xid]\nsource = "none"\n')
    rc = cli.main(["--once", "--json", "-c", str(cfgfile), "--replay", str(rp)])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 0 and rows, "--once --json printed nothing"
    (gpu,) = [r for r in rows if r["check"] == "gpu"]
    # one degraded reading under load is not a finding yet: the row says so, and what the daemon would do
    assert gpu["status"] == "UNCONFIRMED"
    assert gpu["detail"].endswith(
        "the link reads below its maximum under load in the last reading only: the daemon raises PCIE_DOWNGRADE "
        "after 3 readings in a row"
    )
