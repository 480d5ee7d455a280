# Signature vectors (computed by CPython's stdlib hmac) against the core's own HMAC, on both interpreters.
from binascii import unhexlify

from sentinel_core import signing

VECTORS = "signing.json"


def _body(case):
    return unhexlify(case["body_hex"]) if "body_hex" in case else case["body"].encode()


def run_case(case):
    body = _body(case)
    got = signing.sign(case["secret"], case["timestamp"], body)
    assert got == case["signature"], "%s: %s != %s" % (case["name"], got, case["signature"])
    # The precomputed-pad path and the one-shot path agree.
    s = signing.Signer(case["secret"].encode())
    assert s.digest(case["timestamp"].encode(), body) == unhexlify(case["signature"])
    assert signing.unhex_signature(case["signature"]) == unhexlify(case["signature"])


def test_equal_is_exact():
    assert signing.equal(b"abc", b"abc")
    assert not signing.equal(b"abc", b"abd")
    assert not signing.equal(b"abc", b"ab")
    assert signing.equal("", "")
    assert not signing.equal(b"\x00", b"\x01")


def test_unhex_refuses_uppercase_and_junk():
    good = "0f" * 32
    assert signing.unhex_signature(good) == b"\x0f" * 32
    assert signing.unhex_signature(good.upper()) is None
    assert signing.unhex_signature(good[:-1]) is None
    assert signing.unhex_signature("g" + good[1:]) is None
    assert signing.unhex_signature(good + "0") is None


def test_empty_secret_refused():
    try:
        signing.Signer(b"")
    except ValueError:
        return
    raise AssertionError("empty secret accepted")


def test_hmac_rfc4231_case_2():
    # RFC 4231 test case 2: key "Jefe".
    got = signing.hmac_sha256(b"Jefe", b"what do ya want for nothing?")
    assert got == unhexlify("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
