"""Valid-P0 latency while 1,000 slow sockets are held open (issue 13: target max < 1 s over 20 P0s).

The attacker keeps N connections open at all times (N=1000 by default), a third of each kind: idle (connects and
sends nothing), dripping (sends a request head one byte per second) and lying (a whole head with
Content-Length: 2000 and ten bytes of body, then nothing). A connection the terminal closes (deadline, shed) is
opened again after 50 ms, so the pressure stays at N for the whole run. Meanwhile 20 valid P0s are sent one after
another (host_client, one attempt, 5 s timeout) and timed from connect to answer.

Targets, each in its own process: the emulator (`python -m emulator --headless`), the board's server on CPython
(tests/board_cpython.py: microdot + the firmware + the fakes) and on the MicroPython Unix port (tests/unixport.py,
when installed). All traffic stays on 127.0.0.1. The file-descriptor limit is raised to what N needs.
Run: .venv/bin/python bench/bench_slowclients.py [--conns N] [--p0 20] [--targets emulator,board-cpython,board-unix]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "firmware", "lib"))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import unixport  # noqa: E402
from board_cpython import Board  # noqa: E402
from slowclients import Attacker, raise_fd_limit  # noqa: E402

from host_client import AlarmClient, preset  # noqa: E402
from testkit.emulator import EmulatorProcess  # noqa: E402


class Emulator:
    name = "emulator (asyncio front)"

    def __enter__(self):
        self.tmp = tempfile.mkdtemp(prefix="bench-slow-emu-")
        self.emu = EmulatorProcess(self.tmp, run_for_s=900).start()
        self.port, self.proc = self.emu.port, self.emu.proc
        self.key_id, self.secret = self.emu.cfg["key_id"], self.emu.cfg["secret"]
        return self

    def __exit__(self, *exc):
        self.emu.stop()


class BoardCPython(Board):
    name = "board server on CPython (microdot + firmware)"

    def __init__(self):
        super().__init__(tempfile.mkdtemp(prefix="bench-slow-board-"))


class BoardUnix:
    name = "board on the MicroPython Unix port (default http.max_conn)"

    def __enter__(self):
        self.box = unixport.Box().start(wait=20)
        self.port = self.box.port
        self.key_id, self.secret = unixport.KEY_ID, unixport.SECRET
        return self

    def __exit__(self, *exc):
        self.box.remove()


def run_target(target_cls, conns, p0s):
    with target_cls() as t:
        att = Attacker(t.port, conns).start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and att.opened < conns:
            time.sleep(0.1)
        time.sleep(1.0)
        client = AlarmClient("http://127.0.0.1:%d" % t.port, t.key_id, t.secret, timeout=5, retries=0)
        lat, errors, held = [], [], []
        for i in range(p0s):
            held.append(att.open)
            t0 = time.perf_counter()
            try:
                ack = client.send(
                    preset(
                        "p0", "XID 79 on gpu-node-%03d under a slow-client attack" % i, key="A03:gpu-node-%03d:XID" % i
                    )
                )
                if ack.status != 200:
                    errors.append("status %d" % ack.status)
                lat.append(time.perf_counter() - t0)
            except Exception as e:  # noqa: BLE001 - counted and printed
                errors.append("%s: %s" % (type(e).__name__, e))
                lat.append(time.perf_counter() - t0)
            time.sleep(0.3)
        att.stop()
        return t.name, lat, errors, held, att


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--conns", type=int, default=1000)
    p.add_argument("--p0", type=int, default=20)
    p.add_argument("--targets", default="emulator,board-cpython,board-unix")
    a = p.parse_args(argv)
    limit = raise_fd_limit(a.conns * 2 + 256)
    print(
        "slow-client bench: %d held connections (1/3 idle, 1/3 dripping 1 B/s, 1/3 Content-Length lies), "
        "%d valid P0s; fd limit %d" % (a.conns, a.p0, limit)
    )
    targets = {"emulator": Emulator, "board-cpython": BoardCPython, "board-unix": BoardUnix}
    ok = True
    for name in a.targets.split(","):
        if name == "board-unix" and unixport.unavailable():
            print("  %-58s skipped: %s" % (BoardUnix.name, unixport.unavailable()))
            continue
        tname, lat, errors, held, att = run_target(targets[name], a.conns, a.p0)
        ms = [x * 1000 for x in lat]
        good = not errors and max(ms) < 1000
        ok = ok and good
        print(
            "  %-58s P0 p50 %6.1f ms  max %6.1f ms  (%d/%d accepted; held %d-%d open while sending; "
            "%d reconnects, %d connects failed) %s"
            % (
                tname,
                statistics.median(ms),
                max(ms),
                len(lat) - len(errors),
                len(lat),
                min(held),
                max(held),
                att.opened - a.conns,
                att.failed_connects,
                "ok" if good else "OVER TARGET",
            )
        )
        for e in errors[:3]:
            print("      error: %s" % e)
    print("target: every P0 accepted, max < 1000 ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
