"""What the terminal state machine costs per call, under CPython and the real MicroPython (WebAssembly):
heap taken by importing it, and time and heap allocated per display(), tick(), snapshot(), on_alarm() and a
speech turn with 8 incidents active. The shells call display() every frame, so that is the figure that matters.

    .venv/bin/python bench/bench_terminal.py
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "firmware", "lib"))

# Common subset: the same text runs on both interpreters.
WORKLOAD = r'''
import gc, json, time
try:
    ticks_us = time.ticks_us
    def elapsed(a, b):
        return time.ticks_diff(b, a)
except AttributeError:
    def ticks_us():
        return int(time.perf_counter() * 1000000)
    def elapsed(a, b):
        return b - a
try:
    mem_alloc = gc.mem_alloc
except AttributeError:
    mem_alloc = None

gc.collect()
m0 = mem_alloc() if mem_alloc else 0
from sentinel_core.terminal import Terminal
from sentinel_core.alarm import preset
gc.collect()
m1 = mem_alloc() if mem_alloc else 0
print("import_bytes", m1 - m0)

NOW = 1764504000
t = Terminal()
t.set_health("clock", True, NOW)
for i in range(8):
    a = preset("p1" if i % 2 else "p0", "rack A%02d gpu-worker-%02d XID 79" % (i, i), key="A%02d:n%d:XID" % (i, i))
    t.on_alarm(a, NOW)
gc.collect()
m2 = mem_alloc() if mem_alloc else 0
print("terminal_with_8_alarms_bytes", m2 - m1)

def measure(name, fn, n):
    gc.collect()
    a0 = mem_alloc() if mem_alloc else 0
    t0 = ticks_us()
    for i in range(n):
        fn(i)
    t1 = ticks_us()
    a1 = mem_alloc() if mem_alloc else 0
    print("%s_us %d" % (name, elapsed(t0, t1) // n))
    print("%s_alloc_bytes %d" % (name, (a1 - a0) // n))

measure("display", lambda i: t.display(NOW + 1), 500)
measure("tick", lambda i: t.tick(NOW + 1), 500)
measure("snapshot", lambda i: t.snapshot(NOW + 1), 50)

def alarm(i):
    t.on_alarm(preset("p0", "rack B gpu-worker XID 79", key="B:n%d:XID" % (i % 4)), NOW + 2)
measure("on_alarm", alarm, 100)

def turn(i):
    u = t.next_utterance(NOW + 100 + i * 10)
    if u is not None:
        t.speech_finished(NOW + 101 + i * 10)
measure("speech_turn", turn, 50)
d = t.export_state()
print("export_json_bytes", len(json.dumps(d)))
'''


def run_cpython():
    import io
    from contextlib import redirect_stdout
    buf = io.StringIO()
    with redirect_stdout(buf):
        exec(compile(WORKLOAD, "workload", "exec"), {})
    return buf.getvalue()


def parse(text):
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[parts[0]] = parts[1]
    return out


def main():
    cp = parse(run_cpython())
    try:
        from mpy import run_micropython
        mp = parse(run_micropython(WORKLOAD))
    except Exception as e:  # noqa: BLE001 - the CPython figures are still worth printing
        print("MicroPython run failed: %s" % e)
        mp = {}
    print("%-34s %14s %14s" % ("figure", "CPython", "MicroPython"))
    for k in cp if cp else mp:
        print("%-34s %14s %14s" % (k, cp.get(k, "-"), mp.get(k, "-")))
    print("(CPython has no gc.mem_alloc: its byte figures read 0. MicroPython: the WebAssembly build on Node.js,"
          " importing .py sources; not measured on an ESP32.)")


if __name__ == "__main__":
    main()
