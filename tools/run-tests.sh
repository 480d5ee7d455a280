#!/usr/bin/env bash
# `make test`: every stage runs even when one fails; the exit code is non-zero if any stage failed.
#   1. ruff: the formatter's check, then the linter; pyright basic over host_client and emulator
#   2. the two MicroPython suites under node, in the background while
#   3. pytest in parallel (pytest-xdist, PYTEST_JOBS workers, default 4: most of the suite waits on real servers,
#      timers and subprocesses, not on the CPU); --dist loadfile: each file's tests run on one worker, so a
#      module fixture is made once (tests/test_packaging.py's wheel builds in the checkout's build/, which two
#      builds at once trample; pytest-xdist's loadgroup does not group on pytest 9.2, it uses the removed
#      Node._nodeid)
#   4. the tests marked `serial` (they assert a latency bound an issue demands), alone, after everything else.
set -u
cd "$(dirname "$0")/.."
BIN=.venv/bin
export PATH="$PWD/$BIN:$PATH"
JOBS=${PYTEST_JOBS:-4}
PYTEST=("$BIN/pytest" -q -p no:cacheprovider)
failed=()

"$BIN/ruff" format --check . || failed+=("ruff format")
"$BIN/ruff" check . || failed+=(ruff)
# pyright basic over host_client and emulator (pyproject.toml's [tool.pyright]); the firmware's, against the ESP32's
# stubs, is tests/test_firmware_pyright.py in the pytest stage
"$BIN/pyright" -p pyproject.toml || failed+=("pyright host_client, emulator")

mpy_log=$(mktemp)
trap 'rm -f "$mpy_log"' EXIT
(
    rc=0
    # --single-threaded: V8 posts no background jobs. Without it, node's exit has hung now and then: a V8 worker
    # compiling in the background waited for a collection while the main thread, in process.exit, joined it.
    node --single-threaded tests/mpy/run.mjs || rc=1
    node --single-threaded tests/mpy/run.mjs --suite firmware || rc=1
    exit $rc
) >"$mpy_log" 2>&1 &
mpy_pid=$!

"${PYTEST[@]}" -n "$JOBS" --dist loadfile -m "not serial" || failed+=("pytest (parallel)")

wait "$mpy_pid" || failed+=("micropython suites (node)")
echo "--- MicroPython suites (node tests/mpy/run.mjs, run alongside pytest) ---"
cat "$mpy_log"

echo "--- tests marked serial (latency bounds), alone ---"
"${PYTEST[@]}" -m serial || failed+=("pytest (serial)")

if [ ${#failed[@]} -ne 0 ]; then
    echo "FAILED stages: ${failed[*]}" >&2
    exit 1
fi
echo "all stages passed"
