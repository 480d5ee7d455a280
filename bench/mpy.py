"""Run Python code under the real MicroPython (WebAssembly build on Node.js) with firmware/lib on /lib.

    from mpy import run_micropython
    print(run_micropython("import gc; gc.collect(); print(gc.mem_alloc())"))

Top-level `await` works (the code runs with runPythonAsync). firmware=True also puts the firmware fakes and
microdot on /lib, and the board's boot.py/main.py in /board.
"""

import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def node_binary():
    venv_node = os.path.join(ROOT, ".venv", "bin", "node")
    return venv_node if os.path.exists(venv_node) else (shutil.which("node") or "node")


def run_micropython(code, firmware=False, timeout=300):
    # --expose-gc: the firmware bench runs JavaScript's collector so the port's proxies don't count as Python heap.
    # --single-threaded: no V8 background jobs, whose deadlock with process.exit has hung node at exit (run-tests.sh).
    cmd = [node_binary(), "--expose-gc", "--single-threaded", os.path.join(ROOT, "tests", "mpy", "exec.mjs")]
    if firmware:
        cmd.append("--firmware")
    r = subprocess.run(cmd, input=code, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError("MicroPython failed:\n" + r.stdout[-2000:] + r.stderr[-4000:])
    return r.stdout
