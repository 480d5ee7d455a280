"""The whole Prometheus path with real servers: Debian's prometheus scrapes a dcgm-exporter-format endpoint this
test serves (values changed by the test), the gateway and the emulator, with the shipped scrape configuration
and rules; a rule fires; the real Alertmanager, with the shipped receiver and routes, posts to our gateway (a
real sentinel-gateway process); the emulator (its real CLI, headless, voice to --wav-dir) shows and speaks it;
the metric goes back to normal, the alert resolves, the terminal turns green. Meanwhile a second gateway
address answers nothing: SentinelGatewayDown fires after its minute and reaches the same terminal through the
second gateway (Alertmanager's fallback route), the dead-man's switch for the alarm path. Short scrape,
evaluation and group intervals (and a 2 s resend delay, so the dead-man alert that fired before Prometheus found
its Alertmanager is re-sent soon) keep the wall time down; bench/bench_prometheus.py measures the shipped ones."""

import json
import os
import time
import urllib.parse

import pytest
from deploy_live import (
    ALERTMANAGER,
    PROMETHEUS,
    DcgmExporter,
    Sink,
    alertmanager_config,
    get,
    prometheus_config,
    start_alertmanager,
    start_emulator,
    start_gateway,
    start_prometheus,
    stop,
    wait_status,
)

from testkit.net import free_port

for _b in (PROMETHEUS, ALERTMANAGER):
    if not os.path.exists(_b):
        pytest.skip("%s is not installed (tools/install-system-deps.sh installs it)" % _b, allow_module_level=True)


def query(prom_url, expr):
    _c, body = get(prom_url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    return json.loads(body)["data"]["result"]


def wait_query(prom_url, expr, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r = query(prom_url, expr)
        if r:
            return r
        time.sleep(0.2)
    raise AssertionError("Prometheus: %s still empty after %.0f s" % (expr, timeout))


def test_dcgm_xid_through_prometheus_and_alertmanager_lights_speaks_and_clears(tmp_path):
    wav = tmp_path / "wav"
    dcgm, deadman = DcgmExporter(), Sink()
    procs = []
    try:
        emu, emu_url, emu_cfg = start_emulator(tmp_path / "emu", wav_dir=str(wav))
        procs.append(emu)
        gw, gw_url = start_gateway(tmp_path, emu_url, emu_cfg["key_id"], emu_cfg["secret"])
        procs.append(gw)
        # the fallback: a second gateway, its own process and state, delivering to the same room
        (tmp_path / "gw2").mkdir()
        gw2, gw2_url = start_gateway(tmp_path / "gw2", emu_url, emu_cfg["key_id"], emu_cfg["secret"])
        procs.append(gw2)
        dead = "127.0.0.1:%d" % free_port()  # a gateway that died: nothing listens there
        am, am_url = start_alertmanager(
            tmp_path, alertmanager_config(tmp_path, gw_url, gw2_url, deadman.url, group_wait="1s", group_interval="1s")
        )
        procs.append(am)
        prom, prom_url = start_prometheus(
            tmp_path,
            prometheus_config(
                tmp_path,
                scrape_s=1,
                eval_s=1,
                am_address=am_url.split("//")[1],
                gateway_addresses=[gw_url.split("//")[1], dead],
                dcgm_addresses=[dcgm.address],
                terminal_addresses=[emu_url.split("//")[1]],
            ),
            extra_args=["--rules.alert.resend-delay=2s"],
        )
        procs.append(prom)

        # Prometheus scrapes all three, with the shipped relabelling (rack from the targets file, node_host)
        wait_query(prom_url, 'up{job="dcgm-exporter",rack="A03",node_host="127.0.0.1"} == 1')
        wait_query(prom_url, 'up{job="sentinel-gateway"} == 1')
        wait_query(prom_url, 'up{job="sentinel-gateway",instance="%s"} == 0' % dead)
        wait_query(prom_url, 'up{job="sentinel-terminal",terminal="emu"} == 1')
        wait_query(prom_url, 'DCGM_FI_DEV_XID_ERRORS{gpu="3",Hostname="gpu-worker-08"} == 0')
        assert emulator_quiet(emu_url)

        # GPU 3 falls off the bus: dcgm-exporter's XID gauge goes to 79 -> GPUXidFatal (critical) -> P0
        dcgm.set("DCGM_FI_DEV_XID_ERRORS", 3, 79, "GPU has fallen off the bus")
        t0 = time.monotonic()
        text = "Fatal XID 79 on gpu-worker-08 GPU 3"
        t1, st = wait_status(emu_url, lambda s: any(a["text"] == text and a["level"] == "P0" for a in s["active"]), 90)
        print("dcgm XID -> P0 on the emulator: %.2f s (scrape 1 s, evaluation 1 s, group_wait 1 s)" % (t1 - t0))
        alarm = [a for a in st["active"] if a["text"] == text][0]
        assert alarm["key"].startswith("am:")
        assert st["shown"]["level"] == "P0" and st["shown"]["color"] == "#FF0000" and st["shown"]["pattern"] == "flash"
        firing = query(prom_url, 'ALERTS{alertname="GPUXidFatal",alertstate="firing"}')
        assert [(a["metric"]["gpu"], a["metric"]["xid"], a["metric"]["severity"]) for a in firing] == [
            ("3", "79", "critical")
        ]

        # ... and says it: the P0's utterance is written as a WAV file
        end = time.monotonic() + 60
        while time.monotonic() < end and not [p for p in wav.glob("*.wav") if p.stat().st_size > 1000]:
            time.sleep(0.2)
        spoken = sorted(p for p in wav.glob("*.wav") if p.stat().st_size > 1000)
        assert spoken, "the P0 was not spoken (no WAV in %s)" % wav

        # the GPU is reset: XID back to 0 -> resolved -> NORMAL for the same key, green
        dcgm.set("DCGM_FI_DEV_XID_ERRORS", 3, 0)
        _t, st = wait_status(
            emu_url, lambda s: {a["key"]: a["level"] for a in s["active"]}.get(alarm["key"]) == "NORMAL", 90
        )
        down_text = "Sentinel gateway %s is down, alarms cannot reach the terminals through it" % dead
        assert not [a for a in st["active"] if a["level"] in ("P0", "P1") and a["text"] != down_text], st["active"]
        if not [a for a in st["active"] if a["text"] == down_text]:
            assert st["shown"]["color"] == "#00FF00" and st["shown"]["pattern"] == "solid"

        # the dead-man's switch reached its own receiver, never the terminal
        end = time.monotonic() + 30
        while time.monotonic() < end and not watchdog_seen(deadman):
            time.sleep(0.2)
        assert watchdog_seen(deadman), (deadman.bodies, get(am_url + "/api/v2/alerts")[1])
        assert not [a for a in st["active"] if "Watchdog" in a["text"] or "alive" in a["text"]]
        # and Prometheus saw the gateway deliver it (its own metrics, scraped)
        wait_query(prom_url, 'sentinel_gateway_alarms_total{job="sentinel-gateway",outcome="delivered"} >= 2')

        # the dead gateway: SentinelGatewayDown (for: 1m), critical, fallback route -> the second gateway -> P0
        _t, st = wait_status(
            emu_url, lambda s: any(a["text"] == down_text and a["level"] == "P0" for a in s["active"]), 120
        )
        assert st["shown"]["level"] == "P0"
        m2 = get(gw2_url + "/metrics")[1]
        assert 'sentinel_gateway_events_total{source="alertmanager",type="firing"} 1' in m2, m2
        m1 = get(gw_url + "/metrics")[1]
        assert 'sentinel_gateway_events_total{source="alertmanager",type="firing"} 1' in m1  # only the XID
    finally:
        for p in reversed(procs):
            stop(p)
        dcgm.close()
        deadman.close()


def emulator_quiet(url):
    from deploy_live import emulator_status

    return not [a for a in emulator_status(url)["active"] if a["level"] in ("P0", "P1")]


def watchdog_seen(sink):
    return any(a["labels"]["alertname"] == "SentinelWatchdog" for b in sink.bodies for a in b["alerts"])
