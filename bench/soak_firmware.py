"""Ten minutes of steady traffic on the real runtime (the board's main.py on the MicroPython Unix port with the
fakes, tests/unixport.py): an alarm a second over 24 incidents (P0, P1, and NORMALs that clear), a /metrics scrape
every 5 s, the status page every 10 s, a heartbeat every 10 s and a remote ACK every 30 s. Every 30 s it reads the
heap free after a collection (the status page's heap_free, collected first by the harness) and prints the trend.

    .venv/bin/python bench/soak_firmware.py              # 10 minutes
    .venv/bin/python bench/soak_firmware.py --minutes 2  # shorter
    .venv/bin/python bench/soak_firmware.py --heap 300000

Not part of make test or make bench (it takes the minutes it says). Flat means: the heap free after collection at
the end is within a few hundred bytes of where it was once the terminal held its 16 active alarms, and the
least-squares slope over the run is about 0 B/min.
"""

import argparse
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


def slope(points):
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    den = sum((p[0] - mx) ** 2 for p in points)
    return sum((p[0] - mx) * (p[1] - my) for p in points) / den if den else 0.0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--heap", type=int, default=None, help="-X heapsize (default: the port's own, 2 MB)")
    args = ap.parse_args(argv)
    why = unixport.unavailable()
    if why:
        print("skipped: " + why)
        return 0
    box = unixport.Box(heap=args.heap, collect_on_status=True)
    box.start()
    c = AlarmClient(box.url, unixport.KEY_ID, unixport.SECRET, timeout=5, retries=0)
    sent = refused = scrapes = 0
    samples = []
    t0 = time.monotonic()
    end = t0 + args.minutes * 60
    i = 0
    print(
        "soak: %.0f min, heap %s; every 30 s: minute, heap free after collection, open fds, box CPU"
        % (args.minutes, args.heap or "default"),
        flush=True,
    )
    cpu0 = box.cpu_seconds()
    try:
        while time.monotonic() < end and box.alive():
            tick = t0 + i
            key = "rack-%02d:gpu-worker-%02d:XID" % (i % 6, i % 24)
            if i % 25 == 24:
                alarm = preset("normal", key=key)
            elif i % 3:
                alarm = preset("p0", "XID 79 on gpu-worker-%02d: GPU has fallen off the bus" % (i % 24), key=key)
            else:
                alarm = preset("p1", "NVLink downgraded on gpu-worker-%02d" % (i % 24), key=key)
            calls = [lambda a=alarm: c.send(a)]
            if i % 10 == 5:
                calls.append(lambda: c.heartbeat(interval=60))
            if i % 30 == 29:
                calls.append(lambda: c.ack())
            for call in calls:
                sent += 1
                try:
                    call()
                except Exception as e:  # noqa: BLE001
                    refused += 1
                    print("  refused: %s" % e, flush=True)
            for path, every in (("/metrics", 5), ("/api/v1/status", 10)):
                if i % every == 0:
                    scrapes += 1
                    code, _, _ = box.request("GET", path)
                    if code != 200:
                        refused += 1
            if i % 30 == 0:
                free = box.status()["device"]["heap_free"]
                samples.append(((time.monotonic() - t0) / 60, free))
                print(
                    "  %5.1f min  %8d B free  %2d fds  CPU %4.1f %%"
                    % (
                        samples[-1][0],
                        free,
                        box.open_fds(),
                        100 * (box.cpu_seconds() - cpu0) / max(1e-6, time.monotonic() - t0),
                    ),
                    flush=True,
                )
            i += 1
            pause = tick + 1 - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        alive = box.alive()
    finally:
        box.remove()
    steady = [s for s in samples if s[0] >= 1.0] or samples  # after the first minute: 16 alarms held
    frees = [s[1] for s in steady]
    print(
        "requests %d (%d scrapes), refused %d, box %s"
        % (sent + scrapes, scrapes, refused, "alive" if alive else "DEAD")
    )
    if frees:
        print(
            "heap free after collection from minute 1: first %d B, last %d B, min %d B, max %d B; "
            "trend %+.0f B/min" % (frees[0], frees[-1], min(frees), max(frees), slope(steady))
        )
    return 0 if alive and not refused else 1


if __name__ == "__main__":
    sys.exit(main())
