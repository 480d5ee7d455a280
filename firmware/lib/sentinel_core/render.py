# LED frames from the state machine's Display: the pattern, its rate, the level's icon and the scrolling label,
# scaled to the brightness cap and kept under the current budget. One frame buffer, in the driver's byte order,
# is filled again on every call; nothing is allocated per frame in steady state (tables are built once in the
# constructor, the label's columns once per new label). The buffers are made by the first frame, not by the
# constructor: on the board that runs after boot, so they never sit in the heap beside boot's own peak.
#
# A frame has two inks at most, both in the display's colour: "ink" (icon and label) and "field" (everything
# else). Each pattern sets the two intensities for the moment t_ms; the brightness cap and the limiter scale both;
# the frame is then one pass over the LEDs. docs/RENDERING.md has the patterns, their rates and the layouts.

from sentinel_core import curves, font, glyphs, power
from sentinel_core.compat import const
from sentinel_core.display import HEALTH_PATTERNS

# The tables below are keyed by pattern name. The health patterns' names (health_clock, ..., config_error) are
# longer than 10 characters, and such a name is a separate string object in every .mpy that spells it: they are
# spelled once, in display.HEALTH_PATTERNS, and reached here through the health check each row names.

_OFF = const(0)
_SOLID = const(1)
_FLASH = const(2)
_BREATH = const(3)
_IDLE = const(4)
_HEALTH = const(5)
_P0 = const(2)  # sentinel_core.alarm.P0 (a const here: the frame loop reads it)
_CODE = {"off": _OFF, "solid": _SOLID, "flash": _FLASH, "breath": _BREATH, "idle": _IDLE}
_CODE.update({pattern: _HEALTH for _check, pattern, _color, _text in HEALTH_PATTERNS})
# Health patterns blink a code, like a car's fault light: n blinks, then a pause, by the check that failed. 0: a
# steady 1 Hz blink. BLINKS is keyed by the pattern (health_clock 1, ..., config_error 0).
_BY_CHECK = {"clock": 1, "network": 2, "speech": 3, "heartbeat": 4, "config": 0}
BLINKS = {pattern: _BY_CHECK[check] for check, pattern, _color, _text in HEALTH_PATTERNS}
del _BY_CHECK
_BLINK_MS = const(250)
_BLINK_PAUSE_MS = const(1000)

# Intensities (0..255, before the brightness cap) of ink and field.
_SOLID_FIELD = const(40)  # a dim field behind the icon: the colour still reads from across the room
_BREATH_INK_FLOOR = const(96)  # the label stays readable at the bottom of a breath
_HEALTH_DIM = const(64)  # between blinks the health icon stays visible: never dark like a dead box
_IDLE_STEP_MS = const(150)  # the idle trace (or the strip's dot) moves one LED per step
_TEXT_HOLD_MS = const(1000)  # a new label stands still this long before it scrolls
_TEXT_GAP = const(8)  # blank columns between the end of a label and its next start
_MAX_TEXT_COLS = const(400)  # label columns kept (about 64 characters); the rest is cut
_STRIP_HEALTH_EVERY = const(4)  # no icon room: health lights every 4th LED, sparse is "the box", not "an alarm"

_TICKS_MASK = const(0x3FFFFFFF)  # time.ticks_ms() period on MicroPython ports: 2**30
_INK = const(3)  # mask values are byte offsets into the 2-entry palette: field 0, ink 3


def _level(name, v, lo, hi):
    if type(v) is not int or v < lo or v > hi:
        raise ValueError("%s must be an int %d..%d, not %r" % (name, lo, hi, v))
    return v


class Renderer:
    """Frames for one Layout. brightness / night_brightness: caps 0..255 (night when display.night; a P0 keeps
    brightness at night unless night_p0_full is False: the one alarm that must wake someone is not dimmed);
    budget_ma: WLED's estimate of every frame stays at or under it; flash_ms: P0 flash period (50 % on);
    breath_ms: P1 breath period; scroll_ms: time per column of scrolling text."""

    def __init__(
        self,
        layout,
        brightness=128,
        night_brightness=16,
        night_p0_full=True,
        budget_ma=power.BUDGET_MA,
        ma_per_led=power.MA_PER_LED,
        flash_ms=400,
        breath_ms=3000,
        scroll_ms=80,
    ):
        self.layout = layout
        self.brightness = _level("brightness", brightness, 0, 255)
        self.night_brightness = _level("night_brightness", night_brightness, 0, 255)
        if night_p0_full is not True and night_p0_full is not False:
            raise ValueError("night_p0_full must be True or False, not %r" % (night_p0_full,))
        self.night_p0_full = night_p0_full
        self.budget_ma = _level("budget_ma", budget_ma, 0, 100000)
        self.ma_per_led = _level("ma_per_led", ma_per_led, 1, 1000)
        self.flash_ms = _level("flash_ms", flash_ms, 2, 60000)
        self.breath_ms = _level("breath_ms", breath_ms, 256, 60000)
        self.scroll_ms = _level("scroll_ms", scroll_ms, 1, 10000)
        self._umax = power.units_max(budget_ma, ma_per_led)
        self.buf = None  # the frame, once the first one is rendered
        self._mask = None
        self._pal = bytearray(6)
        self._cols = None
        self._tlen = 0
        self._text = None
        self._sglyph = None
        self._t0 = 0
        # The last frame's limiter factor (256: not limited) and intensities, for status pages and tests.
        self.scale = 256
        cols = layout.cols
        rows = layout.rows
        # Labels need 8 rows and room for one character; icons need 8x8.
        self.labels = cols >= font.WIDTH and rows >= 8
        self.matrix = self.labels and cols >= 8
        # Where icon and label go (see docs/RENDERING.md): a tall matrix stacks them, a wide one puts them side by
        # side, an 8-row one scrolls the icon in front of the label.
        self._vy = (rows - 8) // 2
        self._cx = (cols - 8) // 2
        if rows >= 16:
            self._mode = 0
            self._gy = (rows - 16) // 2
            self._gx = self._cx
            self._tx = 0
            self._ty = self._gy + 8
            self._tw = cols
        elif cols >= 24:
            self._mode = 1
            self._gx = 0
            self._gy = self._vy
            self._tx = 9
            self._ty = self._vy
            self._tw = cols - 9
        else:
            self._mode = 2
            self._gx = self._cx
            self._gy = self._vy
            self._tx = 0
            self._ty = self._vy
            self._tw = cols

    # -- public ---------------------------------------------------------------------------------------------

    def render(self, display, t_ms):
        """Fill and return the frame buffer (the same bytearray every call) for display at t_ms."""
        if self.buf is None:
            self.buf = bytearray(self.layout.nbytes)
            self._mask = bytearray(self.layout.n)
            self._cols = bytearray(_MAX_TEXT_COLS)
        code = _CODE.get(display.pattern)
        if code is None:
            raise ValueError("unknown display pattern %r" % (display.pattern,))
        if code == _OFF:
            self._text = None
            self._fill(0, 0, 0)
            self.scale = 256
            return self.buf
        try:
            r, g, b = display.color
        except (TypeError, ValueError):
            raise ValueError("display color must be (r, g, b), not %r" % (display.color,))
        _level("display color channel", r, 0, 255)
        _level("display color channel", g, 0, 255)
        _level("display color channel", b, 0, 255)
        level = display.level
        if level is not None:
            _level("display level", level, 0, 2)
        text = display.text
        if text is not None and not isinstance(text, str):
            raise ValueError("display text must be a str or None, not %r" % (text,))
        if code == _IDLE or not self.labels:
            # No label on show: the next one scrolls from its start.
            self._text = None
        bri = self.brightness
        if display.night and not (level == _P0 and self.night_p0_full):
            bri = self.night_brightness
        lay = self.layout
        n = lay.n
        ink_n = 0
        ink_i = 0
        field_i = 0
        if code == _IDLE:
            ink_i = 255
            if self.labels:
                ink_n = self._trace(t_ms)
            else:
                ink_n = 1
                self._mask[lay.leds[(t_ms // _IDLE_STEP_MS) % n]] = _INK
        elif code == _HEALTH:
            ink_i = 255 if self._blink_on(BLINKS[display.pattern], t_ms) else _HEALTH_DIM
            if self.labels:
                ink_n = self._content(glyphs.PATTERN[display.pattern] if self.matrix else None, text, t_ms)
            if not ink_n:
                leds = lay.leds
                mask = self._mask
                for k in range(0, n, _STRIP_HEALTH_EVERY):
                    mask[leds[k]] = _INK
                    ink_n += 1
        else:
            if self.labels:
                ink_n = self._content(None if level is None or not self.matrix else glyphs.LEVEL[level], text, t_ms)
            if code == _SOLID:
                ink_i = 255
                field_i = _SOLID_FIELD if ink_n else 255
            elif code == _FLASH:
                on = (t_ms % self.flash_ms) < (self.flash_ms >> 1)
                # With an icon or label the flash alternates field and ink, so the words read in either phase.
                ink_i = 0 if on else 255
                field_i = 255 if on else 0
            else:
                e = curves.BREATH[((t_ms % self.breath_ms) << 8) // self.breath_ms]
                if ink_n:
                    ink_i = _BREATH_INK_FLOOR + e * (255 - _BREATH_INK_FLOOR) // 255
                    field_i = e * 3 // 8
                else:
                    field_i = e
        li = ink_i * bri // 255
        lf = field_i * bri // 255
        # WLED's estimate with the exact counts, before rounding down: sum(frame) <= this / 255.
        d = (ink_n * li + (n - ink_n) * lf) * (r + g + b)
        wc = (d + 254) // 255
        if wc > self._umax:
            # Scaling each level by umax / wc keeps the sum under umax: sum <= (umax / wc) * d / 255 <= umax.
            li = li * self._umax // wc
            lf = lf * self._umax // wc
            self.scale = (self._umax << 8) // wc
        else:
            self.scale = 256
        pal = self._pal
        pal[lay.r_off] = r * lf // 255
        pal[lay.g_off] = g * lf // 255
        pal[lay.b_off] = b * lf // 255
        pal[3 + lay.r_off] = r * li // 255
        pal[3 + lay.g_off] = g * li // 255
        pal[3 + lay.b_off] = b * li // 255
        if ink_n:
            self._paint()
        else:
            self._fill(pal[0], pal[1], pal[2])
        return self.buf

    def pixel(self, buf, x, y):
        """(r, g, b) of image pixel (x, y) in a frame from this renderer (for the emulator and tests)."""
        lay = self.layout
        i = 3 * lay.index(x, y)
        return (buf[i + lay.r_off], buf[i + lay.g_off], buf[i + lay.b_off])

    def estimate_ma(self, buf=None):
        """WLED's current estimate of a frame (default: the last one; 0 before the first), mA rounded up."""
        if buf is None:
            buf = self.buf or b""
        return power.estimate_ma(buf, self.ma_per_led)

    # -- one frame's parts ----------------------------------------------------------------------------------

    def _fill(self, c0, c1, c2):
        buf = self.buf
        for o in range(0, self.layout.nbytes, 3):
            buf[o] = c0
            buf[o + 1] = c1
            buf[o + 2] = c2

    def _paint(self):
        # Also clears the mask for the next frame: one pass instead of two.
        buf = self.buf
        mask = self._mask
        pal = self._pal
        o = 0
        for j in range(self.layout.n):
            p = mask[j]
            if p:
                mask[j] = 0
            buf[o] = pal[p]
            buf[o + 1] = pal[p + 1]
            buf[o + 2] = pal[p + 2]
            o += 3

    def _blink_on(self, blinks, t_ms):
        if blinks == 0:
            return (t_ms % (4 * _BLINK_MS)) < 2 * _BLINK_MS
        ph = t_ms % (blinks * 2 * _BLINK_MS + _BLINK_PAUSE_MS)
        return ph < blinks * 2 * _BLINK_MS and (ph % (2 * _BLINK_MS)) < _BLINK_MS

    def _column(self, bits, x, y):
        # One 8-row column of ink at image (x, y); returns how many LEDs it lit.
        leds = self.layout.leds
        mask = self._mask
        i = y * self.layout.cols + x
        step = self.layout.cols
        lit = 0
        while bits:
            if bits & 1:
                mask[leds[i]] = _INK
                lit += 1
            bits >>= 1
            i += step
        return lit

    def _trace(self, t_ms):
        shift = t_ms // _IDLE_STEP_MS
        trace = glyphs.IDLE
        lit = 0
        y = self._vy
        for x in range(self.layout.cols):
            lit += self._column(trace[(x + shift) & 7], x, y)
        return lit

    def _glyph(self, g, x0, y0):
        lit = 0
        for c in range(8):
            lit += self._column(g[c], x0 + c, y0)
        return lit

    def _content(self, glyph, text, t_ms):
        # Icon and label for a matrix; returns the number of ink LEDs.
        if not text:
            self._text = None
            if glyph is None:
                return 0
            return self._glyph(glyph, self._cx, self._vy)
        lit = 0
        sglyph = None
        if self._mode == 2:
            sglyph = glyph
        elif glyph is not None:
            lit = self._glyph(glyph, self._gx, self._gy)
        if text is not self._text or sglyph is not self._sglyph:
            if text != self._text or sglyph != self._sglyph:
                self._set_text(text, sglyph)
                self._t0 = t_ms
            self._text = text
            self._sglyph = sglyph
        tw = self._tw
        tlen = self._tlen
        cols = self._cols
        x = self._tx
        y = self._ty
        if tlen <= tw:
            # Fits: centred, still.
            x += (tw - tlen) >> 1
            for c in range(tlen):
                lit += self._column(cols[c], x + c, y)
            return lit
        period = tlen + _TEXT_GAP
        # Modular difference: MicroPython's ticks_ms() wraps at 2**30 and a label must not freeze when it does.
        dt = ((t_ms - self._t0) & _TICKS_MASK) - _TEXT_HOLD_MS
        c = 0 if dt < 0 else (dt // self.scroll_ms) % period
        for k in range(tw):
            if c < tlen:
                lit += self._column(cols[c], x + k, y)
            c += 1
            if c == period:
                c = 0
        return lit

    def _set_text(self, text, glyph):
        # Label columns, proportionally spaced: each character's blank side columns are dropped, one blank
        # column separates characters, a space is 3 columns wide.
        cols = self._cols
        cap = _MAX_TEXT_COLS
        f = font.FONT
        n = 0
        if glyph is not None:
            for c in range(8):
                cols[c] = glyph[c]
            cols[8] = 0
            cols[9] = 0
            n = 10
        for ch in text:
            if n + font.WIDTH + 1 > cap:
                break
            if ch == " ":
                for _ in range(3):
                    cols[n] = 0
                    n += 1
                continue
            o = font.columns_of(ch)
            a = o
            z = o + font.WIDTH - 1
            while a < z and not f[a]:
                a += 1
            while z > a and not f[z]:
                z -= 1
            while a <= z:
                cols[n] = f[a]
                n += 1
                a += 1
            cols[n] = 0
            n += 1
        while n > 0 and not cols[n - 1]:
            n -= 1
        self._tlen = n
