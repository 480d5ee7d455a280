# Millisecond ticks that wrap on the board (time.ticks_ms) and plain monotonic ms on CPython, so the shells run
# unchanged under CPython for the microdot TestClient tests.
import time

try:
    ms = time.ticks_ms
    diff = time.ticks_diff
    add = time.ticks_add
except AttributeError:
    def ms():
        return int(time.monotonic() * 1000)

    def diff(a, b):
        return a - b

    def add(a, b):
        return a + b
