"""The hostile corpus (tests/vectors/hostile.json) over real TCP: the same status and error code from the emulator,
from the board's own server on CPython (microdot + the firmware + the fakes) and on the MicroPython Unix port; no
3xx and no 5xx for any of it."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hostile  # noqa: E402
import unixport  # noqa: E402
from board_cpython import Board  # noqa: E402

CASES = hostile.load()


def test_corpus_covers_the_issue():
    names = {c["name"] for c in CASES}
    for must in (
        "rfc_p0",
        "rfc_p0_on_ack",
        "rfc_p0_on_heartbeat",
        "ts_superscript_byte",
        "ts_arabic_indic",
        "ctype_nbsp_byte",
        "ctype_nbsp_utf8",
        "post_status",
        "double_slash_inside",
        "unknown_coding",
        "text_c1_nel",
        "text_only_zwsp",
        "text_bidi_override",
        "json_duplicate_key",
    ):
        assert must in names, must
    for c in CASES:
        assert set(c) <= {"name", "why", "head", "body", "expect", "sign_for", "sign_body", "ts_offset"}, c["name"]
        assert c["expect"]["status"] < 500 and not 300 <= c["expect"]["status"] < 400, c["name"]


def test_corpus_on_the_emulator(tmp_path):
    from emulator.harness import Harness

    with Harness(str(tmp_path)) as h:
        failures = hostile.replay(CASES, "127.0.0.1", h.server.port, key_id=h.cfg["key_id"], secret=h.cfg["secret"])
    assert failures == []


def test_corpus_on_the_board_under_cpython(tmp_path):
    with Board(tmp_path) as b:
        failures = hostile.replay(CASES, "127.0.0.1", b.port, key_id=b.key_id, secret=b.secret)
    assert failures == []


@pytest.mark.skipif(unixport.unavailable() is not None, reason=unixport.unavailable() or "")
def test_corpus_on_the_board_under_micropython():
    with unixport.Box() as box:
        failures = hostile.replay(CASES, "127.0.0.1", box.port, key_id=unixport.KEY_ID, secret=unixport.SECRET)
        assert box.alive()
    assert failures == []
