"""Replays tests/vectors/hostile.json (the hostile corpus) over real TCP against any terminal: the emulator, the
board's server on CPython (tests/board_cpython.py) or on the MicroPython Unix port (tests/unixport.py). The file's
format is in its own "format" entry and in docs/PROTOCOL.md ("Hostile corpus").

    from hostile import load, replay
    failures = replay(load(), "127.0.0.1", port, key_id=key_id, secret=secret)  # [] when all answer as expected
"""

import json
import os
import re
import socket
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "vectors", "hostile.json")
sys.path.insert(0, os.path.join(ROOT, "firmware", "lib"))
from sentinel_core.signing import scope, sign  # noqa: E402

sys.path.pop(0)

_TS = re.compile(r"\{ts\}")


def load(path=CORPUS):
    with open(path, encoding="utf-8") as f:
        return json.load(f)["cases"]


def render(case, key_id, secret, now=None):
    """The bytes of one case for a terminal holding key_id/secret."""
    ts = str(int(time.time() if now is None else now) + case.get("ts_offset", 0))
    body = case["body"].encode("latin-1")
    head = case["head"]
    if "{sig}" in head:
        line = head.split("\n", 1)[0].split(" ")
        method, path = (case.get("sign_for") or "%s %s" % (line[0], line[1])).split(" ")
        path = path.split("?", 1)[0]
        signed = case["sign_body"].encode("latin-1") if "sign_body" in case else body
        head = head.replace("{sig}", sign(secret, ts, signed, scope(method, path)))
    head = head.replace("{key}", key_id).replace("{len}", str(len(body)))
    head = _TS.sub(ts, head)
    return head.encode("latin-1") + body


def exchange(host, port, data, timeout=10.0):
    """Send data on a fresh connection, half-close, read until the peer closes: (status or None, body bytes)."""
    s = socket.create_connection((host, port), timeout=timeout)
    raw = b""
    try:
        if data:
            s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            raw += chunk
    finally:
        s.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", head)
    return (int(m.group(1)) if m else None), body


def check(case, status, body):
    """None when the answer is the expected one, else what differs."""
    want = case["expect"]
    if status != want["status"]:
        return "%s: status %s, want %s (%r)" % (case["name"], status, want["status"], body[:200])
    if want["error"] is None:
        return None
    try:
        answer = json.loads(body)
    except ValueError:
        return "%s: answer is not JSON: %r" % (case["name"], body[:200])
    if answer.get("ok") is not False or answer.get("error") != want["error"] or not answer.get("message"):
        return "%s: answer %r, want error %s" % (case["name"], answer, want["error"])
    return None


def replay(cases, host, port, *, key_id, secret, timeout=10.0):
    """Every case in order on one terminal; returns the list of mismatches (and of 3xx/5xx answers)."""
    failures = []
    for case in cases:
        status, body = exchange(host, port, render(case, key_id, secret), timeout)
        bad = check(case, status, body)
        if bad:
            failures.append(bad)
        elif status is not None and (300 <= status < 400 or status >= 500):
            failures.append("%s: %d is never an answer to a client's bytes" % (case["name"], status))
    return failures
