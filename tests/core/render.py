# LED rendering on both interpreters: the vectors in tests/vectors/render.json (exact frame bytes, hand-derived
# wiring, pictures of icons and labels), plus checks of the renderer's promises that hold for any frame.
from sentinel_core import power
from sentinel_core.alarm import LIGHT_MODES
from sentinel_core.display import HEALTH_PATTERNS
from sentinel_core.layout import Layout
from sentinel_core.render import Renderer

VECTORS = "render.json"
# Every Display.pattern: off, the alarms' light modes, idle and the health patterns.
PATTERNS = ("off",) + LIGHT_MODES + ("idle",) + tuple([row[1] for row in HEALTH_PATTERNS])


class _D:
    def __init__(self, pattern, color=(0, 0, 0), level=None, text=None, night=False):
        self.pattern = pattern
        self.color = color
        self.level = level
        self.text = text
        self.night = night


def _display(d):
    return _D(d["pattern"], tuple(d.get("color", (0, 0, 0))), d.get("level"), d.get("text"), d.get("night", False))


def _layout(d):
    return Layout(d["width"], d["height"], d.get("serpentine", True), d.get("rotation", 0), d.get("order", "GRB"))


def _renderer(lay, d):
    return Renderer(lay, **d)


def _hex(b):
    return "".join("%02x" % v for v in b)


def _check_picture(r, buf, pic, name):
    lay = r.layout
    assert len(pic) == lay.rows, name
    top = 0
    for y in range(lay.rows):
        for x in range(lay.cols):
            s = sum(r.pixel(buf, x, y))
            if s > top:
                top = s
    for y in range(lay.rows):
        assert len(pic[y]) == lay.cols, name
        for x in range(lay.cols):
            s = sum(r.pixel(buf, x, y))
            want = pic[y][x]
            got = "." if s == 0 else ("#" if s == top else "+")
            assert got == want, "%s: pixel (%d, %d) is %r, picture says %r" % (name, x, y, got, want)


def _expect_error(fn, words):
    try:
        fn()
    except ValueError as e:
        assert words in str(e), "error %r does not mention %r" % (str(e), words)
        return
    raise AssertionError("no ValueError (expected one about %r)" % words)


def run_case(case):
    kind = case["kind"]
    name = case["name"]
    if kind == "index":
        lay = _layout(case["layout"])
        for x, y, led in case["points"]:
            got = lay.index(x, y)
            assert got == led, "%s: (%d, %d) -> LED %d, want %d" % (name, x, y, got, led)
            assert lay.leds[y * lay.cols + x] == led, name
    elif kind == "frame":
        lay = _layout(case["layout"])
        r = _renderer(lay, case["renderer"])
        buf = None
        for s in case["steps"]:
            buf = r.render(_display(s["display"]), s["t_ms"])
        got = _hex(buf)
        assert got == case["hex"], "%s: frame\n%s\nwant\n%s" % (name, got, case["hex"])
        assert r.estimate_ma() == case["estimate_ma"], name
        assert r.scale == case["scale"], name
        assert power.within(buf, r.budget_ma, r.ma_per_led), name
        if "picture" in case:
            _check_picture(r, buf, case["picture"], name)
    elif kind == "error":
        lay_d = case.get("layout", {"width": 8, "height": 8})
        ren_d = case.get("renderer", {})
        words = case["message"]
        if "layout" in case:
            _expect_error(lambda: _layout(lay_d), words)
        elif "renderer" in case:
            _expect_error(lambda: _renderer(_layout(lay_d), ren_d), words)
        else:
            r = _renderer(_layout(lay_d), ren_d)
            good = _D("solid", (0, 0, 255), 2, "ok")
            before = bytes(r.render(good, 0))
            _expect_error(lambda: r.render(_display(case["display"]), 10), words)
            # The bad display left the frame and the renderer as they were.
            assert bytes(r.buf) == before, name
            assert bytes(r.render(good, 0)) == before, name
    else:
        raise AssertionError("unknown case kind %r" % kind)


def test_same_buffer_every_frame():
    r = Renderer(Layout(8, 8))
    a = r.render(_D("flash", (255, 0, 0), 2, "x"), 0)
    b = r.render(_D("breath", (255, 165, 0), 1, None), 17)
    c = r.render(_D("idle", (0, 40, 0)), 1234567)
    assert a is b and b is c and len(a) == 192


def test_every_pattern_renders_on_every_shape():
    shapes = ((1, 1), (10, 1), (4, 4), (8, 8), (12, 8), (32, 8), (16, 16), (8, 32))
    for w, h in shapes:
        r = Renderer(Layout(w, h), budget_ma=200)
        for p in PATTERNS:
            for t in (0, 199, 200, 777, 1500, 4321, 100000):
                buf = r.render(_D(p, (255, 255, 255), 2, "GPU-07 xid 79"), t)
                assert power.within(buf, 200), "%dx%d %s at %d over budget" % (w, h, p, t)


def test_health_patterns_are_distinct():
    # Same colour, same moment: each health pattern still looks different (its icon on a matrix).
    r = Renderer(Layout(8, 8))
    seen = []
    for p in ("idle", "health_clock", "health_network", "health_speech", "health_heartbeat", "config_error"):
        f = bytes(r.render(_D(p, (0, 0, 255)), 0))
        assert f not in seen, p
        assert sum(f) > 0, "%s is dark" % p
        seen.append(f)


def test_idle_is_alive():
    # A quiet box changes over time; a frozen or dead one does not.
    r = Renderer(Layout(16, 16))
    a = bytes(r.render(_D("idle", (0, 40, 0)), 0))
    b = bytes(r.render(_D("idle", (0, 40, 0)), 150))
    assert a != b and sum(a) > 0 and sum(b) > 0
    s = Renderer(Layout(30, 1))
    assert bytes(s.render(_D("idle", (0, 40, 0)), 0)) != bytes(s.render(_D("idle", (0, 40, 0)), 150))


def test_flash_rate_and_duty():
    r = Renderer(Layout(3, 1))
    on = 0
    changes = 0
    last = None
    for t in range(0, 2000, 10):
        lit = sum(r.render(_D("flash", (255, 0, 0), 2), t)) > 0
        on += lit
        if last is not None and lit != last:
            changes += 1
        last = lit
    assert on == 100  # 50 % duty
    assert changes == 9  # 2.5 Hz: 5 periods in 2 s, two edges each, less the first


def test_breath_is_smooth_and_gamma_shaped():
    r = Renderer(Layout(1, 1), brightness=255, budget_ma=100000)
    prev = None
    vals = []
    for t in range(0, 3000, 12):
        v = r.render(_D("breath", (255, 0, 0), 1), t)[1]
        vals.append(v)
        if prev is not None:
            assert -12 <= v - prev <= 12, "step %d -> %d at %d ms" % (prev, v, t)
        prev = v
    assert min(vals) >= 3 and max(vals) == 255
    # Gamma: the light spends longer low than high (a linear ramp would be half and half).
    assert sum(1 for v in vals if v < 128) > sum(1 for v in vals if v >= 128)


def test_night_is_dimmer():
    r = Renderer(Layout(8, 8))
    day = sum(r.render(_D("solid", (0, 255, 0), 0, "OK"), 0))
    night = sum(r.render(_D("solid", (0, 255, 0), 0, "OK", True), 0))
    assert 0 < night < day


def test_mapping_is_a_bijection():
    for w, h in ((1, 1), (5, 1), (4, 3), (3, 4), (8, 8), (7, 5)):
        for serp in (True, False):
            for rot in (0, 90, 180, 270):
                lay = Layout(w, h, serp, rot)
                seen = bytearray(lay.n)
                for i in range(lay.n):
                    seen[lay.leds[i]] += 1
                for i in range(lay.n):
                    assert seen[i] == 1, "%r: LED %d hit %d times" % (lay, i, seen[i])


def test_pixel_reads_back_in_any_order():
    for order in ("RGB", "RBG", "GRB", "GBR", "BRG", "BGR"):
        r = Renderer(Layout(2, 2, order=order), brightness=255, budget_ma=100000)
        buf = r.render(_D("solid", (10, 20, 30)), 0)
        assert r.pixel(buf, 1, 1) == (10, 20, 30), order


def test_unknown_text_characters_draw_a_box():
    r = Renderer(Layout(16, 8), brightness=255, budget_ma=100000)
    buf = r.render(_D("solid", (255, 255, 255), None, "\u4e2d"), 0)
    # The box is 5 columns of rows 0-6, centred in the 16 columns: x = 5..9.
    assert r.pixel(buf, 5, 0) == (255, 255, 255) and r.pixel(buf, 9, 6) == (255, 255, 255)
    assert r.pixel(buf, 7, 3) != (255, 255, 255)


def test_long_label_is_cut_not_overflowed():
    # 500 letters in no repeating order (~3000 columns): the renderer keeps 400 columns (about 64 characters) and
    # scrolls those, so a frame comes back after 400 columns plus the gap; the frame buffer never grows.
    lay = Layout(16, 16)
    r = Renderer(lay, scroll_ms=80)
    text = "".join(chr(65 + (i * 7 + i * i) % 26) for i in range(500))
    d = _D("solid", (0, 255, 0), 0, text)
    r.render(d, 0)
    t1 = 1000 + 5 * 80  # scrolling (after the 1 s hold), 5 columns in
    first = bytes(r.render(d, t1))
    assert len(first) == lay.nbytes and max(first) > 0
    back = None
    for k in range(380, 440):  # the kept columns plus a gap of at most 40
        buf = r.render(d, t1 + k * 80)
        assert len(buf) == lay.nbytes
        if bytes(buf) == first:
            back = k
            break
    assert back is not None and back >= 400, back  # cut at 400 columns: neither longer, nor shorter


def test_label_keeps_scrolling_across_the_tick_wrap():
    # MicroPython's ticks_ms() wraps at 2**30: a label set just before must scroll on after it.
    a = Renderer(Layout(16, 16))
    b = Renderer(Layout(16, 16))
    d = _D("solid", (0, 255, 0), 0, "gpu-worker-08 XID 79")
    a.render(d, (1 << 30) - 500)
    b.render(d, 0)
    fa = bytes(a.render(d, 740))
    fb = bytes(b.render(d, 1240))
    assert fa == fb
    assert fb != bytes(b.render(d, 0))


def test_tables_keyed_by_the_display_patterns_cover_them_exactly():
    # render and glyphs key their tables by name, the health patterns through the check each HEALTH_PATTERNS row
    # names: every pattern display.PATTERNS lists has its code, and every health pattern its blinks and icon.
    from sentinel_core import glyphs, render

    health = ("health_clock", "health_network", "health_speech", "health_heartbeat", "config_error")
    assert sorted(render._CODE) == sorted(PATTERNS)
    assert [render._CODE[p] for p in PATTERNS] == [0, 1, 2, 3, 4, 5, 5, 5, 5, 5]
    assert sorted(PATTERNS[5:]) == sorted(health)
    assert render.BLINKS == {
        "health_clock": 1,
        "health_network": 2,
        "health_speech": 3,
        "health_heartbeat": 4,
        "config_error": 0,
    }
    assert sorted(glyphs.PATTERN) == sorted(("idle",) + health)
    assert glyphs.PATTERN["idle"] is glyphs.IDLE and glyphs.PATTERN["config_error"] is glyphs.CONFIG
    assert glyphs.PATTERN["health_heartbeat"] is glyphs.HEARTBEAT
