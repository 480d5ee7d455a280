"""Cost of one LED frame on a 16x16 matrix (and a 60-LED strip): time per frame on CPython and under MicroPython,
and heap allocated per frame in steady state under MicroPython (gc.mem_alloc delta over 100 frames).

    .venv/bin/python bench/bench_render.py

The WebAssembly MicroPython is not an ESP32: its times say how the cost scales, not what the board takes; the
bytes allocated per frame carry over (same object model). For scale: NeoPixel.write() of 256 LEDs takes 7.7 ms.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "firmware", "lib"))
sys.path.insert(0, HERE)

# (label, width, height, pattern, color, level, text)
SCENES = (
    ("16x16 P0 flash + label", 16, 16, "flash", (255, 0, 0), 2, "A03 gpu-worker-08 NCCL"),
    ("16x16 P1 breath + label", 16, 16, "breath", (255, 165, 0), 1, "A03 gpu-worker-08 NVLINK"),
    ("16x16 NORMAL solid, icon", 16, 16, "solid", (0, 255, 0), 0, None),
    ("16x16 idle trace", 16, 16, "idle", (0, 40, 0), None, None),
    ("16x16 health_network + label", 16, 16, "health_network", (0, 0, 255), None, "NO NET"),
    ("16x16 off", 16, 16, "off", (0, 0, 0), None, None),
    ("60x1 strip P0 flash", 60, 1, "flash", (255, 0, 0), 2, None),
)
FRAMES = 100
TIMED = 1000
STEP_MS = 33

SETUP = """
from sentinel_core.layout import Layout
from sentinel_core.render import Renderer
class D:
    def __init__(self, pattern, color, level, text):
        self.pattern = pattern
        self.color = color
        self.level = level
        self.text = text
        self.night = False
"""

MPY_CODE = (
    SETUP
    + """
import gc, time
# Module globals exist before the first measurement: their first assignment would grow the globals dict.
a0 = a1 = t = t0 = dt = 0
for label, w, h, pattern, color, level, text in %r:
    r = Renderer(Layout(w, h))
    d = D(pattern, color, level, text)
    # Warm up: the label's columns are built once per new label, not per frame.
    for t in range(0, 40 * %d, %d):
        r.render(d, t)
    gc.collect()
    a0 = gc.mem_alloc()
    t = 0
    for _ in range(%d):
        r.render(d, t)
        t += %d
    a1 = gc.mem_alloc()
    t0 = time.ticks_us()
    t = 0
    for _ in range(%d):
        r.render(d, t)
        t += %d
    dt = time.ticks_diff(time.ticks_us(), t0)
    print("%%-32s %%8.1f us/frame  %%5d bytes allocated over %d frames" %% (label, dt / %d, a1 - a0))
"""
    % (SCENES, STEP_MS, STEP_MS, FRAMES, STEP_MS, TIMED, STEP_MS, FRAMES, TIMED)
)


def cpython():
    ns = {}
    exec(SETUP, ns)
    for label, w, h, pattern, color, level, text in SCENES:
        r = ns["Renderer"](ns["Layout"](w, h))
        d = ns["D"](pattern, color, level, text)
        for t in range(0, 40 * STEP_MS, STEP_MS):
            r.render(d, t)
        n = 2000
        t0 = time.perf_counter()
        t = 0
        for _ in range(n):
            r.render(d, t)
            t += STEP_MS
        dt = (time.perf_counter() - t0) / n * 1e6
        print("%-32s %8.1f us/frame" % (label, dt))


def main():
    print("CPython %s" % sys.version.split()[0])
    cpython()
    print()
    try:
        from mpy import run_micropython
    except ImportError:
        print("MicroPython: bench/mpy.py not available")
        return
    print("MicroPython (WebAssembly build on Node.js)")
    sys.stdout.write(run_micropython(MPY_CODE))


if __name__ == "__main__":
    main()
