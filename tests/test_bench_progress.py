"""make bench's runner (bench/run_all.py) shows progress (issue 26): each bench announced as [i/n] with the time
so far, and a long one says it is still running while it has nothing to print. Run against two stand-in benches
in a copy of the bench directory."""

import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_run_all_announces_each_bench_and_a_long_one_is_still_running(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    shutil.copy(os.path.join(ROOT, "bench", "run_all.py"), bench / "run_all.py")
    (bench / "bench_a_quick.py").write_text('print("quick figure")\n')
    (bench / "bench_b_long.py").write_text('import time\ntime.sleep(2.2)\nprint("long figure")\n')
    env = dict(os.environ, SENTINEL_BENCH_PROGRESS_S="0.5")
    p = subprocess.run(
        [sys.executable, str(bench / "run_all.py")],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert re.search(r"## \[1/2\] bench_a_quick\.py  \(\d+s so far\)", p.stdout)
    assert re.search(r"## \[2/2\] bench_b_long\.py  \(\d+s so far\)", p.stdout)
    still = re.findall(r"\.\.\. \[2/2\] bench_b_long\.py still running \(\d+s\)", p.stderr)
    assert len(still) >= 2, p.stderr
    assert "[1/2] bench_a_quick.py still running" not in p.stderr
