# HMAC-SHA256 for the wire protocol, on hashlib.sha256 alone: the ESP32 port has no hmac module and
# micropython-lib's hmac has no compare_digest, so both the MAC and the constant-time compare live here.
#
# What is signed (docs/PROTOCOL.md, "Signing"):
#   v1   (the RFC, /api/v1/send_msg only):  X-Timestamp LF body
#   v1.1 (every other signed endpoint):     METHOD SP path LF X-Timestamp LF body
# A v1 message starts with an ASCII digit (the timestamp's grammar) and a v1.1 message with a method's letter, and
# two v1.1 messages differ in their first line: a signature made for one endpoint never verifies on another.
import hashlib
from binascii import hexlify

from sentinel_core.compat import const

_BLOCK = const(64)
V1_PATH = "/api/v1/send_msg"  # the one endpoint signed the RFC's way, byte for byte


def scope(method, path):
    """What a request to (method, path) signs before its timestamp: None for the RFC's send_msg (v1), else
    b"METHOD /path\n" (v1.1). Senders and the receiver both take it from here."""
    if path == V1_PATH:
        return None
    return (method + " " + path + "\n").encode()


class Signer:
    """Holds one secret's padded keys so that each request costs two hash objects and no key work."""

    def __init__(self, secret):
        if isinstance(secret, str):
            secret = secret.encode()
        if len(secret) == 0:
            raise ValueError("empty secret")
        if len(secret) > _BLOCK:
            secret = hashlib.sha256(secret).digest()
        ipad = bytearray(_BLOCK)
        opad = bytearray(_BLOCK)
        for i in range(_BLOCK):
            k = secret[i] if i < len(secret) else 0
            ipad[i] = k ^ 0x36
            opad[i] = k ^ 0x5C
        self._ipad = bytes(ipad)
        self._opad = bytes(opad)

    def digest(self, timestamp, body, scope=None):
        """Raw HMAC over [scope +] timestamp + "\\n" + body, fed in pieces so the body is never copied."""
        if isinstance(timestamp, str):
            timestamp = timestamp.encode()
        inner = hashlib.sha256(self._ipad)
        if scope is not None:
            inner.update(scope)
        inner.update(timestamp)
        inner.update(b"\n")
        inner.update(body)
        return self._finish(inner)

    def mac(self, msg):
        inner = hashlib.sha256(self._ipad)
        inner.update(msg)
        return self._finish(inner)

    def _finish(self, inner):
        outer = hashlib.sha256(self._opad)
        outer.update(inner.digest())
        return outer.digest()

    def sign(self, timestamp, body, scope=None):
        return hexlify(self.digest(timestamp, body, scope)).decode()


def hmac_sha256(key, msg):
    return Signer(key).mac(msg)


def sign(secret, timestamp, body, scope=None):
    """Lowercase hex HMAC-SHA256(secret, [scope +] timestamp + "\\n" + body): the X-Signature header. scope: what
    scope(method, path) gives for the request's endpoint (None: the RFC's v1 rule)."""
    return Signer(secret).sign(timestamp, body, scope)


def equal(a, b):
    """Compare two byte strings (or str) in time that depends only on their length."""
    if isinstance(a, str):
        a = a.encode()
    if isinstance(b, str):
        b = b.encode()
    if len(a) != len(b):
        return False
    r = 0
    for i in range(len(a)):
        r |= a[i] ^ b[i]
    return r == 0


def unhex_signature(s):
    """64 lowercase hex digits -> 32 bytes (a bytearray: a copy into bytes would only be garbage in the request's
    step; equal() reads either); None for anything else (the header is then refused)."""
    b = s.encode()  # bytes, not characters: each character a str yields is interned for good on MicroPython
    if len(b) != 64:
        return None
    out = bytearray(32)
    for i in range(32):
        hi = _nibble(b[2 * i])
        lo = _nibble(b[2 * i + 1])
        if hi < 0 or lo < 0:
            return None
        out[i] = (hi << 4) | lo
    return out


def _nibble(c):
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    return -1
