"""The terminal in a real browser: Debian's chromium, headless, driven over the DevTools protocol (tests/cdp.py).
`GET /` must show the live matrix in screen colours (the P0 flashes red, and off), the panel's facts, and an ACK
button that mutes; and only a page that holds the run's token may press."""

import json
import os
import re
import time
import urllib.error
import urllib.request

import pytest
from cdp import Browser, chromium_path

from emulator import page
from emulator.facts import TO_SCREEN
from emulator.harness import Harness
from host_client import preset

KEY = "A03:gpu-worker-08:NCCL_TIMEOUT"
P0_TEXT = "训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁，全环算力挂起"

needs_chromium = pytest.mark.skipif(chromium_path() is None, reason="chromium comes from tools/install-system-deps.sh")

# Every LED centre of the canvas: [r, g, b] per LED, and the frame number the page drew.
LEDS_JS = """(() => {
  const c = document.getElementById('m'), p = +c.dataset.pitch, g = c.getContext('2d');
  const w = c.width / p, h = c.height / p, out = [];
  for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) {
    const d = g.getImageData(Math.floor(x * p + p / 2), Math.floor(y * p + p / 2), 1, 1).data;
    out.push([d[0], d[1], d[2]]);
  }
  return {seq: +c.dataset.seq, leds: out};
})()"""


@pytest.fixture
def emu(tmp_path):
    h = Harness(str(tmp_path / "cfg"), voice="off").start()
    yield h
    h.stop()


@pytest.fixture
def browser(tmp_path):
    b = Browser(str(tmp_path / "profile"))
    yield b
    b.close()


def _red(rgb):
    r, g, b = rgb
    return r > 120 and g < 0.35 * r and b < 0.35 * r


@needs_chromium
def test_the_page_flashes_red_for_a_p0_and_its_ack_button_mutes(emu, browser, tmp_path):
    browser.goto(emu.url + "/")
    browser.wait_js("document.body.dataset.ready === '1'")
    # voice off in this fixture: not muted, and the page does not pretend there is sound
    assert browser.js("document.getElementById('mute').textContent") == "not muted"
    emu.client().send(preset("p0", P0_TEXT, key=KEY))
    browser.wait_js("document.getElementById('badge').textContent.startsWith('P0')")
    # The flash: samples over 2.5 s (the flash period is 400 ms, the page polls every 100 ms) must show many red
    # LEDs and, in the off half, none.
    reds = []
    frames = {}
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        s = browser.js(LEDS_JS)
        reds.append(sum(1 for led in s["leds"] if _red(led)))
        frames[s["seq"]] = s["leds"]
        time.sleep(0.03)
    assert max(reds) >= 40, reds
    assert min(reds) == 0, reds
    # Screen colours as the window shows them: each LED's canvas colour is the sRGB encoding of its drive level.
    kept = {f.seq: f for f in emu.engine.frames()}
    checked = 0
    for seq, leds in frames.items():
        f = kept.get(seq)
        if f is None:
            continue
        for y in range(f.height):
            for x in range(f.width):
                drive = f.pixel(x, y)
                if drive == (0, 0, 0):
                    continue
                got = leds[y * f.width + x]
                want = [TO_SCREEN[v] for v in drive]
                assert all(abs(a - b) <= 3 for a, b in zip(got, want, strict=True)), (seq, x, y, got, want, drive)
                checked += 1
    assert checked > 20
    assert "训练集群" in browser.js("document.getElementById('text').textContent")
    # A real click on the ACK button (mouse pressed and released inside it) mutes; the light stays.
    rect = browser.js(
        "(() => { const r = document.getElementById('ack').getBoundingClientRect();"
        " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
    )
    browser.click(rect[0], rect[1])
    st = emu.wait_for(lambda s: s["mute"]["active"], timeout=5)
    assert st["shown"]["level"] == "P0" and st["active"][0]["acknowledged"]
    browser.wait_js("document.getElementById('mute').textContent.startsWith('MUTED until')")
    browser.wait_js("document.getElementById('silence').textContent.includes('acknowledged: silent until')")
    browser.screenshot(str(tmp_path / "page.png"))
    assert os.path.getsize(str(tmp_path / "page.png")) > 5000
    # unmute from the page: the mute and the acknowledgement are gone
    browser.js("document.getElementById('unmute').click()")
    emu.wait_for(lambda s: not s["mute"]["active"] and not s["mute"]["acknowledged"], timeout=5)


def _press(url, headers, body=b'{"press": "short"}'):
    req = urllib.request.Request(url + "/ui/press", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_only_a_page_with_the_token_may_press(emu):
    token = emu.app.extensions["sentinel_ui_token"]
    emu.client().send(preset("p0", "XID 79", key=KEY))
    host = "127.0.0.1:%d" % emu.server.port
    good = {"Content-Type": "application/json", page.TOKEN_HEADER: token, "Host": host}
    refused = [
        {k: v for k, v in good.items() if k != page.TOKEN_HEADER},  # no token
        dict(good, **{page.TOKEN_HEADER: token[:-1] + ("A" if token[-1] != "A" else "B")}),
        dict(good, Host="evil.example:%d" % emu.server.port),  # DNS rebinding
        dict(good, Origin="http://evil.example"),  # another site's page
    ]
    for h in refused:
        status, answer = _press(emu.url, h)
        assert (status, answer["error"]) == (403, "forbidden"), (h, answer)
    assert _press(emu.url, dict(good, **{"Content-Type": "text/plain"}))[0] == 415
    assert _press(emu.url, good, b'{"press": "hard"}')[0] == 422
    assert _press(emu.url, good, b"{")[0] == 400
    assert not emu.status()["mute"]["active"]  # nothing refused changed anything
    assert _press(emu.url, dict(good, Origin="http://" + host)) == (200, {"ok": True, "press": "short"})
    assert emu.status()["mute"]["active"]


def test_the_token_is_in_the_page_for_this_machine_only():
    status, ctype, body = page.index("tok-123", "127.0.0.1", "127.0.0.1:8765", "127.0.0.1")
    assert status == 200 and ctype.startswith("text/html") and b'content="tok-123"' in body
    _, _, remote = page.index("tok-123", "10.0.0.7", "10.0.0.20:8765", "0.0.0.0")
    assert b"tok-123" not in remote and b'content=""' in remote
    _, _, rebound = page.index("tok-123", "127.0.0.1", "evil.example:8765", "127.0.0.1")
    assert b"tok-123" not in rebound
    # offline: nothing loaded from elsewhere
    assert b"http://" not in body and b"https://" not in body


def _api_ack(emu, body):
    req = emu.client().sign("/api/v1/ack", body)
    r = urllib.request.Request(emu.url + "/api/v1/ack", data=req.body, headers=req.headers, method="POST")
    with urllib.request.urlopen(r, timeout=5) as resp:
        return resp.status


@needs_chromium
def test_the_page_lists_every_active_alarm_p0_first_with_its_age_and_who_acknowledged_it(emu, browser):
    """Issue 37: the headline said "active: 2 P0, 1 P1" and the page listed one alarm. Now every active alarm is a
    row, P0 first, with its age and its ACK state, and the row says who acknowledged: the page or an ACK request
    that names itself (a gateway's group ACK, the CLI)."""
    c = emu.client()
    c.send(preset("p1", "Rack A03 node gpu-worker-11: NVLink warning", key="A03:gpu-worker-11:NVLINK_ERROR:gpu2"))
    c.send(preset("p0", P0_TEXT, key=KEY))
    c.send(preset("p0", "Rack B12 node gpu-node-117: fatal hardware fault", key="B12:gpu-node-117:XID_FATAL:gpu3"))
    browser.goto(emu.url + "/")
    browser.wait_js("document.querySelectorAll('#alarms li').length === 3")
    rows = browser.js("[...document.querySelectorAll('#alarms li')].map(li => [li.dataset.level, li.textContent])")
    assert [r[0] for r in rows] == ["P0", "P0", "P1"]  # P0 first (newest first within a level, as shown)
    assert rows[0][1].startswith("P0  ") and "not acknowledged" in rows[0][1] and "fatal hardware fault" in rows[0][1]
    assert P0_TEXT in rows[1][1] and "NVLink warning" in rows[2][1]
    assert all(re.match(r"P[01]  \d+s  ", r[1]) for r in rows), rows  # the age, in seconds this young
    assert browser.js("document.getElementById('counts').textContent") == "active: 2 P0, 1 P1"
    # one ACK request that names itself: that row says so, the others are still unacknowledged
    assert _api_ack(emu, {"key": "B12:gpu-node-117:XID_FATAL:gpu3", "by": "group ACK"}) == 200
    browser.wait_js("[...document.querySelectorAll('#alarms li')].some(li => li.textContent.includes('ACK by group'))")
    rows = browser.js("[...document.querySelectorAll('#alarms li')].map(li => li.textContent)")
    assert re.search(r"ACK by group ACK, muted 1[45]:\d\d more", rows[0]), rows
    assert "not acknowledged" in rows[1] and "not acknowledged" in rows[2]
    # the page's own ACK button mutes everything: every row now acknowledged by the page
    rect = browser.js(
        "(() => { const r = document.getElementById('ack').getBoundingClientRect();"
        " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
    )
    browser.click(rect[0], rect[1])
    browser.wait_js("[...document.querySelectorAll('#alarms li')].every(li => li.textContent.includes('ACK by'))")
    rows = browser.js("[...document.querySelectorAll('#alarms li')].map(li => li.textContent)")
    assert all("ACK by the page" in r for r in rows), rows
    assert [a["acknowledged_by"] for a in emu.status()["active"]] == ["page", "page", "page"]
