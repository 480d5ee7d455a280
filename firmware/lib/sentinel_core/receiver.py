# The one request handler both HTTP shells call (microdot on the board, flask in the emulator):
# method, path, headers, body and now in; status, JSON answer and what to act on out. It never raises.
#
# Acceptance is atomic: with commit=False a new request's message id is made ready in the replay memory but not
# recorded; the caller applies the request to the state machine, then calls commit(). A request that could not be
# applied (a MemoryError in the state machine) is therefore never remembered, and its retry is applied instead of
# being answered "duplicate" for an alarm the terminal never showed.
import json

from sentinel_core import strictjson
from sentinel_core.alarm import LEVEL_NAMES
from sentinel_core.errors import ProtocolError, bad_json, unauthorized
from sentinel_core.replay import CAPACITY, DUPLICATE, ReplayGuard
from sentinel_core.signing import equal, scope, unhex_signature
from sentinel_core.validate import parse_ack, parse_alarm, parse_heartbeat, parse_unmute

PATH_ALARM = "/api/v1/send_msg"
PATH_ACK = "/api/v1/ack"
PATH_HEARTBEAT = "/api/v1/heartbeat"
PATH_UNMUTE = "/api/v1/unmute"
MAX_BODY = 2048
_TS_MAX_DIGITS = 12

# The signed endpoints: path -> (kind, parse, method, scope). parse(obj) -> the payload (a dict with "id", or an
# object with .id); scope is what the signature covers before the timestamp (signing.scope: None only for the
# RFC's send_msg). A new endpoint gets method-and-path binding by registering; nothing else to add.
ENDPOINTS = {}


def register(path, kind, parse, method="POST"):
    """Make (method, path) a signed endpoint answered by the Receiver; its accepted requests come back as
    Result(kind=kind, payload=parse(body's JSON))."""
    ENDPOINTS[path] = (kind, parse, method, scope(method, path))


register(PATH_ALARM, "alarm", parse_alarm)
register(PATH_ACK, "ack", parse_ack)
register(PATH_HEARTBEAT, "heartbeat", parse_heartbeat)
register(PATH_UNMUTE, "unmute", parse_unmute)


class Result:
    def __init__(self, status, answer, kind=None, alarm=None, ack=None, heartbeat=None, duplicate=False, payload=None):
        self.status = status
        self.answer = answer
        self.kind = kind
        self.alarm = alarm
        self.ack = ack
        self.heartbeat = heartbeat
        self.duplicate = duplicate
        self.payload = payload  # what the endpoint's parse gave (the Alarm, the ack's dict, ...)
        self.pending = False  # a new request made ready in the replay memory, not recorded yet (Receiver.commit)

    def body_bytes(self):
        return json.dumps(self.answer).encode()

    def __repr__(self):
        return "Result(%d, %r)" % (self.status, self.answer)


def refusal(status, code, message):
    return Result(status, {"ok": False, "error": code, "message": message})


def _header(headers, name):
    """Case-insensitive header lookup; None when absent or not text."""
    n = len(name)
    for k in headers:
        # The length first: lower() makes a new string, and this runs for every header of every request.
        if not (isinstance(k, str) or isinstance(k, bytes)) or len(k) != n:
            continue
        kk = k.decode() if isinstance(k, bytes) else k
        if kk.lower() == name:
            v = headers[k]
            if isinstance(v, bytes):
                try:
                    v = v.decode()
                except UnicodeError:
                    return None
            return v if isinstance(v, str) else None
    return None


# The checks below read a header's UTF-8 bytes, never its characters: on MicroPython each character a str yields
# (indexing, iteration) is interned for good, so any client could grow the board's pool of names by one character
# per request (docs/FIRMWARE.md "Memory").


def _ows_strip(s):
    """Strip HTTP's optional whitespace (SP, HTAB) only: str.strip() would also take U+00A0, U+3000 and others."""
    b = s.encode()
    i = 0
    j = len(b)
    while i < j and (b[i] == 32 or b[i] == 9):
        i += 1
    while j > i and (b[j - 1] == 32 or b[j - 1] == 9):
        j -= 1
    return b[i:j].decode() if i or j < len(b) else s


def _ascii_digits(s, limit):
    """1..limit ASCII digits 0-9: str.isdigit() also says yes to superscripts, Arabic-Indic and full-width digits,
    which int() then refuses or reads."""
    n = len(s)
    if n == 0 or n > limit:
        return False
    for o in s.encode():
        if not 48 <= o <= 57:
            return False
    return True


def _visible_ascii(s, limit):
    """1..limit characters from ! to ~ (a key id's grammar, as keyring.add checks it)."""
    if not 0 < len(s) <= limit:
        return False
    for o in s.encode():
        if not 33 <= o <= 126:
            return False
    return True


def _is_json_type(ctype):
    """application/json in any ASCII case, padded with SP/HTAB only, parameters allowed after ";"; the whole value
    printable ASCII. (str.strip() and str.lower() would also pass U+00A0 padding and other scripts' letters.)"""
    for o in ctype.encode():
        if not (32 <= o <= 126 or o == 9):
            return False
    i = ctype.find(";")
    return _ows_strip(ctype if i < 0 else ctype[:i]).lower() == "application/json"


def _printable(s, limit=40):
    # For echoing a caller's value in a message: short, and nothing that could forge a log line.
    out = bytearray()
    for o in s[:limit].encode():
        if 32 <= o < 127:
            out.append(o)
        elif o < 0x80 or o >= 0xC0:  # a character's first byte: one "?" for it, none for the bytes after it
            out.append(63)
    return out.decode()


class Receiver:
    def __init__(self, keyring, window=300, replay_capacity=CAPACITY, max_body=MAX_BODY):
        self.keyring = keyring
        self.max_body = max_body
        self.replay = ReplayGuard(window, replay_capacity)

    def handle(self, method, path, headers, body, now, synced=True, commit=True):
        """The answer to one request (a Result). commit=False: a new accepted request is not recorded in the replay
        memory until commit() (result.pending says whether one waits)."""
        try:
            r = self._handle(method, path, headers, body, int(now), synced)
            if r.pending and commit:
                self.replay.commit()
                r.pending = False
            return r
        except ProtocolError as e:
            return refusal(e.status, e.code, e.message)
        except MemoryError:
            return refusal(503, "busy", "out of memory; try again")
        except Exception:  # noqa: BLE001 - an answer, never a crash, whatever the input
            return refusal(500, "internal", "internal error")

    def too_large(self, length):
        """The refusal of a body of `length` bytes over max_body: also what a shell answers when it refuses a
        request by its Content-Length alone, unread (counted with ShellGlue.refusal)."""
        return refusal(413, "too_large", "body is %d bytes, at most %d" % (length, self.max_body))

    def _handle(self, method, path, headers, body, now, synced):
        ep = ENDPOINTS.get(path) if isinstance(path, str) else None
        if ep is None:
            return refusal(404, "not_found", "no such endpoint")
        kind = ep[0]
        if method != ep[2]:
            return refusal(405, "method_not_allowed", "use " + ep[2])
        if not (isinstance(body, bytes) or isinstance(body, bytearray)):
            raise bad_json("body must be bytes")
        if len(body) > self.max_body:
            return self.too_large(len(body))
        ctype = _header(headers, "content-type")
        if ctype is None or (ctype != "application/json" and not _is_json_type(ctype)):
            return refusal(415, "unsupported_media_type", "Content-Type must be application/json")
        key_id = _header(headers, "x-api-key")
        ts_text = _header(headers, "x-timestamp")
        sig_text = _header(headers, "x-signature")
        # Not a loop over (name, value) pairs: those tuples would be built on every request.
        missing = (
            "X-API-Key" if not key_id else "X-Timestamp" if not ts_text else "X-Signature" if not sig_text else None
        )
        if missing is not None:
            raise unauthorized("missing_auth", "missing header %s" % missing)
        ts_text = _ows_strip(ts_text or "")
        if not _ascii_digits(ts_text, _TS_MAX_DIGITS):
            raise unauthorized("bad_timestamp", "X-Timestamp must be 1..12 ASCII digits of Unix seconds")
        ts = int(ts_text)
        signer = self.keyring.signer(key_id) if _visible_ascii(key_id, 64) else None
        if signer is None:
            raise unauthorized("unknown_key", "unknown key id '%s'" % _printable(key_id))
        given = unhex_signature(_ows_strip(sig_text))
        if given is None:
            raise unauthorized("bad_signature", "X-Signature must be 64 lowercase hex digits")
        mac = signer.digest(ts_text, body, ep[3])
        if not equal(mac, given):
            # Made for another endpoint (a withheld alarm re-posted as an ACK, a v1-signed ACK)? Said as such; the
            # other endpoints' MACs are computed only on this failing path.
            for p in ENDPOINTS:
                if p != path and equal(signer.digest(ts_text, body, ENDPOINTS[p][3]), given):
                    raise unauthorized(
                        "wrong_endpoint", "signed for %s, not for %s (docs/PROTOCOL.md: Signing)" % (p, path)
                    )
            raise unauthorized("bad_signature", "signature does not match the body and timestamp")
        # Authenticated from here on: the time window, then the body, then idempotency.
        self.replay.check(ts, mac, None, now, synced)
        try:
            obj = strictjson.loads(body)
        except UnicodeError:
            return refusal(400, "bad_encoding", "body is not valid UTF-8")
        except ValueError as e:
            raise bad_json("malformed JSON: %s" % e)
        payload = ep[1](obj)
        msg_id = payload["id"] if isinstance(payload, dict) else payload.id
        mid = None if msg_id is None else "%s/%s" % (key_id, msg_id)  # one string, not an intermediate too
        if self.replay.check(ts, mac, mid, now, synced) == DUPLICATE:
            return Result(200, {"ok": True, "kind": kind, "duplicate": True}, kind, duplicate=True)
        answer = {"ok": True, "kind": kind, "duplicate": False}
        if kind == "alarm" and not isinstance(payload, dict):
            answer["level"] = LEVEL_NAMES[payload.level]
            if payload.key is not None:
                answer["key"] = payload.key
            if payload.id is not None:
                answer["id"] = payload.id
            r = Result(200, answer, kind, alarm=payload, payload=payload)
        elif kind == "ack":
            r = Result(200, answer, kind, ack=payload, payload=payload)
        elif kind == "heartbeat":
            r = Result(200, answer, kind, heartbeat=payload, payload=payload)
        else:
            r = Result(200, answer, kind, payload=payload)
        # Last, once nothing else can fail: what recording the request needs (a MemoryError here is a 503 and
        # nothing is remembered); the record itself is commit(), which cannot fail.
        self.replay.prepare(ts, mac, mid, now, synced)
        r.pending = True
        return r

    def commit(self, result):
        """Record result's request in the replay memory, once the terminal has applied it (handle(commit=False)).
        Allocates nothing. A retry of it is a duplicate from now on."""
        if result.pending:
            self.replay.commit()
            result.pending = False
