"""Cost of building TTS frames: time per alarm text and heap allocated, on CPython and under MicroPython.

    .venv/bin/python bench/bench_tts.py

The WebAssembly MicroPython is not an ESP32: its times say how the cost scales, not what the board takes; the
bytes allocated per call carry over (same object model).
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "firmware", "lib"))
sys.path.insert(0, HERE)

TEXTS = (
    ("rfc-p0 (22 chars)", "A03机柜 gpu-worker-08 NCCL 超时"),
    ("recovered (9 chars)", "训练集群已恢复正常"),
    ("long (680 chars)", "节点 gpu-worker-08 的 NVLink 降速，请检查光模块。" * 20),
)

CODE = """
import gc, time
from sentinel_core import tts_syn6288, tts_xfs5152, tts_reply
texts = %r
for mod in (tts_syn6288, tts_xfs5152):
    for label, text in texts:
        mod.synthesize(text, volume=5)
        n = %d
        gc.collect()
        a0 = gc.mem_alloc()
        frames = mod.synthesize(text, volume=5)
        a1 = gc.mem_alloc()
        t0 = time.ticks_us()
        for _ in range(n):
            mod.synthesize(text, volume=5)
        dt = time.ticks_diff(time.ticks_us(), t0)
        print("%%-8s %%-30s frames=%%d  %%8.1f us/call  %%6d bytes allocated/call" %% (
            mod.NAME, label, len(frames), dt / n, a1 - a0))
gc.collect()
a0 = gc.mem_alloc()
r = tts_reply.parse_reply(b"\\x41\\x4f")
print("reply    parse 2 bytes: %%d bytes allocated" %% (gc.mem_alloc() - a0))
"""


def cpython():
    from sentinel_core import tts_syn6288, tts_xfs5152

    for mod in (tts_syn6288, tts_xfs5152):
        for label, text in TEXTS:
            n = 2000
            frames = mod.synthesize(text, volume=5)
            t0 = time.perf_counter()
            for _ in range(n):
                mod.synthesize(text, volume=5)
            dt = (time.perf_counter() - t0) / n * 1e6
            print("%-8s %-30s frames=%d  %8.1f us/call" % (mod.NAME, label, len(frames), dt))


def main():
    print("CPython %s" % sys.version.split()[0])
    cpython()
    try:
        from mpy import run_micropython
    except ImportError:
        print("MicroPython: bench/mpy.py not available")
        return
    print("MicroPython (WebAssembly on Node.js)")
    print(run_micropython(CODE % (TEXTS, 200)).rstrip())


if __name__ == "__main__":
    main()
