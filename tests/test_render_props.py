"""Properties of the LED renderer on CPython (hypothesis), seeded from tests/vectors/render.json, and the checks
that the baked tables (font, icons, breath curve) match their documented sources."""

import json
import math
import os
import re

from hypothesis import example, given, settings
from hypothesis import strategies as st
from render import PATTERNS  # tests/core/render.py: every Display.pattern

from sentinel_core import curves, font, glyphs, power
from sentinel_core.layout import Layout
from sentinel_core.render import Renderer
from sentinel_core.wiring import ORDERS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = os.path.join(ROOT, "firmware", "lib", "sentinel_core")
with open(os.path.join(ROOT, "tests", "vectors", "render.json")) as f:
    CASES = json.load(f)["cases"]
FRAME_CASES = [c for c in CASES if c["kind"] == "frame"]


class D:
    def __init__(self, pattern, color=(0, 0, 0), level=None, text=None, night=False):
        self.pattern = pattern
        self.color = color
        self.level = level
        self.text = text
        self.night = night


def _layout(d):
    return Layout(d["width"], d["height"], d.get("serpentine", True), d.get("rotation", 0), d.get("order", "GRB"))


channel = st.integers(0, 255)
colors = st.tuples(channel, channel, channel)
labels = st.one_of(
    st.none(), st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40), st.text(max_size=8)
)
displays = st.builds(
    D, st.sampled_from(PATTERNS), colors, st.one_of(st.none(), st.integers(0, 2)), labels, st.booleans()
)
sizes = st.one_of(st.tuples(st.integers(1, 64), st.just(1)), st.tuples(st.integers(1, 24), st.integers(1, 24)))
layouts = st.builds(
    lambda wh, s, r, o: Layout(wh[0], wh[1], s, r, o),
    sizes,
    st.booleans(),
    st.sampled_from((0, 90, 180, 270)),
    st.sampled_from(ORDERS),
)


# -- the current limiter -------------------------------------------------------------------------------------


def _vector_examples(fn):
    # Every frame vector's setup, replayed by the property with a tight budget of its own.
    for c in FRAME_CASES:
        last = c["steps"][-1]
        d = last["display"]
        disp = D(d["pattern"], tuple(d["color"]), d.get("level"), d.get("text"), d.get("night", False))
        ren = dict(c["renderer"])
        fn = example(
            _layout(c["layout"]), disp, ren.get("brightness", 128), ren.get("budget_ma", 730), 55, last["t_ms"]
        )(fn)
    return fn


@_vector_examples
@example(Layout(16, 16), D("solid", (255, 255, 255)), 255, 1, 55, 0)
@example(Layout(64, 64), D("flash", (255, 255, 255)), 255, 850, 60, 0)
@example(Layout(1, 1), D("breath", (255, 255, 255), 1), 255, 0, 55, 1500)
@given(layouts, displays, st.integers(0, 255), st.integers(0, 20000), st.integers(1, 120), st.integers(0, 10**7))
@settings(max_examples=300, deadline=None)
def test_limiter_never_exceeds_budget(lay, disp, brightness, budget, ma, t):
    r = Renderer(lay, brightness=brightness, night_brightness=brightness // 4, budget_ma=budget, ma_per_led=ma)
    buf = r.render(disp, t)
    assert len(buf) == 3 * lay.n
    # Exact: sum(frame) * ma / 765 <= budget, no rounding in the frame's favour.
    assert sum(buf) * ma <= budget * 765


@given(st.integers(2, 300), colors.filter(lambda c: sum(c) > 0), st.integers(50, 3000))
@settings(max_examples=200, deadline=None)
def test_limiter_uses_the_budget_it_has(n, color, budget):
    # Over budget, a full strip is dimmed to just under the budget, not far below it.
    r = Renderer(Layout(n, 1), brightness=255, budget_ma=budget)
    buf = r.render(D("solid", color), 0)
    umax = power.units_max(budget, 55)
    assert sum(buf) <= umax
    if n * sum(color) > umax:
        # What may be lost: one brightness step of the whole strip, and each channel's rounding down.
        assert sum(buf) >= umax - n * sum(color) / 255 - 3 * n


# -- wiring ----------------------------------------------------------------------------------------------------


@example(Layout(4, 3, True, 90))
@example(Layout(16, 16, False, 270))
@given(layouts)
@settings(max_examples=200, deadline=None)
def test_mapping_is_a_bijection(lay):
    assert sorted(lay.leds) == list(range(lay.n))
    for i, led in enumerate(lay.leds):
        assert lay.index(i % lay.cols, i // lay.cols) == led


def _turn90(c, r, w, h):
    # Where panel point (c, r) of a w x h panel lands for the viewer after a quarter turn clockwise.
    return h - 1 - r, c


@given(st.integers(1, 20), st.integers(1, 20), st.booleans())
@settings(max_examples=100, deadline=None)
def test_rotation_is_the_panel_turned_clockwise(w, h, serp):
    l0 = Layout(w, h, serp, 0)
    l90 = Layout(w, h, serp, 90)
    l180 = Layout(w, h, serp, 180)
    l270 = Layout(w, h, serp, 270)
    for r in range(h):
        for c in range(w):
            led = l0.index(c, r)
            x, y = _turn90(c, r, w, h)
            assert l90.index(x, y) == led
            x, y = _turn90(x, y, h, w)
            assert l180.index(x, y) == led
            x, y = _turn90(x, y, w, h)
            assert l270.index(x, y) == led
            assert _turn90(x, y, h, w) == (c, r)


@given(layouts, colors)
@settings(max_examples=100, deadline=None)
def test_pixel_reads_what_solid_wrote(lay, color):
    r = Renderer(lay, brightness=255, budget_ma=100000)
    buf = r.render(D("solid", color), 0)
    for y in range(lay.rows):
        for x in range(lay.cols):
            assert r.pixel(buf, x, y) == color


# -- frames are functions of (display, time) -------------------------------------------------------------------


@given(st.sampled_from([(8, 8), (16, 16), (32, 8), (12, 8), (10, 1)]), displays, st.integers(0, 10**6))
@settings(max_examples=200, deadline=None)
def test_a_frame_depends_only_on_display_and_time(wh, disp, t):
    # Renderers that saw different histories agree once the label has been on display for the same time.
    a = Renderer(Layout(*wh))
    b = Renderer(Layout(*wh))
    a.render(D("flash", (1, 2, 3), 2, "\x01other"), 0)
    b.render(D("idle", (0, 40, 0)), 99)
    a.render(disp, t)
    b.render(disp, t)
    assert bytes(a.render(disp, t + 1234)) == bytes(b.render(disp, t + 1234))


@given(displays, st.integers(0, 10**6))
@settings(max_examples=100, deadline=None)
def test_bad_colour_leaves_state_intact(disp, t):
    r = Renderer(Layout(8, 8))
    before = bytes(r.render(disp, t))
    for bad in ((256, 0, 0), (-1, 0, 0), (1.5, 0, 0), ("1", 0, 0)):
        if disp.pattern == "off":
            continue
        try:
            r.render(D(disp.pattern, bad, disp.level, disp.text, disp.night), t)
        except ValueError as e:
            assert "color" in str(e)
        else:
            raise AssertionError("accepted %r" % (bad,))
        assert bytes(r.buf) == before


# -- the baked tables match their sources -----------------------------------------------------------------------


def _art_columns(rows, width):
    out = []
    for c in range(width):
        b = 0
        for r, row in enumerate(rows):
            if row[c] == "#":
                b |= 1 << r
        out.append(b)
    return bytes(out)


def test_font_bytes_match_the_art():
    with open(os.path.join(CORE, "font.py")) as f:
        arts = re.findall(r"^# 0x([0-9A-F]{2}) ((?:[.#]{5} ?){8})$", f.read(), re.M)
    assert len(arts) == font.LAST - font.FIRST + 1
    for code, rows in arts:
        o = (int(code, 16) - font.FIRST) * font.WIDTH
        assert font.FONT[o : o + font.WIDTH] == _art_columns(rows.split(), 5), "character 0x%s" % code


def test_glyph_bytes_match_the_art():
    with open(os.path.join(CORE, "glyphs.py")) as f:
        arts = re.findall(r"^# (\w+) ((?:[.#]{8} ?){8})$", f.read(), re.M)
    assert len(arts) == 9
    for name, rows in arts:
        assert getattr(glyphs, name.upper()) == _art_columns(rows.split(), 8), name


def test_breath_table_matches_its_formula():
    for i in range(256):
        p = curves.BREATH_FLOOR + (1 - curves.BREATH_FLOOR) * (1 - math.cos(2 * math.pi * i / 256)) / 2
        assert curves.BREATH[i] == int(255 * p**curves.BREATH_GAMMA + 0.5), i


def test_power_estimate_is_wleds():
    # 256 LEDs at full white: 55 mA each.
    assert power.estimate_ma(bytes([255]) * 768) == 256 * 55
    assert power.units_max(730, 55) == 10153
    assert power.within(bytes([255]) * 3, 55) and not power.within(bytes([255]) * 3, 54)
