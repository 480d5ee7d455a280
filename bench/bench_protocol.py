"""Cost of verify + validate per request: time on CPython, heap allocated under MicroPython (gc.mem_alloc delta).

Target (issue 2): under 4 KB allocated per request on MicroPython.
Run: .venv/bin/python bench/bench_protocol.py
"""

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "firmware", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mpy import run_micropython  # noqa: E402

from sentinel_core.keyring import KeyRing  # noqa: E402
from sentinel_core.receiver import Receiver  # noqa: E402
from sentinel_core.signing import sign  # noqa: E402

SECRET = "bench-secret-0123456789"
NOW = 1787000000
BODIES = {
    "rfc_p0_chinese": {
        "text": "训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁，全环算力挂起",
        "color": "#FF0000",
        "light_mode": "flash",
        "audio_mode": "cycle",
        "repeat_times": 3,
    },
    "v1_plus_fields": {
        "text": "NVLink slow-down on gpu-node-17",
        "color": "#FFA500",
        "light_mode": "breath",
        "audio_mode": "once",
        "repeat_times": 1,
        "level": "P1",
        "key": "B07:gpu-node-17:NVLINK",
        "id": "0123456789abcdef",
    },
    "max_text": {"text": "警" * 133, "level": "P0"},
}


def requests(n, body):
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    out = []
    for i in range(n):
        ts = str(NOW + i)
        out.append(
            (
                {
                    "Content-Type": "application/json",
                    "X-API-Key": "ops",
                    "X-Timestamp": ts,
                    "X-Signature": sign(SECRET, ts, raw),
                },
                raw,
            )
        )
    return out


def cpython(name, body, n=3000):
    r = Receiver(KeyRing({"ops": SECRET}), window=10**9, replay_capacity=64)
    reqs = requests(n, body)
    t0 = time.perf_counter()
    for h, b in reqs:
        res = r.handle("POST", "/api/v1/send_msg", h, b, NOW + n)
        assert res.status == 200, res.answer
    dt = (time.perf_counter() - t0) / n
    return dt


MPY = r"""
import gc, json, time
from binascii import unhexlify
from sentinel_core.keyring import KeyRing
from sentinel_core.receiver import Receiver
reqs = json.loads(%(reqs)r)
reqs = [(q[0], unhexlify(q[1])) for q in reqs]
r = Receiver(KeyRing({"ops": %(secret)r}), window=10 ** 9, replay_capacity=64)
# Warm up: fill the replay memory to its steady-state size first.
for h, b in reqs[:80]:
    assert r.handle("POST", "/api/v1/send_msg", h, b, %(now)d).status == 200
n = 0
total = 0
peak = 0
for h, b in reqs[80:]:
    gc.collect()
    before = gc.mem_alloc()
    res = r.handle("POST", "/api/v1/send_msg", h, b, %(now)d)
    used = gc.mem_alloc() - before
    assert res.status == 200
    res = None
    total += used
    peak = max(peak, used)
    n += 1
print("RESULT", total // n, peak)
"""


def micropython(name, body, n=120):
    reqs = [[h, b.hex()] for h, b in requests(n, body)]
    out = run_micropython(MPY % {"reqs": json.dumps(reqs), "secret": SECRET, "now": NOW + n})
    line = [x for x in out.splitlines() if x.startswith("RESULT")][0].split()
    return int(line[1]), int(line[2])


IMPORT = r"""
import gc
gc.collect()
a = gc.mem_alloc()
from sentinel_core import receiver, keyring
gc.collect()
print("RESULT", gc.mem_alloc() - a)
"""


def main():
    print("verify + validate per request (POST /api/v1/send_msg, accepted)")
    print(
        "%-16s %6s %14s %22s %20s" % ("body", "bytes", "CPython us/req", "MicroPython B/request", "MicroPython peak B")
    )
    worst = 0
    for name, body in BODIES.items():
        size = len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())
        us = cpython(name, body) * 1e6
        avg, peak = micropython(name, body)
        worst = max(worst, peak)
        print("%-16s %6d %14.1f %22d %20d" % (name, size, us, avg, peak))
    held = int([x for x in run_micropython(IMPORT).splitlines() if x.startswith("RESULT")][0].split()[1])
    print("heap held by importing receiver + keyring from source under MicroPython: %d B" % held)
    print("target: < 4096 B allocated per request -> %s (worst %d B)" % ("met" if worst < 4096 else "NOT MET", worst))


if __name__ == "__main__":
    main()
