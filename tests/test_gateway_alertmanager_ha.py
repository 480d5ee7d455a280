"""Issue 12's HA acceptance with the real thing: two Debian `prometheus-alertmanager` instances clustered on loopback
(gossip), each posting its webhook to its own gateway (`sentinel-gateway` processes), both gateways delivering to
one emulator that writes every utterance to a WAV file.

- an alert is shown and spoken once; its resolve turns it green, and it does not go red again within 60 s;
- SIGKILL of one gateway mid-incident, then of one Alertmanager mid-incident: nothing lost, nothing doubled;
- a gateway whose queue cannot be saved answers 503 and says why in /healthz; once it can, a P0 it answered 200 is
  delivered after a SIGKILL and a restart.

Alertmanager's flags are tuned down so this runs in about 80 s: group_wait 1 s, group_interval 2 s, peer timeout
2 s, settle 2 s (the real defaults are 30 s, 5 m, 15 s, 1 m)."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

AM = "/usr/bin/prometheus-alertmanager"
if not os.path.exists(AM):
    pytest.skip("%s is not installed (tools/install-system-deps.sh installs it)" % AM, allow_module_level=True)
pytest.importorskip("emulator.harness")

from test_gateway_alertmanager_real import iso  # noqa: E402

from emulator.harness import Harness  # noqa: E402
from testkit.net import free_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def http_json(url, obj=None, timeout=5):
    data = None if obj is None else json.dumps(obj).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
            return r.status, json.loads(body) if body.strip() else None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def wait_until(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for %s" % what)


class _Proc:
    proc = None

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class GatewayProc(_Proc):
    """sentinel-gateway in its own process, so it can be SIGKILLed."""

    def __init__(self, tmp, name, h, port=None):
        self.name = name
        self.port = port or free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.state = tmp / ("state-" + name)
        self.cfg = tmp / ("%s.toml" % name)
        self.log = tmp / ("%s.log" % name)
        self.cfg.write_text(
            '[gateway]\nhost = "127.0.0.1"\nport = %d\nstate_dir = "%s"\ninstance = "%s"\nlog_format = "text"\n'
            "[delivery]\nrate_interval_s = 0\nbackoff_initial_s = 0.05\nbackoff_max_s = 0.5\ntimeout_s = 2.0\n"
            '[terminals.emu]\nurl = "%s"\nkey_id = "%s"\nsecret_env = "EMU_SECRET"\n'
            % (self.port, self.state, name, h.url, h.cfg["key_id"])
        )
        self.env = dict(
            os.environ,
            EMU_SECRET=h.cfg["secret"],
            PYTHONPATH=os.pathsep.join(
                [ROOT, os.path.join(ROOT, "firmware", "lib")] + [p for p in [os.environ.get("PYTHONPATH")] if p]
            ),
        )
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "host_client.gateway.cli", "-c", str(self.cfg)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.log, "ab"),
        )
        wait_until(lambda: self._up(), 20, "gateway %s" % self.name)
        return self

    def _up(self):
        if self.proc.poll() is not None:
            raise AssertionError("gateway %s exited: %s" % (self.name, self.log.read_text()[-2000:]))
        try:
            return http_json(self.url + "/healthz", timeout=1)[0] in (200, 503)
        except OSError:
            return False

    def metric(self, line):
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        m = re.search(re.escape(line) + r" (\d+)", text)
        return int(m.group(1)) if m else 0


class AlertmanagerProc(_Proc):
    def __init__(self, tmp, name, *, webhook, cluster_port, peer_port):
        self.name = name
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        cfg = tmp / ("%s.yml" % name)
        cfg.write_text(
            "route:\n  receiver: sentinel\n  group_by: ['alertname']\n  group_wait: 1s\n  group_interval: 2s\n"
            "  repeat_interval: 1h\n"
            "receivers:\n  - name: sentinel\n    webhook_configs:\n      - url: %s/api/v1/alertmanager\n"
            "        send_resolved: true\n" % webhook
        )
        self.args = [
            AM,
            "--config.file=%s" % cfg,
            "--storage.path=%s" % (tmp / ("data-" + name)),
            "--web.listen-address=127.0.0.1:%d" % self.port,
            "--cluster.listen-address=127.0.0.1:%d" % cluster_port,
            "--cluster.advertise-address=127.0.0.1:%d" % cluster_port,
            "--cluster.peer=127.0.0.1:%d" % peer_port,
            "--cluster.peer-timeout=2s",
            "--cluster.settle-timeout=2s",
            "--cluster.gossip-interval=100ms",
            "--cluster.pushpull-interval=5s",
            "--cluster.probe-interval=500ms",
            "--cluster.reconnect-interval=1s",
            "--log.level=warn",
        ]
        self.log = tmp / ("%s.log" % name)
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"))
        return self

    def ready(self):
        if self.proc.poll() is not None:
            raise AssertionError("%s exited: %s" % (self.name, self.log.read_text()[-2000:]))
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def peers(self):
        st, body = http_json(self.url + "/api/v2/status")
        return len(body["cluster"].get("peers") or []) if st == 200 else 0

    def post(self, labels, annotations, starts, ends=None):
        a = {"labels": labels, "annotations": annotations, "startsAt": iso(starts)}
        if ends is not None:
            a["endsAt"] = iso(ends)
        assert http_json(self.url + "/api/v2/alerts", [a])[0] == 200


def spoken(h, text):
    """Utterances of this text the emulator wrote as WAV files (one file per utterance, its log names the text)."""
    return sum(
        1 for ln in list(h.logs) if isinstance(ln, str) and ln.startswith("voice: wrote ") and ln.endswith("): " + text)
    )


def text_of(h, key):
    return [a["text"] for a in h.status()["active"] if a["key"] == key][0]


def levels(h):
    return {a["key"]: a["level"] for a in h.status()["active"]}


def test_alertmanager_ha_pair_two_gateways_one_emulator(tmp_path):
    wav = tmp_path / "wav"
    with Harness(str(tmp_path / "emu"), voice="wav", wav_dir=str(wav)) as h:
        gw1 = GatewayProc(tmp_path, "gw1", h).start()
        gw2 = GatewayProc(tmp_path, "gw2", h).start()
        c1, c2 = free_port(), free_port()
        am1 = AlertmanagerProc(tmp_path, "am1", webhook=gw1.url, cluster_port=c1, peer_port=c2).start()
        am2 = AlertmanagerProc(tmp_path, "am2", webhook=gw2.url, cluster_port=c2, peer_port=c1).start()
        ams = [am1, am2]
        try:
            wait_until(lambda: am1.ready() and am2.ready(), 30, "both alertmanagers ready")
            wait_until(lambda: am1.peers() == 2 and am2.peers() == 2, 30, "the two alertmanagers clustered")

            def fire(name, text, targets, starts, ends=None):
                labels = {"alertname": name, "severity": "warning", "rack": "A03", "Hostname": "gpu-worker-08"}
                for am in targets:  # Prometheus sends every alert to every Alertmanager of the pair
                    am.post(labels, {"summary": text}, starts, ends)

            def key_of(text):
                s = h.wait_for(lambda s: any(a["text"] == text for a in s["active"]), timeout=30)
                return [a["key"] for a in s["active"] if a["text"] == text][0]

            # 1. an alert through the pair: shown once, spoken once
            ta = "Alert A: GPU 3 on gpu-worker-08 overheating"
            t0 = time.time() - 1
            fire("GPUThermalA", ta, ams, t0)
            ka = key_of(ta)
            assert levels(h)[ka] == "P1"
            wait_until(lambda: spoken(h, ta) >= 1, 30, "alert A spoken")
            time.sleep(6)  # both peers' waits and a group_interval: any second copy has arrived by now
            assert spoken(h, ta) == 1
            # its resolve turns it green, once
            fire("GPUThermalA", ta, ams, t0, ends=time.time() - 0.5)
            h.wait_for(lambda s: levels(h).get(ka) == "NORMAL", timeout=30)
            green_at = time.monotonic()
            ra = text_of(h, ka)  # its recovery words (all clear, when nothing else is open)
            wait_until(lambda: spoken(h, ra) >= 1, 30, "A's recovery spoken")
            said = spoken(h, ra)

            # 2. SIGKILL one gateway mid-incident
            tc = "Alert C: GPU 5 on gpu-worker-08 NVLink errors"
            t1 = time.time() - 1
            fire("GPUNvlinkC", tc, ams, t1)
            kc = key_of(tc)
            wait_until(lambda: spoken(h, tc) >= 1, 30, "alert C spoken")
            gw1.kill()
            fire("GPUNvlinkC", tc, ams, t1, ends=time.time() - 0.5)
            h.wait_for(lambda s: levels(h).get(kc) == "NORMAL", timeout=30)
            rc = text_of(h, kc)  # its recovery words (all clear, when nothing else is open)
            wait_until(lambda: spoken(h, rc) >= said + (rc == ra), 30, "C's recovery spoken")
            # the dead gateway comes back: its Alertmanager's retries are duplicates at the terminal
            gw1.start()

            # 3. SIGKILL one Alertmanager mid-incident (before its group_wait ends)
            tb = "Alert B: GPU 1 on gpu-worker-08 PCIe link downgraded"
            t2 = time.time() - 1
            fire("GPUPcieB", tb, ams, t2)
            am1.kill()
            kb = key_of(tb)
            wait_until(lambda: spoken(h, tb) >= 1, 30, "alert B spoken")
            fire("GPUPcieB", tb, [am2], t2, ends=time.time() - 0.5)
            h.wait_for(lambda s: levels(h).get(kb) == "NORMAL", timeout=30)
            rb = text_of(h, kb)  # its recovery words (all clear, when nothing else is open)
            wait_until(lambda: spoken(h, rb) >= 1 + (rb == ra) + (rb == rc), 30, "B's recovery spoken")

            # A stays green for 60 s after its resolve (the HA pair's stale firing would come within seconds)
            while time.monotonic() < green_at + 60:
                # green for its NORMAL time, then gone from the terminal: never P1/P0 again
                assert levels(h).get(ka) in ("NORMAL", None), "A went red again %.1f s after its resolve" % (
                    time.monotonic() - green_at
                )
                time.sleep(0.5)
            time.sleep(1)
            want = {}
            for text in (ta, ra, tc, rc, tb, rb):
                want[text] = want.get(text, 0) + 1
            for text, n in want.items():
                assert spoken(h, text) == n, "%r spoken %d times, want %d" % (text, spoken(h, text), n)
            assert set(levels(h).values()) <= {"NORMAL"}
            assert len(list(wav.glob("*.wav"))) == 6
        finally:
            for p in ams + [gw1, gw2]:
                p.stop()


def test_unsaveable_queue_is_503_then_a_p0_answered_200_survives_sigkill(tmp_path):
    with Harness(str(tmp_path / "emu")) as h:
        # the terminal is unreachable at first: the alarm can only survive on disk
        gw = GatewayProc(tmp_path, "gw", h)
        gw.cfg.write_text(gw.cfg.read_text().replace(h.url, "http://127.0.0.1:%d" % free_port()))
        gw.start()
        try:
            ev = {"cluster_rack": "A03", "node_host": "gpu-worker-08", "event_type": "XID_FATAL", "gpu_index": 3}
            # a real fault: the queue file's place is taken by a directory, so the atomic rename fails
            os.makedirs(gw.state / "pending-emu.json")
            st, ans = http_json(gw.url + "/api/v1/gpu_event", ev, timeout=10)
            assert st == 503 and ans["error"] == "persist_failed"
            st, hz = http_json(gw.url + "/healthz")
            assert hz["ok"] is False and any("cannot be saved" in r for r in hz["reasons"])
            assert gw.metric('sentinel_gateway_persist_ok{terminal="emu"}') == 0
            os.rmdir(gw.state / "pending-emu.json")
            wait_until(lambda: http_json(gw.url + "/healthz")[1]["ok"], 10, "the persister recovering")
            ev2 = dict(ev, cluster_rack="A04", node_host="gpu-worker-09")
            st, ans = http_json(gw.url + "/api/v1/gpu_event", ev2, timeout=10)
            assert st == 200 and ans["terminals"] == {"emu": "alone"}
            gw.kill()
            # restart pointed at the emulator: every alarm answered 200 (and the one queued in memory before the
            # 503, which the recovered persister saved) is delivered
            gw.cfg.write_text(re.sub(r'url = "http://127.0.0.1:\d+"', 'url = "%s"' % h.url, gw.cfg.read_text()))
            gw.start()
            h.wait_for(lambda s: "A04:gpu-worker-09:XID_FATAL:gpu3" in levels(h), timeout=20)
            assert levels(h)["A04:gpu-worker-09:XID_FATAL:gpu3"] == "P0"
        finally:
            gw.stop()
