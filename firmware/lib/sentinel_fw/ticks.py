# Millisecond ticks that wrap on the board (time.ticks_ms) and plain monotonic ms on CPython, so the shells run
# unchanged under CPython for the microdot TestClient tests.
import time

_BOARD = hasattr(time, "ticks_ms")


def ms():
    if _BOARD:
        return time.ticks_ms()
    # getattr: the ESP32 stubs have no time.monotonic, and the type check is about the board.
    return int(getattr(time, "monotonic")() * 1000)  # noqa: B009


def diff(a, b):
    """a - b, right across the board's tick wrap."""
    if _BOARD:
        return time.ticks_diff(a, b)
    return a - b


def add(a, b):
    if _BOARD:
        return time.ticks_add(a, b)
    return a + b
