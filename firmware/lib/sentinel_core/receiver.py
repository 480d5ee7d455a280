# The one request handler both HTTP shells call (microdot on the board, flask in the emulator):
# method, path, headers, body and now in; status, JSON answer and what to act on out. It never raises.
import json

from sentinel_core import strictjson
from sentinel_core.alarm import LEVEL_NAMES
from sentinel_core.errors import ProtocolError, bad_json, unauthorized
from sentinel_core.replay import DUPLICATE, ReplayGuard
from sentinel_core.signing import equal, unhex_signature
from sentinel_core.validate import parse_ack, parse_alarm, parse_heartbeat

PATH_ALARM = "/api/v1/send_msg"
PATH_ACK = "/api/v1/ack"
PATH_HEARTBEAT = "/api/v1/heartbeat"
_KINDS = {PATH_ALARM: "alarm", PATH_ACK: "ack", PATH_HEARTBEAT: "heartbeat"}
MAX_BODY = 2048
_TS_MAX_DIGITS = 12


class Result:
    def __init__(self, status, answer, kind=None, alarm=None, ack=None, heartbeat=None, duplicate=False):
        self.status = status
        self.answer = answer
        self.kind = kind
        self.alarm = alarm
        self.ack = ack
        self.heartbeat = heartbeat
        self.duplicate = duplicate

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


def _printable(s, limit=40):
    # For echoing a caller's value in a message: short, and nothing that could forge a log line.
    out = ""
    for ch in s[:limit]:
        out += ch if 32 <= ord(ch) < 127 else "?"
    return out


class Receiver:
    def __init__(self, keyring, window=300, replay_capacity=64, max_body=MAX_BODY):
        self.keyring = keyring
        self.max_body = max_body
        self.replay = ReplayGuard(window, replay_capacity)

    def handle(self, method, path, headers, body, now, synced=True):
        try:
            return self._handle(method, path, headers, body, int(now), synced)
        except ProtocolError as e:
            return refusal(e.status, e.code, e.message)
        except MemoryError:
            return refusal(503, "internal", "out of memory; try again")
        except Exception:  # noqa: BLE001 - an answer, never a crash, whatever the input
            return refusal(500, "internal", "internal error")

    def _handle(self, method, path, headers, body, now, synced):
        kind = _KINDS.get(path) if isinstance(path, str) else None
        if kind is None:
            return refusal(404, "not_found", "no such endpoint")
        if method != "POST":
            return refusal(405, "method_not_allowed", "use POST")
        if not (isinstance(body, bytes) or isinstance(body, bytearray)):
            raise bad_json("body must be bytes")
        if len(body) > self.max_body:
            return refusal(413, "too_large", "body is %d bytes, at most %d" % (len(body), self.max_body))
        ctype = _header(headers, "content-type")
        if ctype is None or (ctype != "application/json" and
                             ctype.split(";")[0].strip().lower() != "application/json"):
            return refusal(415, "unsupported_media_type", "Content-Type must be application/json")
        key_id = _header(headers, "x-api-key")
        ts_text = _header(headers, "x-timestamp")
        sig_text = _header(headers, "x-signature")
        # Not a loop over (name, value) pairs: those tuples would be built on every request.
        missing = "X-API-Key" if not key_id else "X-Timestamp" if not ts_text else "X-Signature" if not sig_text \
            else None
        if missing is not None:
            raise unauthorized("missing_auth", "missing header %s" % missing)
        ts_text = ts_text.strip()
        if not ts_text.isdigit() or len(ts_text) > _TS_MAX_DIGITS:
            raise unauthorized("bad_timestamp", "X-Timestamp must be Unix seconds in decimal")
        ts = int(ts_text)
        signer = self.keyring.signer(key_id)
        if signer is None:
            raise unauthorized("unknown_key", "unknown key id '%s'" % _printable(key_id))
        given = unhex_signature(sig_text.strip())
        if given is None:
            raise unauthorized("bad_signature", "X-Signature must be 64 lowercase hex digits")
        mac = signer.digest(ts_text, body)
        if not equal(mac, given):
            raise unauthorized("bad_signature", "signature does not match the body and timestamp")
        # Authenticated from here on: the time window, then the body, then idempotency.
        self.replay.check(ts, mac, None, now, synced)
        try:
            obj = strictjson.loads(body)
        except UnicodeError:
            return refusal(400, "bad_encoding", "body is not valid UTF-8")
        except ValueError as e:
            raise bad_json("malformed JSON: %s" % e)
        if kind == "alarm":
            alarm = parse_alarm(obj)
            msg_id = alarm.id
        elif kind == "ack":
            ack = parse_ack(obj)
            msg_id = ack["id"]
        else:
            hb = parse_heartbeat(obj)
            msg_id = hb["id"]
        mid = None if msg_id is None else "%s/%s" % (key_id, msg_id)  # one string, not an intermediate too
        if self.replay.check(ts, mac, mid, now, synced) == DUPLICATE:
            return Result(200, {"ok": True, "kind": kind, "duplicate": True}, kind, duplicate=True)
        self.replay.accept(ts, mac, mid, now, synced)
        answer = {"ok": True, "kind": kind, "duplicate": False}
        if kind == "alarm":
            answer["level"] = LEVEL_NAMES[alarm.level]
            if alarm.key is not None:
                answer["key"] = alarm.key
            if alarm.id is not None:
                answer["id"] = alarm.id
            return Result(200, answer, kind, alarm=alarm)
        if kind == "ack":
            return Result(200, answer, kind, ack=ack)
        return Result(200, answer, kind, heartbeat=hb)
