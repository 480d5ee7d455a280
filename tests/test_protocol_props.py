"""Hypothesis properties of the wire protocol on CPython, seeded from the same vector files MicroPython runs."""

import hashlib
import hmac
import json
import os
import unicodedata

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from host_client import AlarmClient, preset
from sentinel_core import signing, strictjson
from sentinel_core.keyring import KeyRing
from sentinel_core.receiver import Receiver

VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors")
with open(os.path.join(VECTORS, "signing.json"), encoding="utf-8") as f:
    SIGNING = json.load(f)["cases"]
NOW = 1787000000
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Texts a terminal accepts: no control characters (C0, DEL, C1, line/paragraph separators), no bidi overrides, no
# lone surrogates (not representable in UTF-8), and at least one character that shows: not a space, a format
# character, an unassigned code point nor one of the fillers and selectors that render as nothing.
_BIDI = set(range(0x202A, 0x202F)) | set(range(0x2066, 0x206A))
_FILLERS = (
    {0x34F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x2800, 0x3164, 0xFFA0}
    | set(range(0xFE00, 0xFE10))
    | set(range(0xE0100, 0xE01F0))
)


def _shows(ch):
    return unicodedata.category(ch) not in ("Zs", "Cf", "Cn") and ord(ch) not in _FILLERS


alarm_text = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters=[chr(c) for c in _BIDI]),
    min_size=1,
    max_size=120,
).filter(lambda s: any(_shows(ch) for ch in s) and len(s.encode()) <= 400)
secrets_ = st.binary(min_size=1, max_size=150)
key_ids = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=64)


def _with_signing_examples(f):
    for c in SIGNING[:12]:
        if "body" in c:
            f = example(secret=c["secret"].encode(), ts=c["timestamp"], body=c["body"].encode())(f)
    return f


@SETTINGS
@given(secret=secrets_, ts=st.integers(0, 10**12).map(str), body=st.binary(max_size=600))
@_with_signing_examples
def test_core_hmac_equals_stdlib(secret, ts, body):
    want = hmac.new(secret, ts.encode() + b"\n" + body, hashlib.sha256).hexdigest()
    assert signing.sign(secret, ts, body) == want


def _terminal(key_id, secret):
    return Receiver(KeyRing({key_id: secret}), replay_capacity=16)


@SETTINGS
@given(text=alarm_text, key_id=key_ids, secret=secrets_, level=st.sampled_from(["p0", "p1", "normal"]))
@example(
    text="训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁，全环算力挂起",
    key_id="gpu_cluster_sentinel",
    secret=b"AI#TrainSecureHMACSecretKey2026",
    level="p0",
)
def test_client_signed_request_verifies_and_round_trips(text, key_id, secret, level):
    c = AlarmClient("http://t", key_id, secret, clock=lambda: NOW)
    req = c.sign("/api/v1/send_msg", preset(level, text).to_wire())
    res = _terminal(key_id, secret).handle("POST", "/api/v1/send_msg", req.headers, req.body, NOW + 5)
    assert res.status == 200, res.answer
    assert res.alarm.text == text


def _signed(text="x"):
    c = AlarmClient("http://t", "ops", b"k" * 20, clock=lambda: NOW)
    return c.sign("/api/v1/send_msg", preset("p0", text).to_wire())


@SETTINGS
@given(data=st.data())
def test_any_single_byte_change_is_refused(data):
    req = _signed(data.draw(alarm_text))
    part = data.draw(st.sampled_from(["body", "X-Timestamp", "X-Signature"]))
    headers = dict(req.headers)
    body = req.body
    if part == "body":
        raw = bytearray(body)
    else:
        raw = bytearray(headers[part].encode())
    i = data.draw(st.integers(0, len(raw) - 1))
    new = data.draw(st.integers(0, 255).filter(lambda b: b != raw[i]))
    raw[i] = new
    if part == "body":
        body = bytes(raw)
    else:
        headers[part] = bytes(raw)  # not always valid text: the handler must cope
    res = _terminal("ops", b"k" * 20).handle("POST", "/api/v1/send_msg", headers, body, NOW)
    assert res.status == 401, (part, res.answer)
    assert res.alarm is None


header_values = st.one_of(st.binary(max_size=80), st.text(max_size=80), st.none(), st.integers())


@SETTINGS
@given(
    method=st.sampled_from(["POST", "GET", "PUT", "", "post"]),
    path=st.one_of(st.sampled_from(["/api/v1/send_msg", "/api/v1/ack", "/api/v1/heartbeat"]), st.text(max_size=30)),
    headers=st.dictionaries(
        st.one_of(
            st.sampled_from(["Content-Type", "X-API-Key", "X-Timestamp", "X-Signature"]),
            st.text(max_size=20),
            st.binary(max_size=20),
        ),
        header_values,
        max_size=8,
    ),
    body=st.one_of(st.binary(max_size=3000), st.text(max_size=500).map(str.encode)),
    now=st.one_of(st.integers(-(10**12), 10**12), st.floats(allow_nan=False, allow_infinity=False, width=32)),
)
def test_arbitrary_input_never_raises(method, path, headers, body, now):
    res = Receiver(KeyRing({"ops": b"k"})).handle(method, path, headers, body, now)
    assert isinstance(res.status, int) and res.answer["ok"] is (res.status == 200)
    if res.status != 200:
        assert res.answer["error"] and res.answer["message"]
    json.loads(res.body_bytes())


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=("Cs",))),
    lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=8), ch, max_size=4),
    max_leaves=12,
)


@SETTINGS
@given(value=json_values, ascii_only=st.booleans())
def test_strict_json_accepts_what_json_writes(value, ascii_only):
    raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    try:
        got = strictjson.loads(raw)
    except ValueError as e:
        # Only surrogate escapes (characters above U+FFFF with ensure_ascii) and deep nesting are refused.
        assert "surrogate" in str(e) or "deep" in str(e), e
        return
    assert got == value


@SETTINGS
@given(raw=st.binary(max_size=200))
def test_strict_json_is_never_looser_than_cpython(raw):
    try:
        got = strictjson.loads(raw)
    except ValueError:
        return
    assert json.loads(raw.decode("utf-8")) == got
