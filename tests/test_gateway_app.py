"""The gateway over its HTTP front on loopback (tests/gateway_front.py) with fake terminal clients: validation,
debounce, Alertmanager mapping, routing, /healthz and /metrics, retries and deadlines."""

import json
import os
import threading
import time

import pytest
from gateway_front import ServedGateway

from host_client.errors import AuthError, TransportError
from host_client.gateway.alertmanager import parse_webhook
from host_client.gateway.config import Config
from sentinel_core.alarm import NORMAL, P0, P1

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "gateway")


def fixture(name):
    with open(os.path.join(FIX, name), encoding="utf-8") as f:
        return json.load(f)


class FakeClient:
    def __init__(self, url="http://fake", fail=0, exc=TransportError):
        self.url = url
        self.sent = []
        self.heartbeats = []
        self.fail = fail
        self.exc = exc
        self.lock = threading.Lock()

    def send(self, alarm):
        with self.lock:
            if self.fail:
                self.fail -= 1
                if self.exc is AuthError:
                    raise AuthError(self.url, 401, "bad_signature", "signature does not match")
                raise TransportError(self.url, "connection refused")
            self.sent.append(alarm)

            class A:
                duplicate = False

            return A()

    def heartbeat(self, interval=None):
        self.heartbeats.append(interval)


def cfg(**over):
    d = {
        "terminals": {
            "room": {"url": "http://127.0.0.1:9", "key_id": "k", "secret_env": "S"},
            "office": {"url": "http://127.0.0.1:9", "key_id": "k", "secret_env": "S"},
        },
        "routes": [{"racks": ["B*"], "terminals": ["office"]}],
        "routing": {"default": ["room"]},
        "delivery": {"rate_interval_s": 0, "backoff_initial_s": 0.01, "backoff_max_s": 0.05},
    }
    for k, v in over.items():
        d.setdefault(k, {}).update(v)
    return Config.from_dict(d, env={"S": "secret"})


@pytest.fixture
def gw():
    clients = {"room": FakeClient(), "office": FakeClient()}
    app = ServedGateway(cfg(), clients=clients)
    c = app.test_client()
    yield c, app.gw, clients
    app.close()


def wait(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    raise AssertionError("timed out")


EV = {
    "cluster_rack": "A03",
    "node_host": "gpu-worker-08-a1b2c3d4",
    "event_type": "NCCL_TIMEOUT",
    "gpu_index": 3,
    "gpu_util": 0.0,
}


def test_rfc_event_becomes_the_rfc_alarm(gw):
    c, g, clients = gw
    r = c.post("/api/v1/gpu_event", json=EV)
    assert r.status_code == 200 and r.json["result"] == "alarm" and r.json["level"] == "P0"
    wait(lambda: clients["room"].sent)
    a = clients["room"].sent[0]
    wire = a.to_wire()
    assert wire["text"] == "训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁，全环算力挂起"
    assert (wire["color"], wire["light_mode"], wire["audio_mode"], wire["repeat_times"]) == (
        "#FF0000",
        "flash",
        "cycle",
        3,
    )
    assert a.key == "A03:gpu-worker-08:NCCL_TIMEOUT" and a.id
    assert clients["office"].sent == []
    r = c.post("/api/v1/gpu_event", json=EV)
    assert r.status_code == 200 and r.json["result"] == "suppressed"


def test_p1_is_the_rfc_orange_breath(gw):
    c, g, clients = gw
    c.post("/api/v1/gpu_event", json=dict(EV, event_type="NVLINK_ERROR", gpu_util=80.0, cluster_rack="B02"))
    wait(lambda: clients["office"].sent)
    w = clients["office"].sent[0].to_wire()
    assert (w["color"], w["light_mode"], w["audio_mode"], w["repeat_times"], w["level"]) == (
        "#FFA500",
        "breath",
        "once",
        1,
        "P1",
    )


@pytest.mark.parametrize(
    "body,status,code",
    [
        (b"{not json", 400, "bad_json"),
        (b"\xff\xfe", 400, "bad_encoding"),
        (json.dumps("x").encode(), 400, "bad_body"),
        (b"[]", 400, "bad_batch"),
        (json.dumps(dict(EV, gpu_util="x")).encode(), 422, "bad_field"),
        (json.dumps({"node_host": "h"}).encode(), 422, "missing_field"),
    ],
)
def test_bad_requests(gw, body, status, code):
    c, g, clients = gw
    r = c.post("/api/v1/gpu_event", data=body, content_type="application/json")
    assert r.status_code == status and r.json["error"] == code and r.json["message"]


def test_batch_of_a_nodes_gpus(gw):
    c, g, clients = gw
    batch = [dict(EV, gpu_index=i) for i in range(8)] + [dict(EV, event_type="XID_FATAL", gpu_index=2), {"x": 1}]
    r = c.post("/api/v1/gpu_event", json=batch)
    assert r.status_code == 200 and r.json["rejected"] == 1 and not r.json["ok"]
    res = r.json["results"]
    assert [x.get("result") for x in res] == ["alarm"] + ["suppressed"] * 7 + ["alarm", None]
    assert res[0]["terminals"] == {"room": "alone"} and res[9]["error"] == "missing_field"
    wait(lambda: len(clients["room"].sent) == 2)


def test_too_large_wrong_method_unknown_path(gw):
    c, g, _ = gw
    assert c.post("/api/v1/gpu_event", data=b"x" * 70000, content_type="application/json").status_code == 413
    assert c.get("/api/v1/gpu_event").status_code == 405
    assert c.get("/nope").json["error"] == "not_found"


def test_metrics_and_healthz(gw):
    c, g, clients = gw
    c.post("/api/v1/gpu_event", json=EV)
    c.post("/api/v1/gpu_event", json=EV)
    c.post("/api/v1/gpu_event", json={"x": 1})
    wait(lambda: clients["room"].sent)
    wait(lambda: 'outcome="delivered"} 1' in c.get("/metrics").get_data(as_text=True))
    m = c.get("/metrics").get_data(as_text=True)
    assert 'sentinel_gateway_events_total{source="gpu_event",type="NCCL_TIMEOUT"} 2' in m
    assert 'sentinel_gateway_debounce_suppressed_total{source="gpu_event",type="NCCL_TIMEOUT"} 1' in m
    assert 'sentinel_gateway_events_rejected_total{source="gpu_event",code="missing_field"} 1' in m
    assert 'sentinel_gateway_queue_depth{terminal="room"} 0' in m
    assert 'sentinel_gateway_delivery_latency_seconds_count{terminal="room"} 1' in m
    h = c.get("/healthz").json
    assert h["ok"] and h["terminals"]["room"]["up"] is True and h["terminals"]["office"]["up"] is None


def test_alertmanager_group_is_one_alarm_and_one_summary_not_a_burst():
    incs = parse_webhook(fixture("am_firing_group.json"), cfg())
    assert [(i.key, i.level, i.rack, i.host) for i in incs] == [
        ("am:a1b2c3d4e5f60718", P0, "A03", "gpu-worker-08"),
        ("am:b1b2c3d4e5f60718", P0, "A03", "gpu-worker-09"),
        ("am:c1b2c3d4e5f60718", P0, "A04", "gpu-worker-17"),
    ]
    assert incs[0].text == "GPU 3 on gpu-worker-08 reported XID 79 (fallen off the bus)"
    w = parse_webhook(fixture("am_warning_nvlink.json"), cfg())[0]
    assert (w.level, w.rack, w.host, w.text) == (P1, "B11", "10.2.11.4", "NVLink CRC errors rising on 10.2.11.4")
    r = parse_webhook(fixture("am_resolved.json"), cfg(), "zh")[0]
    assert r.recovery and r.level == NORMAL and r.key == "am:a1b2c3d4e5f60718"
    assert r.text_for("zh").endswith("已恢复正常") and r.text_for("en").startswith("Resolved: ")


def test_alertmanager_end_to_end_in_process():
    clients = {"room": FakeClient(), "office": FakeClient()}
    app = ServedGateway(cfg(grouping={"cluster_threshold": 0}), clients=clients)
    c = app.test_client()
    try:
        r = c.post("/api/v1/alertmanager", json=fixture("am_firing_group.json"))
        assert r.status_code == 200 and r.json["firing"] == 3
        # A04 and A03 are different racks: one alone + one summary for A03, one alone for A04
        wait(lambda: len(clients["room"].sent) == 3)
        assert sorted(a.level for a in clients["room"].sent) == [P0, P0, P0]
        assert c.post("/api/v1/alertmanager", json=fixture("am_firing_group.json")).json["suppressed"] == 3
        c.post("/api/v1/alertmanager", json=fixture("am_resolved.json"))
        wait(lambda: len(clients["room"].sent) == 4)
        last = clients["room"].sent[-1]
        assert last.level == NORMAL and last.key == "am:a1b2c3d4e5f60718"
    finally:
        app.close()


@pytest.mark.parametrize(
    "body,code",
    [
        ({"version": "3", "alerts": []}, "unsupported_version"),
        ({"version": "4"}, "missing_field"),
        ({"version": "4", "alerts": [{"status": "pending", "labels": {}}]}, "bad_field"),
        ({"version": "4", "alerts": [{"status": "firing", "labels": {"a": 1}}]}, "bad_field"),
    ],
)
def test_alertmanager_validation(gw, body, code):
    c, _, _ = gw
    r = c.post("/api/v1/alertmanager", json=body)
    assert r.status_code == 422 and r.json["error"] == code


def test_retry_until_the_terminal_answers_then_deliver_once():
    clients = {"room": FakeClient(fail=3), "office": FakeClient()}
    app = ServedGateway(cfg(), clients=clients)
    try:
        app.test_client().post("/api/v1/gpu_event", json=EV)
        wait(lambda: clients["room"].sent)
        g = app.gw
        assert g.lanes["room"].stats.alarms.retries == 3 and len(clients["room"].sent) == 1
    finally:
        app.close()


def test_refused_is_not_retried_and_counted():
    clients = {"room": FakeClient(fail=1, exc=AuthError), "office": FakeClient()}
    app = ServedGateway(cfg(), clients=clients)
    try:
        app.test_client().post("/api/v1/gpu_event", json=EV)
        g = app.gw
        wait(lambda: g.lanes["room"].stats.alarms.refused == 1)
        time.sleep(0.1)
        assert clients["room"].sent == [] and g.lanes["room"].stats.incidents.refused == 1
    finally:
        app.close()


def test_deadline_counts_undeliverable():
    clients = {"room": FakeClient(fail=10**6), "office": FakeClient()}
    app = ServedGateway(cfg(delivery={"deadline_s": {"P0": 1}}), clients=clients)
    try:
        app.test_client().post("/api/v1/gpu_event", json=EV)
        g = app.gw
        wait(lambda: g.lanes["room"].stats.alarms.expired == 1, 5)
        m = app.test_client().get("/metrics").get_data(as_text=True)
        assert 'sentinel_gateway_alarms_total{terminal="room",outcome="expired"} 1' in m
        assert 'sentinel_gateway_terminal_up{terminal="room"} 0' in m
    finally:
        app.close()


def test_heartbeat_per_terminal():
    clients = {"room": FakeClient(), "office": FakeClient()}
    c = cfg()
    c.terminals["room"].heartbeat_s = 1
    app = ServedGateway(c, clients=clients)
    try:
        wait(lambda: len(clients["room"].heartbeats) >= 2, 4)
        assert clients["room"].heartbeats[0] == 1 and clients["office"].heartbeats == []
    finally:
        app.close()


def test_english_templates_by_config():
    clients = {"room": FakeClient(), "office": FakeClient()}
    app = ServedGateway(cfg(gateway={"language": "en"}), clients=clients)
    try:
        app.test_client().post("/api/v1/gpu_event", json=dict(EV, event_type="XID_FATAL"))
        wait(lambda: clients["room"].sent)
        assert (
            clients["room"].sent[0].text
            == "Rack A03 node gpu-worker-08: fatal hardware fault, GPU 3 reported a driver-level error"
        )
    finally:
        app.close()


def test_each_terminal_speaks_its_own_language():
    clients = {"room": FakeClient(), "office": FakeClient()}
    c = cfg()
    c.terminals["office"].language = "en"
    c.routes[0].racks = ["A*"]
    c.routes[0].terminals = ["room", "office"]
    app = ServedGateway(c, clients=clients)
    try:
        app.test_client().post("/api/v1/gpu_event", json=EV)
        wait(lambda: clients["room"].sent and clients["office"].sent)
        assert clients["room"].sent[0].text.startswith("训练集群紧急预警")
        assert clients["office"].sent[0].text.startswith("Rack A03 node gpu-worker-08: training cluster emergency")
    finally:
        app.close()


def test_secrets_never_in_logs(caplog):
    import logging

    caplog.set_level(logging.DEBUG, logger="sentinel.gateway")
    clients = {"room": FakeClient(fail=2), "office": FakeClient()}
    app = ServedGateway(cfg(), clients=clients)
    try:
        app.test_client().post("/api/v1/gpu_event", json=EV)
        wait(lambda: clients["room"].sent)
    finally:
        app.close()
    text = " ".join("%s %s" % (r.getMessage(), getattr(r, "fields", "")) for r in caplog.records)
    assert "terminal_unreachable" in text and "alarm_delivered" in text
    assert "secret" not in text.replace("secret_env", "")


def _pcie(gpu, recovered=False, host="gpu-node-09"):
    d = {"cluster_rack": "A09", "node_host": host, "event_type": "PCIE_DOWNGRADE", "gpu_index": gpu, "gpu_util": 95.0}
    if recovered:
        d["state"] = "recovered"
    return d


def test_one_gpus_recovery_does_not_clear_another_gpus_fault(gw):
    """Two GPUs of one node degrade (the second within the RFC's debounce window, so it is not announced again);
    the first recovers: the terminal must keep the P1. The second recovers: then NORMAL."""
    c, g, clients = gw
    room = clients["room"]
    a = c.post("/api/v1/gpu_event", json=_pcie(3)).json
    assert a["key"] == "A09:gpu-node-09:PCIE_DOWNGRADE:gpu3" and a["result"] == "alarm"
    b = c.post("/api/v1/gpu_event", json=_pcie(5)).json
    assert b["result"] == "suppressed" and b["terminals"] == {"room": "attached"}
    wait(lambda: len(room.sent) == 1)
    assert room.sent[0].level == P1 and room.sent[0].key == "A09:gpu-node-09:PCIE_DOWNGRADE:gpu3"

    r3 = c.post("/api/v1/gpu_event", json=_pcie(3, recovered=True)).json
    assert r3["result"] == "recovery" and r3["terminals"] == {"room": "recovery_pending"}
    time.sleep(0.2)
    assert len(room.sent) == 1  # no NORMAL: GPU 5 is still degraded

    r5 = c.post("/api/v1/gpu_event", json=_pcie(5, recovered=True)).json
    assert r5["result"] == "recovery" and r5["terminals"] == {"room": "recovery"}
    wait(lambda: len(room.sent) == 2)
    last = room.sent[1]
    assert last.level == NORMAL and last.key == "A09:gpu-node-09:PCIE_DOWNGRADE:gpu3"  # clears what was shown
    m = g.metrics_text()
    assert 'sentinel_gateway_incidents_total{terminal="room",fate="attached"} 1' in m
    assert 'sentinel_gateway_debounce_suppressed_total{source="gpu_event",type="PCIE_DOWNGRADE"} 1' in m


def test_gpu_recoveries_within_the_window_are_not_debounced_against_each_other(gw):
    c, _g, clients = gw
    for gpu in range(8):
        c.post("/api/v1/gpu_event", json=_pcie(gpu))
    answers = [c.post("/api/v1/gpu_event", json=_pcie(gpu, recovered=True)).json for gpu in range(8)]
    assert [a["result"] for a in answers] == ["recovery"] * 8
    assert [a["terminals"]["room"] for a in answers] == ["recovery_pending"] * 7 + ["recovery"]
    wait(lambda: len(clients["room"].sent) == 2)
    assert [x.level for x in clients["room"].sent] == [P1, NORMAL]


def test_attached_gpu_after_its_alarm_was_cleared_is_news_again(gw):
    """GPU 3 fires and recovers; GPU 5 then fires within 120 s of GPU 3's alarm: the recovery reset the window, so
    it is announced (folded into the rack's summary, as the grouping window is still open)."""
    c, _g, clients = gw
    c.post("/api/v1/gpu_event", json=_pcie(3))
    c.post("/api/v1/gpu_event", json=_pcie(3, recovered=True))
    a = c.post("/api/v1/gpu_event", json=_pcie(5)).json
    assert a["result"] == "alarm" and a["terminals"] == {"room": "folded"}
    wait(lambda: len(clients["room"].sent) == 3)
    assert sorted(x.level for x in clients["room"].sent) == [NORMAL, P1, P1]
