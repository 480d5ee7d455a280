"""A real Alertmanager (Debian's prometheus-alertmanager) on loopback posting its webhook to the gateway, which
drives the emulator: a firing alert lights it, the resolved one turns it green."""

import datetime
import json
import os
import subprocess
import time
import urllib.request

import pytest

AM = "/usr/bin/prometheus-alertmanager"
if not os.path.exists(AM):
    pytest.skip("%s is not installed (tools/install-system-deps.sh installs it)" % AM, allow_module_level=True)

from deploy_live import stop  # noqa: E402  (SIGTERM, then SIGKILL after 10 s)
from test_gateway_e2e import GatewayServer, gw_config  # noqa: E402

from emulator.harness import Harness  # noqa: E402
from testkit.net import free_port  # noqa: E402


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def post_alert(am_url, labels, annotations, ends_at=None):
    a = {"labels": labels, "annotations": annotations, "startsAt": iso(time.time() - 1)}
    if ends_at is not None:
        a["endsAt"] = iso(ends_at)
    req = urllib.request.Request(
        am_url + "/api/v2/alerts", json.dumps([a]).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 200


def wait_ready(url, proc, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError("alertmanager exited: %s" % proc.stderr.read().decode(errors="replace")[-2000:])
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("alertmanager not ready")


def test_real_alertmanager_firing_lights_resolved_turns_green(tmp_path):
    with Harness(str(tmp_path / "emu")) as h:
        g = GatewayServer(gw_config(h))
        port = free_port()
        am_url = "http://127.0.0.1:%d" % port
        cfg = tmp_path / "am.yml"
        cfg.write_text(
            "route:\n"
            "  receiver: sentinel\n"
            "  group_by: ['alertname']\n"
            "  group_wait: 1s\n"
            "  group_interval: 1s\n"
            "  repeat_interval: 1h\n"
            "receivers:\n"
            "  - name: sentinel\n"
            "    webhook_configs:\n"
            "      - url: %s/api/v1/alertmanager\n"
            "        send_resolved: true\n" % g.url
        )
        proc = subprocess.Popen(
            [
                AM,
                "--config.file=%s" % cfg,
                "--storage.path=%s" % (tmp_path / "data"),
                "--web.listen-address=127.0.0.1:%d" % port,
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            wait_ready(am_url, proc)
            labels = {
                "alertname": "GPUXidFatal",
                "severity": "critical",
                "rack": "A03",
                "Hostname": "gpu-worker-08",
                "gpu": "3",
            }
            post_alert(am_url, labels, {"summary": "GPU 3 on gpu-worker-08 fell off the bus (XID 79)"})
            st = h.wait_for(lambda s: any(a["level"] == "P0" for a in s["active"]), timeout=20)
            a = [a for a in st["active"] if a["level"] == "P0"][0]
            assert a["key"].startswith("am:") and a["text"] == "GPU 3 on gpu-worker-08 fell off the bus (XID 79)"
            assert st["shown"]["pattern"] == "flash" and st["shown"]["color"] == "#FF0000"
            key = a["key"]

            post_alert(
                am_url,
                labels,
                {"summary": "GPU 3 on gpu-worker-08 fell off the bus (XID 79)"},
                ends_at=time.time() - 0.5,
            )
            st = h.wait_for(lambda s: {x["key"]: x["level"] for x in s["active"]}.get(key) == "NORMAL", timeout=20)
            assert st["shown"]["color"] == "#00FF00" and st["shown"]["pattern"] == "solid"
            m = urllib.request.urlopen(g.url + "/metrics", timeout=5).read().decode()
            assert 'sentinel_gateway_events_total{source="alertmanager",type="firing"}' in m
            assert 'sentinel_gateway_events_total{source="alertmanager",type="resolved"}' in m
        finally:
            stop(proc)
            g.close()
