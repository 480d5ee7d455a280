"""The pygame window under SDL's dummy video driver: it draws the engine's frames as LEDs, its ACK button works by
mouse and keyboard (short and long press through the core's debouncer), and a screenshot is a real PNG."""

import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")

import pygame
import pytest

from emulator import png
from emulator.facts import fmt_mmss
from emulator.harness import Harness
from emulator.window import Window, find_cjk_font
from host_client import preset

KEY = "A03:gpu-worker-08:NCCL_TIMEOUT"


@pytest.fixture
def emu(tmp_path):
    h = Harness(str(tmp_path / "cfg"), voice="off", terminal={"long_ms": 1000}).start()
    w = Window(h.engine, url=h.url)
    yield h, w
    w.close()
    h.stop()


def pump(win, frames):
    win.run(max_frames=win.frames + frames)


def click(win, down, up=None, frames_held=0):
    """Mouse button 1 down at `down`, `frames_held` frames, up at `up` (default: the same place)."""
    pygame.event.post(pygame.event.Event(pygame.MOUSEBUTTONDOWN, pos=down, button=1))
    if frames_held:
        pump(win, frames_held)
    pygame.event.post(pygame.event.Event(pygame.MOUSEBUTTONUP, pos=up or down, button=1))
    pump(win, 2)


def test_draws_leds_in_the_alarm_colour(emu, tmp_path):
    h, win = emu
    h.client().send(preset("normal", "Ring rebuilt", duration=30))
    pump(win, 5)
    path = str(tmp_path / "shot.png")
    win.save(path)
    surf = pygame.image.load(path)
    assert surf.get_size() == win.size
    # The LED at the matrix's top-left corner is lit (solid field) and green on screen.
    frame = h.engine.view.frame
    r, g, b = frame.pixel(0, 0)
    assert g > 0 and r == 0 and b == 0
    cx = win.margin + win.pitch // 2
    sr, sg, sb, _ = surf.get_at((cx, cx))
    assert sg > 60 and sr < 40 and sb < 40, (sr, sg, sb)


def test_mouse_click_on_ack_mutes(emu):
    h, win = emu
    h.client().send(preset("p0", "XID 79", key=KEY))
    pos = win.button_rect.center
    pygame.event.post(pygame.event.Event(pygame.MOUSEBUTTONDOWN, pos=pos, button=1))
    pump(win, 6)  # ~200 ms held
    pygame.event.post(pygame.event.Event(pygame.MOUSEBUTTONUP, pos=pos, button=1))
    pump(win, 3)
    st = h.wait_for(lambda s: s["mute"]["active"], timeout=3)
    assert st["shown"]["level"] == "P0"  # the light stays on a short press
    pump(win, 2)  # the window shows the countdown


def test_click_outside_the_button_does_nothing(emu):
    h, win = emu
    h.client().send(preset("p0", "XID 79", key=KEY))
    click(win, (5, 5), frames_held=6)
    assert not h.status()["mute"]["active"]


def test_holding_space_is_a_long_press(emu):
    h, win = emu
    h.client().send(preset("p0", "XID 79", key=KEY))
    pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=pygame.K_SPACE, mod=0, unicode=" ", scancode=44))
    pump(win, 40)  # ~1.3 s at 30 fps; long_ms is 1000 here
    pygame.event.post(pygame.event.Event(pygame.KEYUP, key=pygame.K_SPACE, mod=0, unicode=" ", scancode=44))
    pump(win, 3)
    st = h.wait_for(lambda s: not s["active"], timeout=3)
    assert st["shown"]["level"] is None


def test_key_a_is_a_short_press(emu):
    h, win = emu
    h.client().send(preset("p1", "NVLink slow down", key=KEY))
    pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=pygame.K_a, mod=0, unicode="a", scancode=4))
    pump(win, 5)
    pygame.event.post(pygame.event.Event(pygame.KEYUP, key=pygame.K_a, mod=0, unicode="a", scancode=4))
    pump(win, 3)
    h.wait_for(lambda s: s["mute"]["active"], timeout=3)


def test_escape_closes_the_window(emu):
    _, win = emu
    pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=pygame.K_ESCAPE, mod=0, unicode="", scancode=41))
    win.run(max_frames=win.frames + 100)
    assert not win.running


def test_png_snapshot_matches_the_frame(emu):
    h, _ = emu
    h.client().send(preset("p1", "NVLink slow down", key=KEY))
    frame = h.engine.frames()[-1]
    w, hgt, rgb = png.decode(frame.png(scale=1))
    assert (w, hgt, rgb) == (16, 16, frame.rgb)
    w, hgt, big = png.decode(frame.png(scale=8))
    assert (w, hgt) == (128, 128)
    assert tuple(big[0:3]) == frame.pixel(0, 0)


def test_helpers():
    assert fmt_mmss(899.7) == "14:59" and fmt_mmss(-3) == "0:00"
    font = find_cjk_font()
    assert font is None or os.path.exists(font)


def test_chinese_without_a_cjk_font_falls_back_to_the_label(tmp_path, monkeypatch):
    import emulator.window as window_mod

    monkeypatch.setattr(window_mod, "find_cjk_font", lambda: None)
    with Harness(str(tmp_path / "cfg"), voice="off") as h:
        win = Window(h.engine, url=h.url)
        try:
            assert win.cjk_path is None
            h.client().send(preset("p0", "机架 A03 节点 gpu-worker-08 通信死锁", key=KEY))
            pump(win, 3)
            path = str(tmp_path / "fallback.png")
            win.save(path)
            assert pygame.image.load(path).get_size() == win.size
        finally:
            win.close()


def test_a_click_quicker_than_the_debounce_is_one_short_press(emu):
    h, win = emu
    h.client().send(preset("p1", "NVLink slow down", key=KEY))
    pos = win.button_rect.center
    # down and up in the same frame: far shorter than the box's 30 ms debounce, still one press
    click(win, pos)
    st = h.wait_for(lambda s: s["mute"]["active"], timeout=3)
    assert st["active"][0]["acknowledged"]


def test_a_click_released_outside_the_button_is_taken_back(emu):
    h, win = emu
    h.client().send(preset("p1", "NVLink slow down", key=KEY))
    click(win, win.button_rect.center, up=(5, 5), frames_held=2)
    assert not h.status()["mute"]["active"]


def test_key_u_unmutes(emu):
    h, win = emu
    h.client().send(preset("p0", "XID 79", key=KEY))
    h.client().ack()
    assert h.status()["mute"]["active"]
    pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=pygame.K_u, mod=0, unicode="u", scancode=24))
    pump(win, 3)
    h.wait_for(lambda s: not s["mute"]["active"] and not s["mute"]["acknowledged"], timeout=3)


def _shows(win, path, text, font):
    """The screenshot at path holds the rendered text: its exact pixels appear somewhere in the panel."""
    shot = pygame.image.load(path)
    want = font.render(text, True, (240, 190, 40))
    w, h = want.get_size()
    # its fully inked pixels, looked for at every height of the panel (text is drawn at x = panel + 20)
    ink = [(i, j) for i in range(w) for j in range(h) if want.get_at((i, j))[3] == 255]
    assert len(ink) > 50
    color = want.get_at(ink[0])[:3]
    x = win.panel_x + 20
    for y in range(win.size[1] - h):
        if all(shot.get_at((x + i, y + j))[:3] == color for i, j in ink):
            return True
    return False


def test_screenshot_shows_why_the_alarm_is_silent(emu, tmp_path):
    from emulator.facts import hhmm

    h, win = emu
    h.client().send(preset("p0", "XID 79 on gpu-worker-08", key=KEY))
    click(win, win.button_rect.center)
    st = h.wait_for(lambda s: s["mute"]["active"], timeout=3)
    pump(win, 2)
    path = str(tmp_path / "silent.png")
    win.save(path)
    reason = "SILENT: acknowledged: silent until %s" % hhmm(st, st["mute"]["remaining_s"])
    assert _shows(win, path, reason, win.font_small), reason
    assert not _shows(win, path, "SILENT: muted until 00:00", win.font_small)
