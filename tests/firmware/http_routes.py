# microdot's routes, exercised with microdot's own TestClient (runs under MicroPython and on CPython): the HTTP
# layer must hand the raw body and headers to the core unchanged and return its answers unchanged.
import json

from _fw import boot, preset_body, signed
from microdot.test_client import TestClient

from sentinel_fw.server import make_app


def _client():
    s, ft = boot()
    s.net_step(0)
    s.net_step(500)
    return s, ft, TestClient(make_app(s, s.cfg["http"]["max_body"]))


async def test_signed_p0_accepted_through_microdot():
    s, ft, c = _client()
    h, b = signed(preset_body("p0", "A03 gpu-worker-08 NCCL timeout", key="A03:w8:NCCL", id="m-1"), ft())
    r = await c.post("/api/v1/send_msg", headers=h, body=b)
    assert r.status_code == 200, (r.status_code, r.text)
    assert r.headers["Content-Type"] == "application/json"
    assert r.json == {"ok": True, "kind": "alarm", "duplicate": False, "level": "P0", "key": "A03:w8:NCCL",
                      "id": "m-1"}, r.json
    assert s.terminal.display(ft()).pattern == "flash"
    # The gateway's retry of the same message: 200 again, acted on once.
    r = await c.post("/api/v1/send_msg", headers=h, body=b)
    assert r.status_code == 200 and r.json["duplicate"] is True


async def test_rfc_v1_body_exactly_as_the_rfc_gateway_sends_it():
    s, ft, c = _client()
    body = ('{"text": "NCCL deadlock on A03", "color": "#FF0000", "light_mode": "flash", "audio_mode": "cycle", '
            '"repeat_times": 3}')
    h, b = signed(body, ft())
    r = await c.post("/api/v1/send_msg", headers=h, body=b)
    assert r.status_code == 200 and r.json["level"] == "P0", r.text


async def test_bad_signature_is_401_json():
    s, ft, c = _client()
    h, b = signed(preset_body("p1", "x"), ft())
    h["X-Signature"] = "f" * 64
    r = await c.post("/api/v1/send_msg", headers=h, body=b)
    assert r.status_code == 401 and r.json["ok"] is False and r.json["error"] == "bad_signature"


async def test_ack_and_heartbeat_routes():
    s, ft, c = _client()
    h, b = signed(preset_body("p0", "fire", key="k1"), ft())
    await c.post("/api/v1/send_msg", headers=h, body=b)
    h, b = signed({"key": "k1", "long": True}, ft())
    r = await c.post("/api/v1/ack", headers=h, body=b)
    assert r.status_code == 200 and r.json["kind"] == "ack", r.text
    assert s.status(ft())["active"] == []
    h, b = signed({"interval": 60}, ft())
    r = await c.post("/api/v1/heartbeat", headers=h, body=b)
    assert r.status_code == 200 and r.json["kind"] == "heartbeat", r.text
    assert s.status(ft())["health"]["heartbeat"]["interval_s"] == 60


async def test_status_is_the_snapshot_plus_device():
    s, ft, c = _client()
    r = await c.get("/api/v1/status")
    assert r.status_code == 200
    st = r.json
    assert st["shown"]["pattern"] in ("idle", "health_speech", "health_clock"), st["shown"]
    dev = st["device"]
    assert dev["board"] == "esp32" and dev["matrix"]["ok"] is True and dev["wifi"]["connected"] is True
    assert "secret" not in r.text and "password123" not in r.text and "0123456789abcdef" not in r.text


async def test_unknown_path_and_wrong_method():
    s, ft, c = _client()
    r = await c.get("/nope")
    assert r.status_code == 404 and r.json["error"] == "not_found"
    r = await c.get("/api/v1/send_msg")
    assert r.status_code == 405 and r.json["error"] == "method_not_allowed", r.text


async def test_oversized_body_refused_before_the_core():
    s, ft, c = _client()
    big = json.dumps({"text": "x" * 4000, "color": "#FF0000", "light_mode": "flash"})
    h, b = signed(big, ft())
    r = await c.post("/api/v1/send_msg", headers=h, body=b)
    assert r.status_code == 413, r.status_code
    assert s.terminal.display(ft()).level is None


async def test_metrics_in_prometheus_text():
    s, ft, c = _client()
    h, b = signed(preset_body("p0", "fire", key="k1"), ft())
    await c.post("/api/v1/send_msg", headers=h, body=b)
    h["X-Signature"] = "0" * 64
    await c.post("/api/v1/send_msg", headers=h, body=b)
    r = await c.get("/metrics")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain"), r.headers
    lines = r.text.split("\n")
    for want in ('sentinel_alarms_total{level="P0"} 1', 'sentinel_requests_total{outcome="accepted"} 1',
                 'sentinel_requests_total{outcome="refused"} 1', 'sentinel_active_alarms{level="P0"} 1',
                 "sentinel_shown_level 2", 'sentinel_health{check="network"} 1',
                 "# TYPE sentinel_frames_total counter"):
        assert want in lines, (want, r.text)
