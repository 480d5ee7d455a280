"""End to end over real loopback HTTP: host_client sends the RFC's presets to a running emulator (asyncio front, engine
thread, real espeak-ng voice writing WAVs); its status, its rendered frames and its audio must match the state
machine. Every refusal of the core must reach the client with the core's status."""

import http.client
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from emulator import config as emu_config
from emulator import png
from emulator.demo import run_demo
from emulator.engine import Engine
from emulator.harness import Harness
from host_client import AuthError, RefusedError, preset
from sentinel_core.keyring import KeyRing
from sentinel_core.receiver import Receiver
from sentinel_core.signing import scope, sign

HAVE_VOICE = shutil.which("espeak-ng") is not None and shutil.which("sox") is not None
needs_voice = pytest.mark.skipif(not HAVE_VOICE, reason="espeak-ng and sox come from tools/install-system-deps.sh")

# Short gaps and a fast voice keep the suite quick; the rules are the same as with the defaults.
FAST = {"speech_gap_s": 0, "long_ms": 1000}
P0_KEY = "A03:gpu-worker-08:NCCL_TIMEOUT"
P1_KEY = "A03:gpu-worker-11:NVLINK_DOWNGRADE"


@pytest.fixture
def emu(tmp_path):
    h = Harness(str(tmp_path / "cfg"), voice="off", terminal=dict(FAST)).start()
    yield h
    h.stop()


@pytest.fixture
def emu_voice(tmp_path):
    h = Harness(
        str(tmp_path / "cfg"), voice="wav", wav_dir=str(tmp_path / "wav"), terminal=dict(FAST), voice_rate=240
    ).start()
    yield h
    h.stop()


# -- helpers ---------------------------------------------------------------------------------------------------------


def frames_since(h, t_ms, span_s):
    time.sleep(span_s)
    return [f for f in h.engine.frames() if f.t_ms >= t_ms]


def lit(frame):
    rgb = frame.rgb
    return [tuple(rgb[i : i + 3]) for i in range(0, len(rgb), 3) if any(rgb[i : i + 3])]


def assert_hue(frames, want):
    """Every lit LED of every frame has the alarm colour's hue (the limiter scales all channels alike)."""
    r0, g0, b0 = want
    seen = 0
    for f in frames:
        for r, g, b in lit(f):
            seen += 1
            if r0 == 0:
                assert r == 0, (f.t_ms, (r, g, b))
            if g0 == 0:
                assert g == 0, (f.t_ms, (r, g, b))
            if b0 == 0:
                assert b == 0, (f.t_ms, (r, g, b))
            if r0 and g0 and r >= 40:
                assert abs(g / r - g0 / r0) < 0.12, (f.t_ms, (r, g, b))
    assert seen, "no LED was lit"


def spoken(h, pred, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for rec in list(h.voice.spoken):
            if pred(rec):
                return rec
        time.sleep(0.05)
    raise AssertionError("not spoken: %r" % [r.as_dict() for r in h.voice.spoken])


def sox_stat(path):
    out = subprocess.run(["sox", path, "-n", "stat"], capture_output=True, text=True, timeout=30).stderr
    length = float(re.search(r"Length \(seconds\):\s+([\d.]+)", out).group(1))
    rms = float(re.search(r"RMS\s+amplitude:\s+([\d.]+)", out).group(1))
    return length, rms


# -- the RFC's presets -------------------------------------------------------------------------------------------------


@needs_voice
def test_rfc_story_status_frames_and_voice(emu_voice):
    h = emu_voice
    c = h.client()
    # P1: NVLink slow-down -> orange breath, spoken once in English.
    ack = c.send(preset("p1", "NVLink slow down on rack A03 node gpu worker 11", key=P1_KEY))
    # The 200 came after the engine applied it: every frame from now on shows it (frames stamped between the send
    # and the apply rightly show the previous state, and under load there can be several).
    t_ms = h.engine.t_ms()
    assert ack.status == 200 and not ack.duplicate
    st = h.status()  # 200 means applied: no polling needed
    assert st["shown"]["level"] == "P1" and st["shown"]["pattern"] == "breath" and st["shown"]["color"] == "#FFA500"
    assert_hue(frames_since(h, t_ms, 0.6), (255, 165, 0))
    p1 = spoken(h, lambda r: r.text.startswith("NVLink") and r.completed)
    assert p1.lang == "en" and "en" in p1.voice
    length, rms = sox_stat(p1.path)
    assert 1.0 < length < 8 and rms > 0.02

    # P0: NCCL deadlock (Chinese) -> red flash owns the display, spoken in Mandarin, 3 times planned.
    c.send(preset("p0", "机架 A03 节点 gpu-worker-08 通信死锁", key=P0_KEY))
    t_ms = h.engine.t_ms()
    st = h.status()
    assert st["shown"]["level"] == "P0" and st["shown"]["pattern"] == "flash" and st["shown"]["color"] == "#FF0000"
    assert [a["level"] for a in st["active"]] == ["P0", "P1"]
    assert st["speech"]["speaking"]["level"] == "P0" and st["speech"]["speaking"]["of"] == 3
    frames = frames_since(h, t_ms, 1.0)
    assert_hue(frames, (255, 0, 0))
    # Flash: the field blinks, so the number of lit LEDs swings between frames of the same second.
    counts = [len(lit(f)) for f in frames]
    assert max(counts) > 3 * max(1, min(counts)), counts
    p0 = spoken(h, lambda r: r.lang == "zh" and r.completed)
    assert "cmn" in p0.voice
    length, rms = sox_stat(p0.path)
    assert 1.0 < length < 8 and rms > 0.02

    # ACK by HTTP: mute for 15 min at once; the light stays; the voice stops at once.
    c.ack()
    st = h.status()
    assert st["mute"]["active"] and 895 <= st["mute"]["remaining_s"] <= 900
    assert st["shown"]["level"] == "P0" and st["shown"]["pattern"] == "flash"
    assert st["speech"]["speaking"] is None
    assert h.voice.wait_idle(1.0)
    n_spoken = len(h.voice.spoken)

    # Recovery: a keyed NORMAL clears the P0; a keyless NORMAL is the all clear: green, solid.
    c.send(preset("normal", key=P0_KEY))
    st = h.status()
    assert [a["level"] for a in st["active"] if a["level"] != "NORMAL"] == ["P1"]
    c.send(preset("normal"))
    t_ms = h.engine.t_ms()
    st = h.status()
    assert st["shown"]["level"] == "NORMAL" and st["shown"]["pattern"] == "solid"
    assert not [a for a in st["active"] if a["level"] in ("P0", "P1")]
    assert_hue(frames_since(h, t_ms, 0.4), (0, 255, 0))
    # During the mute, NORMALs are silent (rule 10).
    time.sleep(0.3)
    assert len(h.voice.spoken) == n_spoken


@needs_voice
def test_recovery_speaks_chinese_and_green_expires(emu_voice):
    h = emu_voice
    c = h.client()
    c.send(preset("normal", duration=5))
    st = h.status()
    assert st["shown"]["pattern"] == "solid" and st["shown"]["color"] == "#00FF00"
    rec = spoken(h, lambda r: r.text == "训练集群已恢复正常" and r.completed)
    assert rec.lang == "zh" and "cmn" in rec.voice
    length, rms = sox_stat(rec.path)
    assert 1.0 < length < 6 and rms > 0.02
    h.wait_for(lambda s: s["shown"]["level"] is None, timeout=6)


@needs_voice
def test_p0_cuts_p1_speech_short(emu_voice):
    h = emu_voice
    c = h.client()
    c.send(
        preset(
            "p1",
            "Optical module errors on the spine switch, port forty seven, please check the fibre "
            "jumpers before the next iteration of the job",
            key=P1_KEY,
        )
    )
    h.wait_for(lambda s: (s["speech"]["speaking"] or {}).get("level") == "P1")
    time.sleep(0.3)
    c.send(preset("p0", "XID 79 on gpu worker 8", key=P0_KEY))
    cut = spoken(h, lambda r: r.text.startswith("Optical") and not r.completed, timeout=5)
    assert cut.ended - cut.started < cut.seconds
    first_p0 = spoken(h, lambda r: r.text.startswith("XID"))
    assert first_p0.started >= cut.ended - 0.05


def test_button_short_press_mutes_and_long_press_clears(emu):
    h = emu
    c = h.client()
    c.send(preset("p0", "XID 79 on gpu worker 8", key=P0_KEY))
    h.engine.press(0.15)
    st = h.wait_for(lambda s: s["mute"]["active"], timeout=3)
    assert st["shown"]["level"] == "P0"  # the light stays
    assert P0_KEY in st["mute"]["acknowledged"]
    h.engine.press(1.3)  # long_ms is 1000 in this test's config
    st = h.wait_for(lambda s: not s["active"], timeout=3)
    assert st["shown"]["level"] is None
    m = h.get("/metrics")[1].decode()
    assert 'sentinel_button_presses_total{kind="short"} 1' in m
    assert 'sentinel_button_presses_total{kind="long"} 1' in m


def test_button_bounce_is_not_a_press_but_a_held_press_is(tmp_path):
    # Stepped by hand on a fake ticks clock, every level is sampled: 5 ms blips reach the core's Button (at the
    # engine's frame rate they would fall between two samples and pass without any debounce at all).
    cfg = json.loads(json.dumps(emu_config.DEFAULTS))
    cfg.update(
        {
            "key_id": "gw-test",
            "secret": "0123456789abcdef0123456789abcdef",
            "url": "http://127.0.0.1:1",
            "terminal": {"utc_offset_min": 480},
        }
    )
    ticks = [100.0]
    eng = Engine(cfg, log=lambda msg: None, ticks=lambda: ticks[0])

    def level(*, pressed, hold_s):
        eng.set_button(pressed=pressed)
        end = ticks[0] + hold_s
        while ticks[0] < end:
            eng.step()
            ticks[0] += 0.005

    level(pressed=False, hold_s=0.1)
    for _ in range(3):  # 5 ms blips: shorter than the core's 30 ms debounce
        level(pressed=True, hold_s=0.005)
        level(pressed=False, hold_s=0.1)
    assert eng.glue.presses == [0, 0] and not eng.terminal.snapshot(time.time())["mute"]["active"]
    level(pressed=True, hold_s=0.1)  # held 100 ms: one short press, the same path
    level(pressed=False, hold_s=0.1)
    assert eng.glue.presses == [1, 0] and eng.terminal.snapshot(time.time())["mute"]["active"]


def test_remote_ack_with_key_long_clears_only_that_incident(emu):
    c = emu.client()
    c.send(preset("p0", "XID 79", key=P0_KEY))
    c.send(preset("p1", "NVLink slow down", key=P1_KEY))
    c.ack(key=P1_KEY, long=True)
    st = emu.status()
    assert [a["key"] for a in st["active"]] == [P0_KEY]


def test_duplicate_message_id_is_acknowledged_not_repeated(emu):
    c = emu.client()
    first = c.send(preset("p0", "XID 79", key=P0_KEY, id="m-17"))
    again = c.send(preset("p0", "XID 79", key=P0_KEY, id="m-17"))
    assert not first.duplicate and again.duplicate
    assert emu.status()["counters"]["alarms"] == 1
    assert 'sentinel_requests_total{outcome="duplicate"} 1' in emu.get("/metrics")[1].decode()


def test_heartbeat_arms_the_dead_mans_switch(emu):
    emu.client().heartbeat(interval=1)
    st = emu.status()
    assert st["health"]["heartbeat"]["armed"] and st["health"]["heartbeat"]["ok"]
    st = emu.wait_for(lambda s: s["shown"]["pattern"] == "health_heartbeat", timeout=5)
    assert not st["health"]["heartbeat"]["ok"]


def test_heartbeat_disarmed_over_http_returns_the_terminal_to_idle(tmp_path):
    """The way out of NO HEARTBEAT: interval 0 on the wire, from the CLI as a person types it; it survives a
    restart (the disarm is saved), and --ack --clear was never the way."""
    import sys

    d = str(tmp_path / "cfg")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with Harness(d, voice="off", persist=True) as h:
        h.client().heartbeat(interval=1)
        h.wait_for(lambda s: s["shown"]["pattern"] == "health_heartbeat", timeout=5)
        r = subprocess.run(
            [sys.executable, "-m", "host_client.cli", "--heartbeat", "0", "--url", h.url],
            env=_cli_env(h),
            capture_output=True,
            text=True,
            timeout=30,
            cwd=root,
        )
        assert r.returncode == 0, r.stderr
        st = h.wait_for(lambda s: s["shown"]["pattern"] == "idle", timeout=3)
        assert st["health"]["heartbeat"] == {
            "armed": False,
            "ok": True,
            "interval_s": None,
            "last_age_s": st["health"]["heartbeat"]["last_age_s"],
        }
    with Harness(d, voice="off", persist=True) as h2:  # stopping saved the state
        time.sleep(3)  # an armed 1 s switch would have tripped by now
        assert h2.status()["shown"]["pattern"] == "idle"


# -- refusals ----------------------------------------------------------------------------------------------------------


def _signed(
    cfg, obj=None, raw=None, ts=None, secret=None, key_id=None, ctype="application/json", path="/api/v1/send_msg"
):
    body = raw if raw is not None else json.dumps(obj).encode()
    ts = str(int(time.time())) if ts is None else ts
    headers = {
        "X-API-Key": key_id or cfg["key_id"],
        "X-Timestamp": ts,
        "X-Signature": sign((secret or cfg["secret"]).encode(), ts, body, scope("POST", path)),
    }
    if ctype:
        headers["Content-Type"] = ctype
    return headers, body


def _refusal_cases(cfg):
    ok = {"text": "x", "color": "#FF0000", "light_mode": "flash", "audio_mode": "cycle", "repeat_times": 3}
    now = int(time.time())
    cases = []

    def add(name, method, path, headers, body, status):
        cases.append((name, method, path, headers, body, status))

    add("bad signature", "POST", "/api/v1/send_msg", *_signed(cfg, ok, secret="not-the-secret-at-all-0000"), 401)
    add("unknown key", "POST", "/api/v1/send_msg", *_signed(cfg, ok, key_id="who"), 401)
    h, b = _signed(cfg, ok)
    del h["X-Signature"]
    add("missing signature", "POST", "/api/v1/send_msg", h, b, 401)
    add("bad timestamp", "POST", "/api/v1/send_msg", *_signed(cfg, ok, ts="yesterday"), 401)
    add("stale timestamp", "POST", "/api/v1/send_msg", *_signed(cfg, ok, ts=str(now - 3600)), 401)
    add("future timestamp", "POST", "/api/v1/send_msg", *_signed(cfg, ok, ts=str(now + 3600)), 401)
    add("wrong content type", "POST", "/api/v1/send_msg", *_signed(cfg, ok, ctype="text/plain"), 415)
    add("no content type", "POST", "/api/v1/send_msg", *_signed(cfg, ok, ctype=None), 415)
    add("too large", "POST", "/api/v1/send_msg", *_signed(cfg, dict(ok, text="x" * 3000)), 413)
    add("malformed json", "POST", "/api/v1/send_msg", *_signed(cfg, raw=b'{"text": "x",'), 400)
    add("not utf-8", "POST", "/api/v1/send_msg", *_signed(cfg, raw=b'{"text": "\xff"}'), 400)
    add("bad colour", "POST", "/api/v1/send_msg", *_signed(cfg, dict(ok, color="red")), 422)
    add("bad light mode", "POST", "/api/v1/send_msg", *_signed(cfg, dict(ok, light_mode="disco")), 422)
    add("missing text", "POST", "/api/v1/send_msg", *_signed(cfg, {"color": "#FF0000"}), 422)
    add("bad ack", "POST", "/api/v1/ack", *_signed(cfg, {"long": "yes"}, path="/api/v1/ack"), 422)
    add("bad heartbeat", "POST", "/api/v1/heartbeat", *_signed(cfg, {"interval": -5}, path="/api/v1/heartbeat"), 422)
    add("GET on send_msg", "GET", "/api/v1/send_msg", {}, b"", 405)
    add("no such endpoint", "POST", "/api/v1/send_message", *_signed(cfg, ok), 404)
    return cases


def _http(url, method, path, headers, body):
    host, port = url.split("//")[1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request(method, path, body=body if method != "GET" else None, headers=headers)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type"), json.loads(r.read().decode())
    finally:
        conn.close()


def test_every_refusal_of_the_core_reaches_the_client(emu):
    cfg = emu.cfg
    reference = Receiver(KeyRing({cfg["key_id"]: cfg["secret"].encode()}))
    cases = _refusal_cases(cfg)
    for name, method, path, headers, body, want in cases:
        status, ctype, answer = _http(emu.url, method, path, headers, body)
        ref = reference.handle(method, path, headers, body, int(time.time()))
        assert (status, answer) == (ref.status, ref.answer), name
        assert status == want, (name, answer)
        assert answer["ok"] is False and answer["error"] and answer["message"], name
        assert ctype.startswith("application/json"), name
        assert cfg["secret"] not in json.dumps(answer)
    st = emu.status()
    assert st["active"] == [] and st["counters"]["alarms"] == 0  # nothing refused was acted on
    metrics = emu.get("/metrics")[1].decode()
    assert 'sentinel_refusals_total{code="bad_signature"} 1' in metrics
    assert 'sentinel_refusals_total{code="too_large"} 1' in metrics


def test_oversized_body_is_refused_without_reading_it(emu):
    headers, body = _signed(emu.cfg, raw=b"{" + b" " * 200000 + b"}")
    status, _, answer = _http(emu.url, "POST", "/api/v1/send_msg", headers, body)
    assert status == 413 and answer["error"] == "too_large"
    # the length it was refused for, as the board says it, and counted as the board's server counts it (the glue)
    max_body = emu.engine.receiver.max_body
    assert answer["message"] == "body is %d bytes, at most %d" % (len(body), max_body)
    status, _, answer = _http(emu.url, "PUT", "/api/v1/status", {"Content-Length": "100000"}, b"x" * 100000)
    assert status == 413 and answer["message"] == "body is 100000 bytes, at most %d" % max_body
    metrics = emu.get("/metrics")[1].decode()
    assert 'sentinel_refusals_total{code="too_large"} 2' in metrics
    assert 'sentinel_requests_total{outcome="refused"} 2' in metrics


def test_host_client_errors_carry_the_core_status(emu):
    from host_client import AlarmClient

    bad = AlarmClient(emu.url, emu.cfg["key_id"], "wrong-secret-wrong-secret", retries=0)
    with pytest.raises(AuthError) as e:
        bad.send(preset("p0", "x"))
    assert e.value.status == 401 and e.value.code == "bad_signature"
    stranger = AlarmClient(emu.url, "stranger", emu.cfg["secret"], retries=0)
    with pytest.raises(RefusedError) as e:
        stranger.ack()
    assert e.value.status == 401 and e.value.code == "unknown_key"


# -- status, metrics, snapshots, persistence, demo ---------------------------------------------------------------------


def test_status_metrics_and_png_snapshot(emu):
    c = emu.client()
    c.send(preset("p0", "XID 79", key=P0_KEY))
    st = emu.status()
    assert {"shown", "active", "speech", "mute", "quiet", "health", "counters"} <= set(st)
    assert st["emulator"]["width"] == 16 and st["emulator"]["voice"]["mode"] == "off"
    code, body = emu.get("/metrics")
    text = body.decode()
    assert code == 200
    assert 'sentinel_alarms_total{level="P0"} 1' in text
    assert 'sentinel_active_alarms{level="P0"} 1' in text
    assert "sentinel_shown_level 2" in text
    assert 'sentinel_display_info{pattern="flash"} 1' in text
    for line in text.splitlines():  # exposition format: comments or `name{labels} value`
        assert line.startswith("#") or re.match(r"^[a-z_]+(\{[^}]*\})? -?[0-9.e+-]+$", line), line
    code, body = emu.get("/snapshot.png?scale=1")
    w, hgt, rgb = png.decode(body)
    assert (w, hgt) == (16, 16) and len(rgb) == 16 * 16 * 3
    code, body = emu.get("/snapshot.png")
    assert png.decode(body)[:2] == (256, 256)
    assert emu.get("/snapshot.png?scale=0")[0] == 400


def test_frames_are_the_core_renderers_pixels(emu):
    """The engine's RGB frame is exactly what Renderer.pixel reads from the driver buffer (GRB, serpentine)."""
    from sentinel_core.display import Display
    from sentinel_core.layout import Layout
    from sentinel_core.render import Renderer

    emu.client().send(preset("normal"))
    time.sleep(0.2)
    cfg = emu.cfg
    r = Renderer(
        Layout(16, 16),
        brightness=cfg["brightness"],
        night_brightness=cfg["night_brightness"],
        budget_ma=cfg["budget_ma"],
    )
    f = emu.engine.frames()[-1]
    d = f.display
    disp = Display(d["pattern"], tuple(int(d["color"][i : i + 2], 16) for i in (1, 3, 5)), 0, None, d["night"])
    buf = r.render(disp, f.t_ms)  # solid, no label: independent of the renderer's history
    for y in range(16):
        for x in range(16):
            assert f.pixel(x, y) == r.pixel(buf, x, y), (x, y)


def test_active_alarms_and_mute_survive_a_restart(tmp_path):
    d = str(tmp_path / "cfg")
    with Harness(d, voice="off", persist=True) as h:
        c = h.client()
        c.send(preset("p0", "XID 79", key=P0_KEY))
        c.ack()
    assert os.path.exists(os.path.join(d, "emulator-state.json"))
    with Harness(d, voice="off", persist=True) as h2:
        st = h2.status()
        assert [a["key"] for a in st["active"]] == [P0_KEY]
        assert st["mute"]["active"]
        assert st["speech"]["speaking"] is None and st["speech"]["queued"] == []  # nothing re-spoken (rule 19)


def test_quiet_hours_silence_p1_dim_the_light_and_let_p0_speak(tmp_path):
    # A quiet window around the present minute, whatever the hour the suite runs.
    now_min = (int(time.time()) // 60) % 1440
    hhmm = lambda m: "%02d:%02d" % ((m % 1440) // 60, m % 60)  # noqa: E731
    quiet = {
        "quiet_enabled": True,
        "quiet_start": hhmm(now_min - 60),
        "quiet_end": hhmm(now_min + 60),
        "utc_offset_min": 0,
        "speech_gap_s": 0,
    }
    wav = tmp_path / "wav"
    with Harness(str(tmp_path / "cfg"), voice="wav", wav_dir=str(wav), terminal=quiet) as h:
        c = h.client()
        c.send(preset("p1", "NVLink slow-down", key=P1_KEY))
        st = h.wait_for(lambda s: s["shown"]["level"] == "P1")
        assert st["quiet"]["active"] and st["shown"]["night"] is True
        time.sleep(1.0)
        assert not (wav.exists() and list(wav.iterdir())), "a P1 spoke inside quiet hours"
        c.send(preset("p0", "NCCL deadlock", key=P0_KEY))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (wav.exists() and list(wav.glob("*.wav"))):
            time.sleep(0.05)
        assert list(wav.glob("*.wav")), "the P0 did not speak inside quiet hours"


def test_a_request_captured_before_a_restart_is_refused_after_it(tmp_path):
    import urllib.error
    import urllib.request

    def post(url, req):
        r = urllib.request.Request(url + "/api/v1/send_msg", data=req.body, headers=req.headers, method="POST")
        try:
            with urllib.request.urlopen(r, timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    d = str(tmp_path / "cfg")
    with Harness(d, voice="off", persist=True) as h:
        captured = h.client().sign("/api/v1/send_msg", preset("p0", "XID 79", key=P0_KEY).to_wire())
        assert post(h.url, captured)[0] == 200
    with Harness(d, voice="off", persist=True) as h2:
        status, answer = post(h2.url, captured)
        assert (status, answer["error"]) == (401, "stale_timestamp"), answer


def test_demo_plays_the_story(emu):
    logs = []
    rc = run_demo(config_path=emu.config_path, url=emu.url, pause=0.05, log=logs.append)
    assert rc == 0, logs
    st = emu.status()
    assert not st["mute"]["active"]  # the demo lifts its ACK's mute at the end (test_emulator_exits.py)
    assert st["shown"]["level"] == "NORMAL" and st["shown"]["color"] == "#00FF00"
    assert sum(1 for line in logs if "terminal answered 200" in line) == 3


def test_demo_without_a_terminal_fails_clearly(tmp_path):
    logs = []
    assert run_demo(config_path=str(tmp_path / "missing.json"), log=logs.append) == 1
    assert "start `sentinel-emulator` first" in logs[0]


# -- the commands a person types ---------------------------------------------------------------------------------------


def _cli_env(h):
    env = dict(os.environ)
    env["XDG_CONFIG_HOME"] = os.path.dirname(os.path.dirname(h.config_path))
    for k in ("SENTINEL_URL", "SENTINEL_KEY_ID", "SENTINEL_SECRET", "SENTINEL_SECRET_FILE", "SENTINEL_CONFIG"):
        env.pop(k, None)
    return env


def test_the_printed_send_command_works(emu):
    """What the emulator prints at first start, pasted into another terminal (the CLI finds the same config)."""
    import sys

    from emulator.config import send_command

    cmd = send_command(dict(emu.cfg, port=emu.server.port))
    assert cmd.startswith("sentinel-send --preset p0 --text ") and cmd.endswith(emu.url)
    args = ["--preset", "p0", "--text", "GPU 7 fell off the bus", "--url", emu.url]
    r = subprocess.run(
        [sys.executable, "-m", "host_client.cli"] + args,
        env=_cli_env(emu),
        capture_output=True,
        text=True,
        timeout=30,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert r.returncode == 0, r.stderr
    st = emu.status()
    assert st["shown"]["level"] == "P0" and st["active"][0]["text"] == "GPU 7 fell off the bus"


def test_demo_command_against_a_running_emulator(emu):
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "emulator", "demo", "--config", emu.config_path, "--url", emu.url, "--pause", "0.05"],
        env=_cli_env(emu),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("terminal answered 200") == 3
    assert emu.status()["shown"]["level"] == "NORMAL"


def test_a_dead_engine_answers_503(emu):
    emu.engine.stop()
    headers, body = _signed(emu.cfg, {"text": "x"})
    status, _, answer = _http(emu.url, "POST", "/api/v1/send_msg", headers, body)
    assert status == 503 and answer["error"] == "engine_down"


@pytest.mark.parametrize("p0_full", [True, False])
def test_at_night_a_p0_keeps_full_brightness_unless_the_setting_says_otherwise(tmp_path, p0_full):
    """Issue 37: in quiet hours the P0 matrix was dimmed to the night brightness (dark red on black). Night dimming
    now applies below P0; night_p0_full = false dims the P0 too. Measured on the LEDs' drive levels."""
    now_min = (int(time.time()) // 60) % 1440
    hhmm = lambda m: "%02d:%02d" % ((m % 1440) // 60, m % 60)  # noqa: E731
    quiet = {"quiet_enabled": True, "quiet_start": hhmm(now_min - 60), "quiet_end": hhmm(now_min + 60)}
    quiet["utc_offset_min"] = 0

    def brightest(h, level):
        h.wait_for(lambda s: s["shown"]["level"] == level and s["shown"]["night"] is True)
        time.sleep(1.0)  # a few flash / breath periods
        frames = [f for f in h.engine.frames() if f.display["level"] == level]
        assert frames
        return max(max(f.pixel(x, y)) for f in frames for y in range(f.height) for x in range(f.width))

    with Harness(str(tmp_path / "cfg"), voice="off", terminal=quiet, night_p0_full=p0_full) as h:
        night, day = h.cfg["night_brightness"], h.cfg["brightness"]
        c = h.client()
        c.send(preset("p1", "NVLink slow-down", key=P1_KEY))
        assert brightest(h, "P1") <= night  # below P0: dimmed
        c.send(preset("p0", "NCCL deadlock", key=P0_KEY))
        p0 = brightest(h, "P0")
        if p0_full:
            assert night * 2 < p0 <= day, (p0, night, day)
        else:
            assert p0 <= night, (p0, night)
