# Signature vectors (computed by CPython's stdlib hmac) against the core's own HMAC, on both interpreters.
from binascii import unhexlify

from sentinel_core import signing

VECTORS = "signing.json"


def _body(case):
    return unhexlify(case["body_hex"]) if "body_hex" in case else case["body"].encode()


def run_case(case):
    body = _body(case)
    # v1.1 cases name their endpoint; the others are v1, the RFC's rule (what send_msg signs).
    scope = signing.scope(case["method"], case["path"]) if "path" in case else None
    got = signing.sign(case["secret"], case["timestamp"], body, scope)
    assert got == case["signature"], "%s: %s != %s" % (case["name"], got, case["signature"])
    # The precomputed-pad path and the one-shot path agree.
    s = signing.Signer(case["secret"].encode())
    assert s.digest(case["timestamp"].encode(), body, scope) == unhexlify(case["signature"])
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


def test_scope_is_v1_only_for_send_msg():
    assert signing.scope("POST", "/api/v1/send_msg") is None
    assert signing.scope("POST", "/api/v1/ack") == b"POST /api/v1/ack\n"
    assert signing.scope("POST", "/api/v1/heartbeat") != signing.scope("POST", "/api/v1/ack")
    # A v1 message starts with the timestamp's ASCII digit, a v1.1 one with the method's letter.
    assert signing.sign("k", "1", b"{}") != signing.sign("k", "1", b"{}", signing.scope("POST", "/api/v1/ack"))


def test_registered_endpoint_is_bound():
    # A new endpoint gets the v1.1 binding by registering, nothing else.
    from sentinel_core import receiver
    from sentinel_core.keyring import KeyRing

    receiver.register("/api/v1/test_only", "test_only", lambda obj: {"id": obj.get("id")})
    try:
        r = receiver.Receiver(KeyRing({"k": "secret"}))
        body = b'{"id":"a"}'
        h = {"Content-Type": "application/json", "X-API-Key": "k", "X-Timestamp": "1787000000"}
        h["X-Signature"] = signing.sign("secret", "1787000000", body, signing.scope("POST", "/api/v1/test_only"))
        res = r.handle("POST", "/api/v1/test_only", h, body, 1787000000)
        assert res.status == 200 and res.kind == "test_only" and res.payload == {"id": "a"}, res
        res = r.handle("POST", "/api/v1/ack", h, body, 1787000000)
        assert res.status == 401 and res.answer["error"] == "wrong_endpoint", res
        h["X-Signature"] = signing.sign("secret", "1787000001", body, signing.scope("POST", "/api/v1/ack"))
        h["X-Timestamp"] = "1787000001"
        res = r.handle("POST", "/api/v1/test_only", h, body, 1787000001)
        assert res.status == 401 and res.answer["error"] == "wrong_endpoint", res
    finally:
        receiver.ENDPOINTS.pop("/api/v1/test_only", None)
