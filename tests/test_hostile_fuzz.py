"""Hypothesis against the emulator over real TCP: raw request bytes (random, and mutations of a valid signed request
and of the hostile corpus) never get a 3xx or 5xx, and a request that is refused leaves the terminal's state as it
was (its status snapshot, compared before and after). A refused request is any answer but 200; a mutation that
still verifies is a new, legitimately accepted request, and only then may the state change."""

import json
import os
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hostile  # noqa: E402

CASES = hostile.load()
SETTINGS = settings(
    max_examples=int(os.environ.get("SENTINEL_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
# What changes by itself while nothing happens: the clock, the frame counter, the local time, ages and countdowns.
_VOLATILE = ("now", "emulator", "local_time", "last_age_s", "remaining_s", "age_s", "expires_in_s")


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    from emulator.harness import Harness

    with Harness(str(tmp_path_factory.mktemp("fuzz"))) as h:
        yield h


def _state(emu):
    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k not in _VOLATILE}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    return strip(emu.status())


def _send(emu, data):
    status, body = hostile.exchange("127.0.0.1", emu.server.port, data, timeout=15)
    assert status is not None, data[:300]  # every request is answered (the replayer half-closes: no deadline wait)
    assert not 300 <= status < 400 and status < 500, (status, body[:300], data[:300])
    if status != 200:
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        if body:  # HEAD has none
            assert answer and answer.get("ok") is False and answer.get("error"), (status, body[:300])
    return status


def _settled(emu):
    """The state once it has stopped changing by itself (an accepted alarm's speech, say): two reads alike."""
    prev = _state(emu)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.03)
        cur = _state(emu)
        if cur == prev:
            return cur
        prev = cur
    raise AssertionError("the terminal's state never settled: %r" % prev)


def _quiesce(emu):
    """Undo what an accepted request set going, so that no timer of its own (a heartbeat deadline, an alarm's
    duration, a mute running out) changes the state during a later example's before/after comparison."""
    c = emu.client()
    c.heartbeat(0)
    c.ack(long=True)
    c.unmute()


def _check(emu, data):
    before = _settled(emu)
    status = _send(emu, data)
    if status != 200:
        after = _state(emu)
        assert after == before, (status, data[:300])
    else:
        _quiesce(emu)


_SIGNED = [c for c in CASES if "{sig}" in c["head"] and c["expect"]["status"] == 200]


@st.composite
def mutated(draw):
    """A corpus request (often a valid signed one) with bytes flipped, inserted, deleted or a span duplicated."""
    case = draw(st.sampled_from(_SIGNED + CASES))
    data = bytearray(hostile.render(case, _KEY[0], _KEY[1]))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        op = draw(st.sampled_from(["flip", "insert", "delete", "dup", "byte"]))
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte":
            data[i] = draw(st.sampled_from([0x00, 0x0A, 0x0D, 0x20, 0x3A, 0x7F, 0x80, 0xA0, 0xB2, 0xC2, 0xFF]))
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[i : i + draw(st.integers(1, 16))]
        else:
            j = min(len(data), i + draw(st.integers(1, 64)))
            data[i:i] = data[i:j]
    return bytes(data)


_KEY = [None, None]


@SETTINGS
@given(data=st.binary(max_size=600))
def test_random_bytes(emu, data):
    _check(emu, data)


@SETTINGS
@given(line=st.binary(max_size=80), headers=st.lists(st.binary(max_size=60), max_size=6), body=st.binary(max_size=200))
def test_random_heads(emu, line, headers, body):
    _check(emu, line + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body)


@SETTINGS
@given(data=mutated())
def test_mutated_requests(emu, data):
    _check(emu, data)


@SETTINGS
@given(
    body=st.one_of(
        st.binary(max_size=300), st.sampled_from([c["body"] for c in CASES]).map(lambda b: b.encode("latin-1"))
    ),
    path=st.sampled_from(["/api/v1/send_msg", "/api/v1/ack", "/api/v1/heartbeat", "/api/v1/unmute"]),
)
def test_signed_bodies(emu, body, path):
    # Correctly signed: these reach the JSON grammar, the encoding check and the schema.
    from sentinel_core.signing import scope, sign

    ts = str(int(time.time()))
    head = (
        "POST %s HTTP/1.1\r\nContent-Type: application/json\r\nX-API-Key: %s\r\nX-Timestamp: %s\r\n"
        "X-Signature: %s\r\nContent-Length: %d\r\n\r\n"
        % (path, _KEY[0], ts, sign(_KEY[1], ts, body, scope("POST", path)), len(body))
    )
    _check(emu, head.encode() + body)


@pytest.fixture(autouse=True, scope="module")
def _key(emu):
    _KEY[0], _KEY[1] = emu.cfg["key_id"], emu.cfg["secret"]


def test_the_terminal_still_serves_after_fuzzing(emu):
    from host_client import preset

    t0 = time.monotonic()
    ack = emu.client().send(preset("p0", "after the fuzzer", key="fuzz"))
    assert ack.status == 200 and not ack.duplicate
    assert time.monotonic() - t0 < 5
    assert emu.server.front.stats["answered"] > 0
