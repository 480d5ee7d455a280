# Runs tests/firmware/*.py on CPython with the same contract as tests/mpy/run.mjs (test_* functions, async ones
# awaited; VECTORS/run_case), the fakes shadowing machine/neopixel/network/ntptime. Started in a subprocess by
# tests/test_firmware_cpython.py so the fake modules never leak into pytest's own process.
import asyncio
import inspect
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (
    os.path.join(HERE, "fakes"),
    os.path.join(ROOT, "firmware", "lib"),
    HERE,
    os.path.join(ROOT, "tests", "core"),
):
    sys.path.insert(0, p)


def main(names):
    os.chdir(ROOT)
    if not names:
        names = sorted(n[:-3] for n in os.listdir(HERE) if n.endswith(".py") and not n.startswith("_"))
    passed = failed = 0
    lines = []
    for name in names:
        try:
            mod = __import__(name)
        except Exception as e:  # noqa: BLE001 - a test runner: a module that fails to import is one FAIL line
            failed += 1
            lines.append("FAIL import %s: %s: %s" % (name, type(e).__name__, e))
            continue
        for attr in sorted(dir(mod)):
            if not attr.startswith("test_"):
                continue
            try:
                r = getattr(mod, attr)()
                if inspect.iscoroutine(r):
                    asyncio.run(r)
                passed += 1
            except Exception as e:  # noqa: BLE001 - a test runner: every failure is one FAIL line with its traceback
                failed += 1
                lines.append("FAIL %s.%s: %s: %s\n%s" % (name, attr, type(e).__name__, e, traceback.format_exc()))
    for line in lines:
        print(line)
    print("cpython-firmware: %d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
