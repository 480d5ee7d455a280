"""Requests signed by host_client on CPython are verified by the core under real MicroPython.
Bodies cross into MicroPython as hex: its json turns an escaped emoji into two lone surrogates."""

import json
import os
import sys

from host_client import AlarmClient, preset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from mpy import run_micropython

NOW = 1787000000
TEXTS = [
    "训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁，全环算力挂起",
    "NVLink slow-down on gpu-node-3",
    "Überhitzung GPU 5 — 91 °C",
    "GPU 🔥 fell off the bus",
    "x" * 400,
    "警" * 133,
    'quote " and \\ backslash',
]


def test_host_client_requests_verify_under_micropython():
    c = AlarmClient("http://t", "ops", "shared-secret-ö", clock=lambda: NOW)
    reqs = []
    for i, t in enumerate(TEXTS):
        level = ["p0", "p1", "normal"][i % 3]
        r = c.sign("/api/v1/send_msg", preset(level, t, key="k%d" % i, id="m%d" % i).to_wire())
        reqs.append({"headers": r.headers, "body": r.body.hex(), "text": t})
    tampered = dict(reqs[0])
    tampered["body"] = bytes.fromhex(tampered["body"]).replace(b"A03", b"A04").hex()
    code = """
import json
from binascii import unhexlify
from sentinel_core.keyring import KeyRing
from sentinel_core.receiver import Receiver
reqs = json.loads(%r)
r = Receiver(KeyRing({"ops": "shared-secret-ö"}))
out = []
for q in reqs:
    res = r.handle("POST", "/api/v1/send_msg", q["headers"], unhexlify(q["body"]), %d)
    out.append([res.status, (res.alarm.text.encode() if res.alarm else res.answer["error"].encode()).hex()])
print("RESULT" + json.dumps(out))
""" % (json.dumps(reqs + [tampered]), NOW + 3)
    out = run_micropython(code)
    line = [x for x in out.splitlines() if x.startswith("RESULT")][0]
    got = json.loads(line[6:])
    # Texts come back as UTF-8 hex: MicroPython's json cannot carry characters above U+FFFF as escapes.
    assert got[:-1] == [[200, q["text"].encode().hex()] for q in reqs]
    assert got[-1] == [401, b"bad_signature".hex()]
