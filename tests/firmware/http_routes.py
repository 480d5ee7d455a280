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
    assert r.json == {
        "ok": True,
        "kind": "alarm",
        "duplicate": False,
        "level": "P0",
        "key": "A03:w8:NCCL",
        "id": "m-1",
    }, r.json
    assert s.terminal.display(ft()).pattern == "flash"
    # The gateway's retry of the same message: 200 again, acted on once.
    r = await c.post("/api/v1/send_msg", headers=h, body=b)
    assert r.status_code == 200 and r.json["duplicate"] is True


async def test_rfc_v1_body_exactly_as_the_rfc_gateway_sends_it():
    s, ft, c = _client()
    body = (
        '{"text": "NCCL deadlock on A03", "color": "#FF0000", "light_mode": "flash", "audio_mode": "cycle", '
        '"repeat_times": 3}'
    )
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
    h, b = signed({"key": "k1", "long": True}, ft(), path="/api/v1/ack")
    r = await c.post("/api/v1/ack", headers=h, body=b)
    assert r.status_code == 200 and r.json["kind"] == "ack", r.text
    assert s.status(ft())["active"] == []
    h, b = signed({"interval": 60}, ft(), path="/api/v1/heartbeat")
    r = await c.post("/api/v1/heartbeat", headers=h, body=b)
    assert r.status_code == 200 and r.json["kind"] == "heartbeat", r.text
    assert s.status(ft())["health"]["heartbeat"]["interval_s"] == 60
    # the ways out: interval 0 disarms, unmute ends the mute
    h, b = signed({"interval": 0}, ft(), path="/api/v1/heartbeat")
    r = await c.post("/api/v1/heartbeat", headers=h, body=b)
    assert r.status_code == 200, r.text
    assert s.status(ft())["health"]["heartbeat"]["armed"] is False
    h, b = signed({}, ft(), path="/api/v1/ack")
    await c.post("/api/v1/ack", headers=h, body=b)
    assert s.status(ft())["mute"]["active"] is True
    h, b = signed({}, ft(), path="/api/v1/unmute")
    r = await c.post("/api/v1/unmute", headers=h, body=b)
    assert r.status_code == 200 and r.json["kind"] == "unmute", r.text
    assert s.status(ft())["mute"]["active"] is False


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
    for want in (
        'sentinel_alarms_total{level="P0"} 1',
        'sentinel_requests_total{outcome="accepted"} 1',
        'sentinel_requests_total{outcome="refused"} 1',
        'sentinel_active_alarms{level="P0"} 1',
        "sentinel_shown_level 2",
        'sentinel_health_ok{check="network"} 1',
        'sentinel_refusals_total{code="bad_signature"} 1',
        "# TYPE sentinel_frames_total counter",
    ):
        assert want in lines, (want, r.text)


def _fill(s, ft, n=20):
    """A full terminal: more alarms than it keeps (16 active), speech queued, one incident acknowledged."""
    for i in range(n):
        level = "p0" if i % 3 else "p1"
        h, b = signed(
            preset_body(
                level, "A%02d gpu-worker-%02d NCCL timeout" % (i, i), key="A%02d:w%02d" % (i, i), id="m-%d" % i
            ),
            ft(),
        )
        assert s.handle_http("POST", "/api/v1/send_msg", h, b)[0] == 200
        ft.t += 1
    h, b = signed({"key": "A19:w19", "long": False}, ft(), path="/api/v1/ack")
    assert s.handle_http("POST", "/api/v1/ack", h, b)[0] == 200
    s.speech_step(100)


def _text(parts):
    return "".join(p.decode() if isinstance(p, bytes) else p for p in parts)


def _steady(st):
    # The two figures that move between two calls by themselves.
    st["device"].pop("heap_free", None)
    st["device"].pop("uptime_s", None)
    return st


async def test_status_in_pieces_is_the_whole_document():
    import sys

    s, ft, c = _client()
    _fill(s, ft)
    now = ft()
    whole = json.dumps(s.status(now))
    parts = list(s.status_parts(now))
    # One piece per active alarm at least: the board never holds the whole page.
    assert len(s.terminal.active) == 16 and len(parts) > 16, (len(s.terminal.active), len(parts))
    assert max(len(p) for p in parts) < 1024, max(len(p) for p in parts)
    streamed = _text(parts)
    assert _steady(json.loads(streamed)) == _steady(json.loads(whole))
    if sys.implementation.name == "cpython":
        # Same key order, so the same text up to the device's moving figures.
        assert streamed.split(', "device": ')[0] == whole.split(', "device": ')[0]
    # microdot writes the pieces as they come: no Content-Length, the body read to the end.
    r = await c.get("/api/v1/status")
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json", r.headers
    assert _steady(r.json) == _steady(json.loads(json.dumps(s.status(now)))), r.text
    r = await c.post("/api/v1/status", body=b"")
    assert r.status_code == 405 and r.json["error"] == "method_not_allowed", r.text


def _metrics_from_status(s, now):
    # What the page must say, read off the status document instead of the terminal: {sample: value}.
    st = s.status(now)
    dev = st["device"]
    out = {}
    http = dev["http"]
    n = s.glue.requests
    assert n[0] + n[1] + n[2] == http["requests"] and n[2] == http["refused"], (n, http)
    out['sentinel_requests_total{outcome="refused"}'] = http["refused"]
    for lv in ("NORMAL", "P1", "P0"):
        out['sentinel_active_alarms{level="%s"}' % lv] = sum(1 for a in st["active"] if a["level"] == lv)
    lv = st["shown"]["level"]
    out["sentinel_shown_level"] = ("NORMAL", "P1", "P0").index(lv) if lv else -1
    out['sentinel_display_info{pattern="%s"}' % st["shown"]["pattern"]] = 1
    mute = st["mute"]
    out["sentinel_mute_remaining_seconds"] = int(mute["remaining_s"] or 0) if mute["active"] else 0
    out["sentinel_quiet_hours"] = 1 if st["quiet"]["active"] else 0
    out["sentinel_speaking"] = 0 if st["speech"]["speaking"] is None else 1
    out["sentinel_speech_queued"] = len(st["speech"]["queued"])
    out["sentinel_speech_dropped_total"] = st["speech"]["dropped"]
    for name in ("clock", "network", "speech", "config"):
        out['sentinel_health_ok{check="%s"}' % name] = 1 if st["health"][name] else 0
    out['sentinel_health_ok{check="heartbeat"}'] = 1 if st["health"]["heartbeat"]["ok"] else 0
    out["sentinel_watchdog_feeds_total"] = dev["watchdog"]["feeds"]
    out["sentinel_state_writes_total"] = dev["flash"]["writes"] if dev["flash"] else 0
    return out


def _samples(lines):
    out = {}
    for x in lines:
        if x and not x.startswith("#"):
            k, v = x.rsplit(" ", 1)
            out[k] = int(v)
    return out


def _steady_lines(lines):
    return [
        x
        for x in lines
        if not x.startswith("sentinel_heap_free_bytes ") and not x.startswith("sentinel_uptime_seconds ")
    ]


async def test_metrics_in_pieces_read_from_the_terminal_say_what_the_status_says():
    import sys

    s, ft, c = _client()
    for fill in (False, True):
        if fill:
            _fill(s, ft)
            s.button_step(0)
            # A remote short press: everything muted.
            h, b = signed({"key": None, "long": False}, ft(), path="/api/v1/ack")
            assert s.handle_http("POST", "/api/v1/ack", h, b)[0] == 200
        now = ft()
        parts = list(s.metrics_parts(now))
        assert len(parts) > 10 and "sentinel_core.metrics" not in sys.modules
        text = _text(parts)
        assert text.endswith("\n")
        lines = text.split("\n")[:-1]
        got = _samples(lines)
        want = _metrics_from_status(s, now)
        for k in want:
            assert got.get(k) == want[k], (k, want[k], got.get(k), text)
        st, body = s.handle_http("GET", "/metrics", {}, b"")
        assert st == 200 and _steady_lines(body.decode().split("\n")[:-1]) == _steady_lines(lines)
        r = await c.get("/metrics")
        assert r.status_code == 200 and _steady_lines(r.text.split("\n")[:-1]) == _steady_lines(lines), r.text
        # Loaded for the scrape, dropped after it: not held between scrapes.
        assert "sentinel_core.metrics" not in sys.modules


async def test_one_route_answers_every_path_and_method_in_json():
    s, ft, c = _client()
    for path in ("/", "/nope", "/api/v1/status/x", "/api/v2/send_msg"):
        r = await c.get(path)
        assert r.status_code == 404 and r.json == {"ok": False, "error": "not_found", "message": "no such endpoint"}, (
            path,
            r.text,
        )
    r = await c.post("/metrics", body=b"")
    assert r.status_code == 405 and r.json["error"] == "method_not_allowed", r.text
    for m in ("PUT", "DELETE", "PATCH"):
        r = await c.request(m, "/api/v1/ack", body=b"{}")
        assert r.status_code == 405 and r.json["error"] == "method_not_allowed", (m, r.text)
    r = await c.request("HEAD", "/metrics")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain"), r.headers


class _Conn:
    # A connection as asyncio's server hands it to microdot: the request's bytes to read, what is written recorded,
    # with the number of state writes to flash seen at each write.
    def __init__(self, data, store):
        self.data = data
        self.pos = 0
        self.store = store
        self.out = []
        self.closed = False

    async def readline(self):
        i = self.data.find(b"\n", self.pos) + 1 or len(self.data)
        line = self.data[self.pos : i]
        self.pos = i
        return line

    async def readexactly(self, n):
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    async def awrite(self, data):
        self.out.append((bytes(data), self.store.writes))

    async def aclose(self):
        self.closed = True

    def get_extra_info(self, name):
        return ("192.168.1.10", 40000)


async def _serve(s, method, path, headers, body):
    head = "%s %s HTTP/1.1\r\nHost: sentinel.local\r\n" % (method, path)
    for k in headers:
        head += "%s: %s\r\n" % (k, headers[k])
    if body:
        head += "Content-Length: %d\r\n" % len(body)
    c = _Conn(head.encode() + b"\r\n" + body, s.store)
    await make_app(s, s.cfg["http"]["max_body"]).handle_request(c, c)
    assert c.closed
    return c


async def test_answer_on_the_wire_then_the_state_written():
    import sys

    s, ft, _ = _client()
    h, b = signed(preset_body("p0", "A03 gpu-worker-08 NCCL timeout", key="A03:w8:NCCL", id="m-9"), ft())
    w0 = s.store.writes
    c = await _serve(s, "POST", "/api/v1/send_msg", h, b)
    wire = b"".join(x for x, _ in c.out)
    head, body = wire.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.0 200 OK", lines
    assert sorted(lines[1:]) == ["Content-Length: %d" % len(body), "Content-Type: application/json"], lines
    assert json.loads(body) == {
        "ok": True,
        "kind": "alarm",
        "duplicate": False,
        "level": "P0",
        "key": "A03:w8:NCCL",
        "id": "m-9",
    }, body
    # The answer went out before the state was written to flash, and the state was written once it had.
    assert all(n == w0 for _, n in c.out) and s.store.writes == w0 + 1, (w0, c.out, s.store.writes)
    # A refusal: its status line, nothing written.
    h["X-Signature"] = "f" * 64
    c = await _serve(s, "POST", "/api/v1/send_msg", h, b)
    assert c.out[0][0] == b"HTTP/1.0 401 N/A\r\n" and s.store.writes == w0 + 1, c.out
    # A streamed page: no Content-Length, the pieces as they come, the metrics module dropped at the end.
    c = await _serve(s, "GET", "/metrics", {}, b"")
    wire = b"".join(x for x, _ in c.out)
    head, body = wire.split(b"\r\n\r\n", 1)
    assert head.decode().split("\r\n")[1:] == ["Content-Type: text/plain; version=0.0.4; charset=utf-8"], head
    assert b'sentinel_alarms_total{level="P0"} 1\n' in body, body
    assert "sentinel_core.metrics" not in sys.modules
    # OPTIONS is the core's to answer, as in the emulator.
    c = await _serve(s, "OPTIONS", "/api/v1/send_msg", {}, b"")
    assert c.out[0][0] == b"HTTP/1.0 405 N/A\r\n", c.out
