"""pyright over the board's files against the ESP32's own stubs (micropython-esp32-stubs for machine, neopixel,
network...; micropython-stdlib-stubs as the typeshed, so `time.ticks_ms` exists and CPython-only names do not).
The settings are firmware/pyrightconfig.json; the typeshed path is the venv's site-packages, given on the command
line because its location depends on the Python version."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHELLS = ("firmware/boot.py", "firmware/main.py", "firmware/lib/sentinel_fw/")


def _pyright():
    exe = os.path.join(os.path.dirname(sys.executable), "pyright")
    if not os.path.exists(exe):
        exe = shutil.which("pyright")
    if not exe:
        pytest.skip("pyright is not installed (pip install pyright)")
    site = sysconfig.get_paths()["purelib"]
    if not os.path.exists(os.path.join(site, "machine.pyi")):
        pytest.skip("micropython-esp32-stubs is not installed")
    return [exe, "-p", os.path.join(ROOT, "firmware", "pyrightconfig.json"), "--typeshedpath", site, "--outputjson"]


@pytest.fixture(scope="module")
def diagnostics():
    r = subprocess.run(_pyright(), capture_output=True, text=True, timeout=600, cwd=ROOT)
    try:
        out = json.loads(r.stdout)
    except ValueError:
        raise AssertionError("pyright did not answer JSON: %s %s" % (r.stdout[-2000:], r.stderr[-2000:])) from None
    assert out["summary"]["filesAnalyzed"] >= 10, out["summary"]
    return [d for d in out["generalDiagnostics"] if d["severity"] == "error"]


def _show(ds):
    return "\n".join(
        "%s:%d: %s" % (os.path.relpath(d["file"], ROOT), d["range"]["start"]["line"] + 1, d["message"].split("\n")[0])
        for d in ds
    )


def _rel(d):
    return os.path.relpath(d["file"], ROOT).replace(os.sep, "/")


def test_device_shells_type_check_against_esp32_stubs(diagnostics):
    mine = [d for d in diagnostics if _rel(d).startswith(SHELLS)]
    assert not mine, _show(mine)


def test_shared_core_type_checks_against_esp32_stubs(diagnostics):
    core = [d for d in diagnostics if _rel(d).startswith("firmware/lib/sentinel_core/")]
    assert not core, _show(core)


def test_stubs_are_really_in_use(tmp_path):
    """A name that exists on CPython but not on the board must fail: proves the ESP32 typeshed is the one used."""
    probe = tmp_path / "probe.py"
    probe.write_text("import time\nimport machine\n\ntime.perf_counter()\nmachine.Pin(2, machine.Pin.OUT).on()\n")
    r = subprocess.run(_pyright() + [str(probe)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    out = json.loads(r.stdout)
    msgs = [d["message"] for d in out["generalDiagnostics"] if d["severity"] == "error"]
    assert len(msgs) == 1 and "perf_counter" in msgs[0], msgs
