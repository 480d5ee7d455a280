"""Runs every bench/bench_*.py in turn and prints their figures: `make bench`.
A single one: .venv/bin/python bench/bench_<topic>.py
Progress: each bench is announced as [i/n] with the time so far, and one that is still running says so every
PROGRESS_S seconds (some take many minutes, with nothing to print until they finish)."""

import glob
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRESS_S = float(os.environ.get("SENTINEL_BENCH_PROGRESS_S", "30"))


def _clock(seconds):
    m, s = divmod(int(seconds), 60)
    return "%dm%02ds" % (m, s) if m else "%ds" % s


def main(argv):
    names = sorted(glob.glob(os.path.join(HERE, "bench_*.py")))
    if argv:
        names = [n for n in names if any(a in os.path.basename(n) for a in argv)]
    failed = []
    start = time.time()
    for i, path in enumerate(names, 1):
        name = os.path.basename(path)
        print("=" * 78)
        print("## [%d/%d] %s  (%s so far)" % (i, len(names), name, _clock(time.time() - start)), flush=True)
        t0 = time.time()
        proc = subprocess.Popen([sys.executable, path], cwd=os.path.dirname(HERE))
        while True:
            try:
                rc = proc.wait(timeout=PROGRESS_S)
                break
            except subprocess.TimeoutExpired:
                print(
                    "... [%d/%d] %s still running (%s)" % (i, len(names), name, _clock(time.time() - t0)),
                    file=sys.stderr,
                    flush=True,
                )
            except KeyboardInterrupt:
                proc.terminate()
                proc.wait()
                raise
        print("(%s: %.1f s, exit %d)" % (name, time.time() - t0, rc), flush=True)
        if rc:
            failed.append(name)
    if failed:
        print("failed: %s" % ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
