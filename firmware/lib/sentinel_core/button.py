# The ACK button: raw levels, sampled by the shell with a millisecond tick, become "short" and "long" events.
# A level only counts once it has been stable for debounce_ms, so contact bounce and noise shorter than that never
# produce an event. "long" fires while the button is still held (the operator gets the effect at 3 s, without
# having to guess when to let go); the release that follows it produces nothing.

from sentinel_core.compat import const

# MicroPython's ticks_ms() wraps at 2**30; differences taken modulo that period stay right across the wrap as long
# as the intervals measured are shorter than half of it (about 6 days). CPython's monotonic ms work the same way.
TICKS_PERIOD = const(1 << 30)
_HALF = const(TICKS_PERIOD >> 1)
_MASK = const(TICKS_PERIOD - 1)


def ticks_diff(a, b):
    """a - b for ms ticks that wrap at TICKS_PERIOD."""
    return ((a - b + _HALF) & _MASK) - _HALF


class Button:
    def __init__(self, debounce_ms=30, long_ms=3000):
        if not isinstance(debounce_ms, int) or isinstance(debounce_ms, bool) or debounce_ms < 0:
            raise ValueError("debounce_ms must be an int >= 0")
        if not isinstance(long_ms, int) or isinstance(long_ms, bool) or long_ms <= debounce_ms:
            raise ValueError("long_ms must be an int > debounce_ms")
        self.debounce_ms = debounce_ms
        self.long_ms = long_ms
        self.reset()

    def reset(self):
        self.pressed = False  # the debounced level
        self._raw = False
        self._raw_since = None  # tick of the last raw edge
        self._down_at = None  # tick the debounced press began (its first raw edge)
        self._long_fired = False

    def sample(self, pressed, t_ms):
        """Feed one raw sample; returns None, "short" or "long"."""
        pressed = bool(pressed)
        if self._raw_since is None:
            # The first sample only sets the reference: a button held at boot is not a press.
            self._raw = pressed
            self._raw_since = t_ms
            self.pressed = pressed
            self._long_fired = pressed
            return None
        if pressed != self._raw:
            self._raw = pressed
            self._raw_since = t_ms
        stable = ticks_diff(t_ms, self._raw_since) >= self.debounce_ms
        if stable and pressed != self.pressed:
            self.pressed = pressed
            if pressed:
                self._down_at = self._raw_since
                self._long_fired = False
            else:
                fired = self._long_fired
                self._long_fired = False
                if not fired:
                    return "short"
                return None
        if self.pressed and not self._long_fired and ticks_diff(t_ms, self._down_at) >= self.long_ms:
            self._long_fired = True
            return "long"
        return None
