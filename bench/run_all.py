"""Runs every bench/bench_*.py in turn and prints their figures: `make bench`.
A single one: .venv/bin/python bench/bench_<topic>.py"""

import glob
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    names = sorted(glob.glob(os.path.join(HERE, "bench_*.py")))
    if argv:
        names = [n for n in names if any(a in os.path.basename(n) for a in argv)]
    failed = []
    for path in names:
        print("=" * 78)
        print("## %s" % os.path.basename(path), flush=True)
        t0 = time.time()
        r = subprocess.run([sys.executable, path], cwd=os.path.dirname(HERE))
        print("(%s: %.1f s, exit %d)" % (os.path.basename(path), time.time() - t0, r.returncode), flush=True)
        if r.returncode:
            failed.append(os.path.basename(path))
    if failed:
        print("failed: %s" % ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
