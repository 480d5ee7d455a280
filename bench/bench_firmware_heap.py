"""The smallest heap the firmware really runs in: the board's own main.py on the MicroPython Unix port
(tests/unixport.py: real sockets, real asyncio, the fakes for the hardware), -X heapsize bisected until boot and a
realistic workload run without one refusal. This counts what a live-heap bound cannot: fragmentation, contiguous
blocks, the garbage between collections, the sockets' buffers and asyncio's own objects.

    .venv/bin/python bench/bench_firmware_heap.py            # the .mpy install (what deploy.py copies)
    SENTINEL_FROZEN_MICROPYTHON=<micropython built with bench/manifest_unix.py frozen> \\
        .venv/bin/python bench/bench_firmware_heap.py        # and the frozen image, on that build
    SENTINEL_FROZEN_MICROPYTHON=... .venv/bin/python bench/bench_firmware_heap.py --frozen-only
    SENTINEL_FROZEN_MICROPYTHON=<build of one tree>:<build of another> \
        .venv/bin/python bench/bench_firmware_heap.py --held-only   # held after boot / workload of each, one run

A 32-bit build (the ESP32's object and pointer sizes; gcc-multilib, which tools/install-system-deps.sh --bench
installs) is what the memory figures in docs/FIRMWARE.md come from:
    make -C <micropython>/ports/unix MICROPY_FORCE_32BIT=1 MICROPY_PY_BTREE=0 MICROPY_PY_FFI=0 MICROPY_PY_SSL=0 \\
        FROZEN_MANIFEST=$PWD/bench/manifest_unix.py MICRODOT_DIR=...
On that build the bench also prints what the box holds after boot and after the workload in a 256 KB heap (the
status page's heap_free read after a collection).

The workload, one request at a time as a gateway sends them: 200 alarms (P0 and P1 over 24 incidents, so the
terminal holds its 16 active alarms, and NORMALs that clear some), a heartbeat every 10, a remote ACK every 20,
GET /api/v1/status every 10 and a /metrics scrape every 5. "Runs" means every answer is 200 and the box is alive
at the end.

The Unix port is 64-bit: its objects and pointers are larger than on the 32-bit ESP32, so the absolute figures are
above a board's; the ratios between the installs, and between the heap and what the workload needs, are what carry
over (docs/FIRMWARE.md "Memory" has the board figures and how they were derived). Without the frozen build the
frozen part is skipped and says so.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "firmware", "lib"))

import unixport  # noqa: E402

from host_client import AlarmClient, preset  # noqa: E402

ALARMS = 200
STEP = 2048


def workload(box, alarms=ALARMS):
    """Run the workload; (refusals, requests, heap_free at the end or None)."""
    c = AlarmClient(box.url, unixport.KEY_ID, unixport.SECRET, timeout=5, retries=0)
    refused = 0
    n = 0

    def get(path):
        nonlocal refused, n
        n += 1
        try:
            code, _, body = box.request("GET", path)
        except OSError:
            refused += 1
            return None
        if code != 200 or (path.endswith("status") and not body.endswith(b"}")):
            refused += 1
            return None
        return body

    for i in range(alarms):
        key = "rack-%02d:gpu-worker-%02d:%s" % (i % 6, i % 24, "NCCL_TIMEOUT" if i % 3 else "NVLINK_DOWN")
        if i % 25 == 24:
            alarm = preset("normal", key=key)
        elif i % 3:
            alarm = preset("p0", "NCCL timeout on gpu-worker-%02d, rank %d stalled" % (i % 24, i % 8), key=key)
        else:
            alarm = preset("p1", "NVLink downgraded on gpu-worker-%02d" % (i % 24), key=key)
        for send in (
            [lambda a=alarm: c.send(a)]
            + ([lambda: c.heartbeat(interval=300)] if i % 10 == 9 else [])
            + ([lambda: c.ack()] if i % 20 == 19 else [])
        ):
            n += 1
            try:
                send()
            except Exception:  # noqa: BLE001 - a refusal (503), a reset or a timeout: all count
                refused += 1
        if i % 10 == 0:
            get("/api/v1/status")
        if i % 5 == 0:
            get("/metrics")
    if not box.alive():
        return refused + 1, n, None
    try:
        free = box.status()["device"].get("heap_free")
    except Exception:  # noqa: BLE001
        free = None
    return refused, n, free


def runs(heap, exe=None, frozen=False):
    """(ok, refusals, requests, heap_free): boot and the workload in a heap of `heap` bytes."""
    box = unixport.Box(heap=heap, exe=exe, frozen=frozen)
    try:
        try:
            box.start(wait=8)
        except RuntimeError:
            return False, None, 0, None  # did not boot (or never answered its status)
        refused, n, free = workload(box)
        return refused == 0 and box.alive(), refused, n, free
    finally:
        box.remove()


def held(exe=None, frozen=False, heap=256 * 1024):
    """(held after boot, held after the workload, refusals) in bytes: heap minus the status page's heap_free,
    read after a collection."""
    box = unixport.Box(heap=heap, exe=exe, frozen=frozen, collect_on_status=True)
    try:
        box.start(wait=15)
        boot = heap - box.status()["device"]["heap_free"]
        refused, _, _ = workload(box)
        return boot, heap - box.status()["device"]["heap_free"], refused
    finally:
        box.remove()


def smallest(lo, hi, exe=None, frozen=False, log=print):
    """Bisect the smallest heap (to STEP bytes) in which runs() succeeds; hi must succeed. (heap, free, requests)."""
    ok, _, n, free = runs(hi, exe, frozen)
    if not ok:
        raise RuntimeError("the workload does not run even in %d bytes" % hi)
    best = (hi, free, n)
    while hi - lo > STEP:
        mid = (lo + hi) // 2 // 1024 * 1024
        ok, refused, n, free = runs(mid, exe, frozen)
        log(
            "    %7d B: %s"
            % (
                mid,
                "runs (%s B free at the end)" % free
                if ok
                else "did not boot"
                if refused is None
                else "%d of %d refused" % (refused, n),
            )
        )
        if ok:
            hi = mid
            best = (mid, free, n)
        else:
            lo = mid
    return best


def kb(n):
    return "%.1f KB" % (n / 1024)


def main():
    why = unixport.unavailable()
    if why:
        print("skipped: " + why)
        return 0
    t0 = time.time()
    if "--held-only" in sys.argv:
        # Several builds (each with its own tree frozen), measured one after the other in one run: no bisection.
        print("Held by the frozen image in a 256 KB heap, after boot / after the workload (status page's heap_free):")
        for exe in os.environ.get("SENTINEL_FROZEN_MICROPYTHON", "").split(os.pathsep):
            if exe:
                boot, run, refused = held(exe, True)
                print("  %s: %s / %s (%d refused)" % (os.path.basename(exe), kb(boot), kb(run), refused))
        print("(%.0f s)" % (time.time() - t0))
        return 0
    print(
        "Smallest heap for boot + %d alarms, heartbeats, ACKs, status pages and scrapes, no refusal "
        "(MicroPython Unix port: the 64-bit wheel, and the SENTINEL_FROZEN_MICROPYTHON build if set)" % ALARMS
    )
    heap = 512 * 1024
    if "--frozen-only" not in sys.argv:
        print("  .mpy install (deploy.py's files in /lib, bytecode loaded into the heap):")
        heap, free, n = smallest(96 * 1024, 512 * 1024)
        print("  -> %s (%d requests; %s free at the end)" % (kb(heap), n, kb(free or 0)))
    frozen_exe = os.environ.get("SENTINEL_FROZEN_MICROPYTHON")
    if frozen_exe and os.path.exists(frozen_exe):
        for frozen in (True, False):
            boot, run, refused = held(frozen_exe, frozen)
            print(
                "  %s on %s: held after boot %s, after the workload %s (%d refused)"
                % (
                    "frozen image" if frozen else ".mpy install",
                    os.path.basename(frozen_exe),
                    kb(boot),
                    kb(run),
                    refused,
                )
            )
        print("  frozen image (%s: firmware/manifest.py frozen, only boot.py and main.py on flash):" % frozen_exe)
        fheap, ffree, fn = smallest(32 * 1024, heap, exe=frozen_exe, frozen=True)
        print("  -> %s (%d requests; %s free at the end)" % (kb(fheap), fn, kb(ffree or 0)))
        # The same binary running the .mpy install: the difference is what freezing alone saves.
        print("  .mpy install on that same build:")
        mheap, mfree, mn = smallest(96 * 1024, 512 * 1024, exe=frozen_exe)
        print("  -> %s; freezing saves %s (%.0f %%)" % (kb(mheap), kb(mheap - fheap), 100.0 * (mheap - fheap) / mheap))
    else:
        print(
            "  frozen image: skipped (no build: set SENTINEL_FROZEN_MICROPYTHON to a Unix-port micropython built "
            "with bench/manifest_unix.py frozen; docs/FIRMWARE.md says how)"
        )
    print("(%.0f s)" % (time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
