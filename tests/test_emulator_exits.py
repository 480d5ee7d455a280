"""Every state has an exit, and health tells the truth (issue 16), over real loopback HTTP with host_client:
unmute by signed request (bound to its path), by the browser page and by the CLI; the demo leaves the terminal as it
found it; a voice nobody can hear (no audio device, no speech engine) is reported silent in the status, the speech
health flag and /metrics."""

import json
import os
import subprocess
import sys
import time

import pytest

from emulator import facts
from emulator import voice as voice_mod
from emulator.demo import run_demo
from emulator.harness import Harness
from host_client import AuthError, preset
from sentinel_core.signing import scope, sign

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY = "A03:gpu-worker-08:NCCL_TIMEOUT"


@pytest.fixture
def emu(tmp_path):
    h = Harness(str(tmp_path / "cfg"), voice="off").start()
    yield h
    h.stop()


def _page_line(emu, name, want, timeout=3.0):
    """The line the browser page shows (GET /ui/view.json's panel), once it reads want (the engine publishes a view
    every frame); AssertionError with the last one otherwise."""
    end = time.monotonic() + timeout
    while True:
        line = json.loads(emu.get("/ui/view.json")[1])["panel"]["lines"][name]
        if want(line) or time.monotonic() > end:
            assert want(line), line
            return line
        time.sleep(0.02)


def test_signed_unmute_ends_the_mute_and_the_acknowledgements(emu):
    c = emu.client()
    c.send(preset("p0", "XID 79", key=KEY))
    c.ack()
    st = emu.status()
    assert st["mute"]["active"] and st["active"][0]["acknowledged"]
    _page_line(emu, "silence", lambda s: s.startswith("SILENT: acknowledged: silent until "))
    ack = c.unmute()
    assert ack.status == 200
    st = emu.status()
    assert st["mute"] == {"active": False, "remaining_s": 0, "acknowledged": []}
    assert not st["active"][0]["acknowledged"]
    # the ACK cut the P0 short (its 2 s gap before the second of three): the unmute does not bring it back, and the
    # panel no longer says "spoken in full" (issue 26)
    line = _page_line(emu, "silence", lambda s: "over" in s)
    assert line == "SILENT: its speech is over (said in full or cut short): its next alarm speaks"
    assert facts.panel(emu.engine.view)["lines"]["silence"] == line  # the window draws the same line
    # the next alarm of the incident speaks again
    c.send(preset("p0", "XID 79 again", key=KEY))
    assert emu.status()["counters"]["alarms"] == 2
    m = emu.get("/metrics")[1].decode()
    assert 'endpoint="unmute"' in m or "unmute" in m


def test_unmute_is_bound_to_its_path(emu):
    """A signed ACK body re-posted to /api/v1/unmute (or the other way round) is refused: v1.1 signs the path."""
    import json
    import time
    import urllib.error
    import urllib.request

    emu.client().send(preset("p0", "XID 79", key=KEY))
    emu.client().ack()
    body = json.dumps({"id": "u-1"}).encode()
    ts = str(int(time.time()))
    mac = sign(emu.cfg["secret"].encode(), ts, body, scope("POST", "/api/v1/ack"))
    req = urllib.request.Request(
        emu.url + "/api/v1/unmute",
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "X-API-Key": emu.cfg["key_id"],
            "X-Timestamp": ts,
            "X-Signature": mac,
        },
    )
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 401 and json.loads(e.value.read())["error"] == "wrong_endpoint"
    assert emu.status()["mute"]["active"]  # refused: nothing changed
    from host_client import AlarmClient

    with pytest.raises(AuthError):
        AlarmClient(emu.url, emu.cfg["key_id"], "not-the-secret-at-all", retries=0).unmute()


def test_cli_unmute(emu):
    emu.client().send(preset("p1", "NVLink slow-down", key=KEY))
    emu.client().ack()
    env = dict(os.environ)
    for k in ("SENTINEL_URL", "SENTINEL_KEY_ID", "SENTINEL_SECRET", "SENTINEL_SECRET_FILE", "SENTINEL_CONFIG"):
        env.pop(k, None)
    r = subprocess.run(
        [sys.executable, "-m", "host_client.cli", "--unmute", "--config", emu.config_path, "--url", emu.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    assert not emu.status()["mute"]["active"]


def test_the_demo_restores_what_it_changed(emu):
    logs = []
    assert run_demo(config_path=emu.config_path, url=emu.url, pause=0.05, log=logs.append) == 0, logs
    st = emu.status()
    assert st["mute"] == {"active": False, "remaining_s": 0, "acknowledged": []}, logs
    assert st["shown"]["level"] == "NORMAL"
    assert any("restored the terminal" in line for line in logs)


class _NoDevice:
    """The player a machine without a sound card ends up with."""

    def __init__(self, log):
        self.kind = "silent"
        log("voice: " + voice_mod.NO_DEVICE_REASON)

    def play(self, path, seconds, cancel):
        return not cancel.wait(seconds)


def _silent_checks(h, reason_words):
    st = h.status()
    v = st["emulator"]["voice"]
    assert v["audible"] is False and reason_words in v["silent_reason"], v
    assert st["health"]["speech"] is False and "speech" in st["health"]["problems"], st["health"]
    assert 'sentinel_health_ok{check="speech"} 0' in h.get("/metrics")[1].decode()
    panel = facts.panel(h.engine.view)
    assert panel["voice"]["audible"] is False and panel["health"]["voice"] is False
    # the light still works
    h.client().send(preset("p0", "XID 79", key=KEY))
    assert h.status()["shown"]["level"] == "P0"


def test_no_audio_device_is_reported_silent(tmp_path, monkeypatch):
    monkeypatch.setattr(voice_mod, "_Player", _NoDevice)
    with Harness(str(tmp_path / "cfg"), voice="device") as h:
        _silent_checks(h, "no audio output device")


def test_no_speech_engine_is_reported_silent(tmp_path, monkeypatch):
    def broken(*_a, **_k):
        raise ImportError("No module named 'pyttsx3'")

    monkeypatch.setattr(voice_mod, "shared_synth", broken)
    with Harness(str(tmp_path / "cfg"), voice="device") as h:
        _silent_checks(h, "no speech engine works")


def test_wav_dir_counts_as_heard(tmp_path, monkeypatch):
    monkeypatch.setattr(voice_mod, "_Player", _NoDevice)
    with Harness(str(tmp_path / "cfg"), voice="wav", wav_dir=str(tmp_path / "wav")) as h:
        st = h.status()
        assert st["emulator"]["voice"]["audible"] is True and st["health"]["speech"] is True
