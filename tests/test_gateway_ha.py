"""Issue 12 in-process: the same incident through two gateways is one alarm at the terminal (deterministic ids), a
stale firing after its resolve is dropped, hostile bodies on both ingest endpoints are a 4xx that changes nothing,
a failing save answers 503 and shows in /healthz, an alarm no retry can send is dead-lettered without delaying the
next, a bare-200 RFC terminal counts as delivered, and Grafana's documented webhook lights the emulator."""

import http.server
import json
import os
import threading
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("emulator.harness")

from test_gateway_e2e import GatewayServer, gw_config, wait

from emulator.harness import Harness
from host_client.gateway.lane import Lane, alarm_id

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "gateway")


def fixture(name):
    with open(os.path.join(FIX, name), encoding="utf-8") as f:
        return json.load(f)


def post_raw(url, path, raw):
    req = urllib.request.Request(url + path, raw, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def get_json(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())


def am_body(
    status,
    fp="f00dfeed00000001",
    starts="2026-12-01T10:00:00.123456789Z",
    severity="critical",
    summary="GPU 3 on gpu-worker-08 fell off the bus (XID 79)",
):
    return {
        "version": "4",
        "status": status,
        "receiver": "sentinel",
        "groupKey": '{}:{alertname="GPUXidFatal"}',
        "alerts": [
            {
                "status": status,
                "fingerprint": fp,
                "startsAt": starts,
                "labels": {
                    "alertname": "GPUXidFatal",
                    "severity": severity,
                    "rack": "A03",
                    "Hostname": "gpu-worker-08",
                },
                "annotations": {"summary": summary},
            }
        ],
    }


def active(h):
    return {a["key"]: a["level"] for a in h.status()["active"]}


def test_two_gateways_same_notification_is_one_alarm(tmp_path):
    """Each gateway of an HA pair gets the notification from its own Alertmanager: the terminal shows it once and
    answers the second copy as a duplicate."""
    with Harness(str(tmp_path / "emu")) as h:
        g1 = GatewayServer(gw_config(h, gateway={"instance": "gw1"}))
        g2 = GatewayServer(gw_config(h, gateway={"instance": "gw2"}))
        try:
            assert g1.post("/api/v1/alertmanager", am_body("firing"))[0] == 200
            h.wait_for(lambda s: any(a["level"] == "P0" for a in s["active"]))
            assert g2.post("/api/v1/alertmanager", am_body("firing"))[0] == 200
            wait(lambda: g2.gw.lanes["emu"].stats.alarms.delivered == 1)
            assert g2.gw.lanes["emu"].stats.alarms.duplicate == 1
            assert g1.gw.lanes["emu"].stats.alarms.duplicate == 0
            assert len(h.status()["active"]) == 1
            # the resolve, likewise: the second copy is a duplicate
            g1.post("/api/v1/alertmanager", am_body("resolved"))
            h.wait_for(lambda s: set(active(h).values()) == {"NORMAL"})
            g2.post("/api/v1/alertmanager", am_body("resolved"))
            wait(lambda: g2.gw.lanes["emu"].stats.alarms.duplicate == 2)
        finally:
            g1.close()
            g2.close()


def test_stale_firing_after_resolve_is_dropped_and_a_new_start_is_news(tmp_path):
    with Harness(str(tmp_path / "emu")) as h:
        g = GatewayServer(gw_config(h))
        try:
            g.post("/api/v1/alertmanager", am_body("firing"))
            h.wait_for(lambda s: "P0" in active(h).values())
            g.post("/api/v1/alertmanager", am_body("resolved"))
            h.wait_for(lambda s: set(active(h).values()) == {"NORMAL"})
            # the HA peer's copy of the firing, held back for its peer wait: same fingerprint and startsAt
            st, ans = g.post("/api/v1/alertmanager", am_body("firing"))
            assert st == 200 and ans["stale"] == 1 and ans["firing"] == 0
            time.sleep(0.3)
            assert set(active(h).values()) == {"NORMAL"}
            m = urllib.request.urlopen(g.url + "/metrics", timeout=5).read().decode()
            assert 'sentinel_gateway_stale_firing_total{source="alertmanager"} 1' in m
            # the same alert firing again later has a new startsAt: a new incident, shown
            st, ans = g.post("/api/v1/alertmanager", am_body("firing", starts="2026-12-01T11:00:00Z"))
            assert st == 200 and ans["stale"] == 0
            h.wait_for(lambda s: "P0" in active(h).values())
        finally:
            g.close()


def test_gpu_ids_are_the_same_on_two_gateways_and_new_after_a_recovery():
    """GPU events: the incident key and its first-seen window (the probe's ts) name the alarm alike on every
    gateway; a fault that returns after its recovery within the same window is a new alarm."""
    from test_gateway_server import Fake

    from host_client.gateway.config import Config
    from host_client.gateway.service import Gateway

    cfg = Config.from_dict(
        {
            "terminals": {"t": {"url": "http://127.0.0.1:9", "key_id": "k", "secret_env": "S"}},
            "delivery": {"rate_interval_s": 0},
        },
        env={"S": "s"},
    )
    ev = {"cluster_rack": "A03", "node_host": "gpu-worker-08", "event_type": "NCCL_TIMEOUT", "ts": time.time()}
    ids = []
    for _ in range(2):
        fake = Fake()
        gw = Gateway(cfg, clients={"t": fake})
        gw.start()
        try:
            gw.gpu_event(ev)
            gw.gpu_event(dict(ev, state="recovered", ts=ev["ts"] + 1))
            gw.gpu_event(dict(ev, ts=ev["ts"] + 2))
            wait(lambda f=fake: len(f.sent) == 3)
        finally:
            gw.stop()
        ids.append([a.id for a in fake.sent])
    assert ids[0] == ids[1]
    assert len(set(ids[0])) == 3


def test_summary_ids_follow_the_content():
    lane = Lane("t", language="en")
    from test_gateway_lane import inc

    lane.submit(inc("A03", "n1"), 0.0)
    lane.submit(inc("A03", "n2"), 0.0)
    s1 = [x for x in lane.items if x.kind == "summary"][0]
    first = s1.id
    assert first == alarm_id(s1.key, "1")
    lane.submit(inc("A03", "n3"), 0.0)
    assert s1.id == alarm_id(s1.key, "2") != first


HOSTILE = [
    (b'{"cluster_rack":"A03","node_host":"gpu-\\ud800","event_type":"NCCL_TIMEOUT"}', 422, "bad_text"),
    (b"[" * 30000, 400, "too_deep"),
    (
        b'{"cluster_rack":"A03","node_host":"gpu-1","event_type":"GPU_UTIL_DROP","gpu_index":0,"gpu_util":NaN}',
        400,
        "bad_json",
    ),
    (
        b'{"cluster_rack":"A03","node_host":"gpu-1","event_type":"GPU_UTIL_DROP","gpu_index":0,"gpu_util":Infinity}',
        400,
        "bad_json",
    ),
]
HOSTILE_AM = [
    (json.dumps(am_body("firing")).replace("fell off", "\\udc00fell off").encode(), 422, "bad_text"),
    (b'{"version":"4","alerts":' + b"[" * 30000, 400, "too_deep"),
    (
        b'{"version":"4","alerts":[{"status":"firing","labels":{"alertname":"x"},"annotations":{},"x":NaN}]}',
        400,
        "bad_json",
    ),
]


@pytest.mark.serial  # asserts a latency bound: run alone (tools/run-tests.sh)
@pytest.mark.parametrize(
    "path,raw,status,code",
    [("/api/v1/gpu_event",) + x for x in HOSTILE] + [("/api/v1/alertmanager",) + x for x in HOSTILE_AM],
)
def test_hostile_body_is_4xx_changes_nothing_and_the_next_p0_goes_through(tmp_path, path, raw, status, code):
    delivered = {}
    with Harness(str(tmp_path / "emu")) as h:
        g = GatewayServer(
            gw_config(h, tmp_path), on_delivered=lambda t, it, ack: delivered.setdefault(it.key, time.time())
        )
        try:
            before = (dict(g.gw.events_in), len(g.gw.debouncer), g.gw.lanes["emu"].depth(), g.gw.lanes["emu"].gen)
            st, ans = post_raw(g.url, path, raw)
            assert (st, ans["error"]) == (status, code) and ans["message"]
            assert before == (
                dict(g.gw.events_in),
                len(g.gw.debouncer),
                g.gw.lanes["emu"].depth(),
                g.gw.lanes["emu"].gen,
            )
            assert get_json(g.url + "/healthz")["ok"] is True
            t0 = time.time()
            st, ans = g.post(
                "/api/v1/gpu_event", {"cluster_rack": "A03", "node_host": "gpu-worker-08", "event_type": "NCCL_TIMEOUT"}
            )
            assert st == 200 and ans["terminals"] == {"emu": "alone"}
            wait(lambda: "A03:gpu-worker-08:NCCL_TIMEOUT" in delivered, 5)
            # target 100 ms (issue 12); bound generous for a loaded 2-core machine, the figure is in the log
            took = delivered["A03:gpu-worker-08:NCCL_TIMEOUT"] - t0
            print("P0 after a hostile body delivered in %.1f ms" % (took * 1000))
            assert took < 1.0
            assert "P0" in active(h).values()
        finally:
            g.close()


def test_save_failure_answers_503_shows_in_healthz_and_recovers(tmp_path):
    with Harness(str(tmp_path / "emu")) as h:
        g = GatewayServer(gw_config(h, tmp_path))
        p = g.gw.persisters["emu"]
        real = p.store.save
        fail = {"on": True}

        def broken_save(data, *, fsync=True):
            if fail["on"]:
                raise OSError(28, "No space left on device")
            return real(data, fsync=fsync)

        p.store.save = broken_save
        try:
            ev = {"cluster_rack": "A03", "node_host": "gpu-worker-08", "event_type": "NCCL_TIMEOUT"}
            st, ans = post_raw(g.url, "/api/v1/gpu_event", json.dumps(ev).encode())
            assert st == 503 and ans["error"] == "persist_failed"
            hz = get_json(g.url + "/healthz")
            assert hz["ok"] is False and "No space left on device" in " ".join(hz["reasons"])
            assert hz["terminals"]["emu"]["persist_error"]
            st, ans = post_raw(g.url, "/api/v1/alertmanager", json.dumps(am_body("firing")).encode())
            assert st == 503
            m = urllib.request.urlopen(g.url + "/metrics", timeout=5).read().decode()
            assert 'sentinel_gateway_persist_ok{terminal="emu"} 0' in m
            assert 'sentinel_gateway_persist_failures_total{terminal="emu"} 0' not in m
            fail["on"] = False
            wait(lambda: get_json(g.url + "/healthz")["ok"], 5)
            assert p.alive()
            # the retried event: the alarm that was queued in memory is on disk now
            st, ans = g.post("/api/v1/gpu_event", ev)
            assert st == 200
            with open(os.path.join(str(tmp_path / "state"), "pending-emu.json"), encoding="utf-8") as f:
                assert "gpu-worker-08" in f.read() or h.status()["active"]
        finally:
            g.close()


class _Term(http.server.BaseHTTPRequestHandler):
    """A minimal RFC-compatible terminal: a bare 200, no body (what the RFC's gateway counts as success)."""

    hits = []

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        _Term.hits.append(json.loads(self.rfile.read(n)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


@pytest.mark.parametrize("compat,outcome", [("rfc", "delivered"), ("sentinel", "refused")])
def test_bare_200_terminal(compat, outcome):
    from host_client.gateway.config import Config

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Term)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Term.hits = []
    try:
        cfg = Config.from_dict(
            {
                "terminals": {
                    "rfc": {
                        "url": "http://127.0.0.1:%d" % srv.server_port,
                        "key_id": "gpu_cluster_sentinel",
                        "secret_env": "S",
                        "compat": compat,
                    }
                },
                "delivery": {"rate_interval_s": 0, "backoff_initial_s": 0.05},
            },
            env={"S": "s"},
        )
        g = GatewayServer(cfg)
        try:
            g.post(
                "/api/v1/gpu_event", {"cluster_rack": "A03", "node_host": "gpu-worker-08", "event_type": "NCCL_TIMEOUT"}
            )
            st = g.gw.lanes["rfc"].stats
            wait(lambda: st.alarms.delivered + st.alarms.refused + st.alarms.retries >= 1, 5)
            time.sleep(0.2)
            assert getattr(st.alarms, outcome) == 1 and st.alarms.retries == 0
            assert _Term.hits[0]["text"] == "训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁，全环算力挂起"
        finally:
            g.close()
    finally:
        srv.shutdown()


def test_dead_letter_does_not_delay_the_next_alarm(tmp_path):
    """A queue restored from an older gateway holds an alarm whose text no UTF-8 can carry: it is dead-lettered
    (counted, logged, in /healthz, /metrics and dead-emu.jsonl) and the P0 behind it is delivered at once."""
    state = tmp_path / "state"
    state.mkdir()
    now = time.time()
    items = [
        {
            "id": "old-1",
            "seq": 1,
            "level": "P0",
            "text": "gpu-\ud800 down",
            "key": "A03:gpu-\ud800:NCCL_TIMEOUT",
            "carried": ["A03:gpu-\ud800:NCCL_TIMEOUT"],
            "n": 1,
            "created": now,
            "deadline": now + 3600,
            "attempts": 0,
            "kind": "alone",
        },
        {
            "id": "old-2",
            "seq": 2,
            "level": "P0",
            "text": "A04 gpu-9 down",
            "key": "A04:gpu-9:NCCL_TIMEOUT",
            "carried": ["A04:gpu-9:NCCL_TIMEOUT"],
            "n": 1,
            "created": now,
            "deadline": now + 3600,
            "attempts": 0,
            "kind": "alone",
        },
    ]
    (state / "pending-emu.json").write_text(json.dumps({"version": 1, "seq": 2, "items": items}))
    with Harness(str(tmp_path / "emu")) as h:
        g = GatewayServer(gw_config(h, tmp_path))
        try:
            h.wait_for(lambda s: "A04:gpu-9:NCCL_TIMEOUT" in active(h), timeout=5)
            st = g.gw.lanes["emu"].stats
            assert st.alarms.dead_letter == 1 and st.incidents.dead == 1 and st.alarms.retries == 0
            hz = get_json(g.url + "/healthz")["terminals"]["emu"]
            assert hz["dead_letters"] == 1 and hz["last_dead_letter"]["id"] == "old-1"
            m = urllib.request.urlopen(g.url + "/metrics", timeout=5).read().decode()
            assert 'sentinel_gateway_alarms_total{terminal="emu",outcome="dead_letter"} 1' in m
            dead = (state / "dead-emu.jsonl").read_text().splitlines()
            assert len(dead) == 1 and json.loads(dead[0])["id"] == "old-1"
        finally:
            g.close()


@pytest.mark.parametrize("path", ["/api/v1/alertmanager", "/api/v1/grafana"])
def test_grafana_payload_lights_the_emulator(tmp_path, path):
    with Harness(str(tmp_path / "emu")) as h:
        g = GatewayServer(gw_config(h, alertmanager={"rack_labels": ["zone"]}))
        try:
            st, ans = g.post(path, fixture("grafana_webhook.json"))
            assert st == 200 and ans["firing"] == 2
            s = h.wait_for(lambda s: len(s["active"]) == 2)
            texts = sorted(a["text"] for a in s["active"])
            assert texts == ["This alert was triggered for zone eu-1", "This alert was triggered for zone us-1"]
            assert {a["level"] for a in s["active"]} == {"P1"}  # no severity label: default_level
            assert {a["key"] for a in s["active"]} == {"am:c6eadffa33fcdf37", "am:bc97ff14869b13e3"}
            assert s["shown"]["color"] == "#FFA500"
        finally:
            g.close()
