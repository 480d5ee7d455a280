"""The firmware's own tests (tests/firmware/*.py) under real MicroPython (the WebAssembly runner with fakes of
machine, neopixel, network and ntptime) and on CPython (same modules, same fakes, in a subprocess so the fake
modules never shadow anything in this process)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _node():
    node = os.path.join(ROOT, ".venv", "bin", "node")
    return node if os.path.exists(node) else "node"


def test_firmware_suite_under_micropython():
    r = subprocess.run([_node(), os.path.join(ROOT, "tests", "mpy", "run.mjs"), "--suite", "firmware"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed, 0 failed" in r.stdout


def test_firmware_suite_on_cpython():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "firmware", "_cpython_driver.py")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed, 0 failed" in r.stdout
