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
    runner = os.path.join(ROOT, "tests", "mpy", "run.mjs")
    r = subprocess.run(
        [_node(), "--single-threaded", runner, "--suite", "firmware"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed, 0 failed" in r.stdout


def test_firmware_suite_on_cpython(tmp_path):
    # Its scratch files (tests/firmware/_fw.py scratch()) go under the temp dir: this test's own, so parallel
    # workers and other checkouts on the same machine never share /tmp/sentinel_fw_test_*.
    env = dict(os.environ, TMPDIR=str(tmp_path))
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tests", "firmware", "_cpython_driver.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed, 0 failed" in r.stdout


def test_memory_figures_stay_in_bounds():
    """bench/bench_firmware.py's measurement as a regression guard: the loops that run all day must not make
    garbage they did not make before, and the running heap must not creep (limits are generous on purpose)."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import bench_firmware
    finally:
        sys.path.pop(0)
    m = bench_firmware.measure()
    assert m["per_button"] == 0, m  # 100 Hz all day: allocation-free
    assert m["per_frame"] <= 512, m  # 25 fps all day
    assert m["per_speech"] <= 1024 and m["per_net"] <= 1024, m
    assert m["per_req"] <= 16 * 1024, m
    # The .mpy install is for a board with PSRAM (docs/FIRMWARE.md "Memory"): on a real heap a plain WROOM's ~110 KB
    # is not enough for it once fragmentation and contiguous blocks count (bench/bench_firmware.py bisects the
    # smallest heap on the Unix port); the plain WROOM runs the frozen image. What this guards is creep: what the
    # running terminal holds: 127.2 KB measured with source line numbers kept (deploy's default now), the connection
    # budget's server and the replay memory of 256 entries preallocated at boot (~7.4 KB) included.
    # The held figures in one layout may count blocks a false pointer keeps (bench_firmware.LAYOUTS: the same
    # firmware held 130.4-131.5 KB by layout alone): over the bound,
    # the next layouts are measured too, and the least figure is the firmware's. A real creep shows in all of them.
    held = [(m["running"], m["dropped"])]
    for pad in bench_firmware.LAYOUTS[1:]:
        if held[-1][0] <= 136 * 1024 and held[-1][1] >= 4 * 1024:
            break
        m2 = bench_firmware.measure(pad=pad, boots=False)
        held.append((m2["running"], m2["dropped"]))
    running, dropped = min(held)
    assert running <= 136 * 1024, held
    assert dropped >= 4 * 1024, held  # the boot-only modules really leave the heap
