"""The box on the real runtime (tests/unixport.py) and the emulator answer the same request alike: the same
status, the same error code, the same JSON once parsed (key order is not compared: MicroPython's json writes dicts
in its own order). Both hold the same key; each request goes byte for byte to both."""

import json
import re
import time

import pytest
import unixport

from emulator.harness import Harness
from sentinel_core.signing import scope, sign

pytestmark = pytest.mark.skipif(unixport.unavailable() is not None, reason=unixport.unavailable() or "")

OK = {"text": "XID 79 on gpu-3", "color": "#FF0000", "light_mode": "flash", "audio_mode": "cycle", "repeat_times": 3}


def _cases(key_id, secret):
    now = int(time.time())

    def signed(
        obj=None, raw=None, ts=None, secret=secret, key_id=key_id, ctype="application/json", path="/api/v1/send_msg"
    ):
        body = raw if raw is not None else json.dumps(obj).encode()
        ts = str(now) if ts is None else ts
        h = {
            "X-API-Key": key_id,
            "X-Timestamp": ts,
            "X-Signature": sign(secret.encode(), ts, body, scope("POST", path)),
        }
        if ctype:
            h["Content-Type"] = ctype
        return h, body

    c = []
    c.append(("a P0", "POST", "/api/v1/send_msg", *signed(dict(OK, key="k1", id="parity-1"))))
    c.append(("its retry", "POST", "/api/v1/send_msg", *signed(dict(OK, key="k1", id="parity-1"))))
    c.append(("an ack", "POST", "/api/v1/ack", *signed({"key": "k1", "id": "parity-ack"}, path="/api/v1/ack")))
    c.append(
        (
            "a heartbeat",
            "POST",
            "/api/v1/heartbeat",
            *signed({"interval": 60, "id": "parity-hb"}, path="/api/v1/heartbeat"),
        )
    )
    c.append(("bad signature", "POST", "/api/v1/send_msg", *signed(OK, secret="not-the-secret-at-all-0000")))
    c.append(("unknown key", "POST", "/api/v1/send_msg", *signed(OK, key_id="who")))
    h, b = signed(OK)
    del h["X-Signature"]
    c.append(("missing signature", "POST", "/api/v1/send_msg", h, b))
    c.append(("stale timestamp", "POST", "/api/v1/send_msg", *signed(OK, ts=str(now - 3600))))
    c.append(("wrong content type", "POST", "/api/v1/send_msg", *signed(OK, ctype="text/plain")))
    c.append(("a 3,000-byte body", "POST", "/api/v1/send_msg", *signed(dict(OK, text="x" * 2940))))
    c.append(("malformed json", "POST", "/api/v1/send_msg", *signed(raw=b'{"text": "x",')))
    c.append(("bad colour", "POST", "/api/v1/send_msg", *signed(dict(OK, color="red"))))
    c.append(("GET on send_msg", "GET", "/api/v1/send_msg", {}, b""))
    c.append(("OPTIONS on send_msg", "OPTIONS", "/api/v1/send_msg", {}, b""))
    c.append(("no such endpoint", "POST", "/api/v1/send_message", *signed(OK)))
    c.append(("POST on status", "POST", "/api/v1/status", {"Content-Type": "application/json"}, b"{}"))
    return c


def _norm(answer):
    # A stale timestamp's message says how far off it is, counted on each terminal's clock at its own moment.
    if isinstance(answer, dict) and isinstance(answer.get("message"), str):
        answer = dict(answer, message=re.sub(r"-?\d+ s away", "N s away", answer["message"]))
    return answer


def _compare(tmp_path, cases):
    emu = Harness(str(tmp_path / "emu"), voice="off").start()
    box = unixport.Box(cfg=unixport.config(keys={emu.cfg["key_id"]: emu.cfg["secret"]}))
    try:
        box.start()
        diffs = []
        for name, method, path, headers, body in cases(emu.cfg["key_id"], emu.cfg["secret"]):
            got = []
            for port in (box.port, int(emu.url.rsplit(":", 1)[1])):
                code, _, raw = unixport.http_request(port, method, path, headers, body)
                try:
                    answer = json.loads(raw)
                except ValueError:
                    answer = raw[:200]
                got.append((code, _norm(answer)))
            if got[0] != got[1]:
                diffs.append((name, "box", got[0], "emulator", got[1]))
        assert not diffs, "\n".join(repr(d) for d in diffs)
    finally:
        box.remove()
        emu.stop()


def test_the_box_and_the_emulator_answer_the_same_request_alike(tmp_path):
    _compare(tmp_path, _cases)
