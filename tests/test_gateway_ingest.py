"""decode_body's shortcuts (the decoded text searched before the bytes are counted) against the plain rules."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from host_client.gateway import ingest
from host_client.gateway.ingest import MAX_DEPTH, BodyError, decode_body


def plain(raw):
    """The rules written out without shortcuts: strict JSON, nesting at most MAX_DEPTH, no lone surrogate."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return ("error", 400, "bad_encoding")
    try:
        obj = ingest._DECODER.decode(text)
    except RecursionError:
        return ("error", 400, "too_deep")
    except ValueError:
        return ("error", 400, "bad_json")
    if not ingest._depth_ok(obj, MAX_DEPTH):
        return ("error", 400, "too_deep")
    if ingest._lone_surrogate(obj) is not None:
        return ("error", 422, "bad_text")
    return ("ok", json.dumps(obj, sort_keys=False))


def got(raw):
    try:
        return ("ok", json.dumps(decode_body(raw), sort_keys=False))
    except BodyError as e:
        return ("error", e.status, e.code)


def nest(n, opener="{"):
    if opener == "{":
        return ('{"a":' * n + "1" + "}" * n).encode()
    return ("[" * n + "1" + "]" * n).encode()


STORM = (
    b'{"cluster_rack":"R001","node_host":"gpu-node-00001-9e3779b1","event_type":"NCCL_TIMEOUT","gpu_index":1,'
    b'"gpu_util":100.0}'
)
BODIES = [
    STORM,
    STORM + b" ",
    b" " + STORM,
    b"[" + STORM + b"]",
    STORM.replace(b"R001", b"R{0[1"),
    STORM.replace(b"R001", b"R\\u00e9"),
    STORM.replace(b"R001", b"R\\ud800"),
    STORM.replace(b"R001", b"R\\\\"),
    STORM.replace(b"R001", b"R\\ud83d\\ude00"),
    STORM.replace(b"R001", "R机架".encode()),
    STORM.replace(b'"R001"', b'{"\\udc00":1}'),
    b"{}",
    b"[]",
    b"{",
    b"",
    b"\xff{}",
    b'{"a":NaN}',
    nest(MAX_DEPTH),
    nest(MAX_DEPTH + 1),
    nest(MAX_DEPTH, "["),
    nest(MAX_DEPTH + 1, "["),
    b'{"a":[' + b"{" * 0 + b'"{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{"]}',
    b"[" * 40 + b"]" * 40,
    b'{"x":"' + b"{" * 40 + b'"}',
]


@pytest.mark.parametrize("raw", BODIES)
def test_decode_body_gives_what_the_plain_rules_give(raw):
    assert got(raw) == plain(raw)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='a{[\\"\ud800é', max_size=6),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3),
    max_leaves=60,
)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_decode_body_gives_what_the_plain_rules_give_property(obj):
    raw = json.dumps(obj).encode()
    assert got(raw) == plain(raw)
