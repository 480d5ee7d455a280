# Replay and clock rules. A request is judged against a reference time: the terminal's clock once NTP has set it,
# and until then the newest authenticated timestamp it has accepted plus the time elapsed since (the sender's
# clock, proven by the HMAC). A bounded memory remembers what was accepted; when it must forget an entry, the
# floor rises to that entry's timestamp and nothing at or below the floor is accepted again, so forgetting never
# re-opens a replay. The floor is exported so a reboot does not re-open one either (docs/PROTOCOL.md).
import hashlib

from sentinel_core.compat import const
from sentinel_core.errors import unauthorized

_ACCEPT = const(0)
DUPLICATE = const(1)

# What one entry remembers, packed into one bytearray (on the ESP32 three Python objects per entry cost ~150 bytes,
# this ~30): the first 16 bytes of the request's HMAC (a replay has the same one; 128 bits make a false match
# impossible in practice), a flag, and 8 bytes of SHA-256 of the sender's message id (same reasoning, 64 bits
# among at most a few thousand remembered ids).
_MAC = const(16)
_ID = const(8)
_ENTRY = const(_MAC + 1 + _ID)


def _id_digest(msg_id):
    return hashlib.sha256(msg_id.encode()).digest()


def _mac_key(mac):
    # The receiver's MACs are 32 bytes; anything shorter (tests, other callers) is hashed to full length first.
    return mac if len(mac) >= _MAC else hashlib.sha256(mac).digest()


def _same(buf, at, value, n):
    # Compared in place: a slice of the table per entry would allocate on every check.
    for j in range(n):
        if buf[at + j] != value[j]:
            return False
    return True


class ReplayGuard:
    def __init__(self, window=300, capacity=64):
        if window < 1 or capacity < 1:
            raise ValueError("window and capacity must be positive")
        self.window = window
        self.capacity = capacity
        self.floor = 0
        self._newest = None  # newest accepted Unix timestamp
        self._newest_at = 0  # the local clock's reading when it was accepted
        # Slot i: its timestamp in _ts (None: free) as an offset from _base, so that it stays a small int on
        # MicroPython (Unix seconds are above 2**30 and would each be a heap object), its MAC and id in _keys.
        self._base = None
        self._ts = []
        self._keys = bytearray()
        self._n = 0
        # The receiver checks a message id, then accepts it: its digest is computed once for both (a SHA-256 object,
        # the id's bytes and the digest, ~250 bytes in the request's largest step), and forgotten once accepted.
        self._idm = None
        self._idh = None

    def _digest(self, msg_id):
        if msg_id is None:
            return None
        if msg_id is not self._idm:
            self._idm = msg_id
            self._idh = _id_digest(msg_id)
        return self._idh

    def reference(self, now, synced):
        """The Unix time requests are judged against, or None before the first request on an unsynced clock."""
        if synced:
            return now
        if self._newest is None:
            return None
        return self._newest + (now - self._newest_at)

    def _find(self, mac, idh):
        k = self._keys
        for i in range(len(self._ts)):
            if self._ts[i] is None:
                continue
            at = i * _ENTRY
            if _same(k, at, mac, _MAC) or (idh is not None and k[at + _MAC] and _same(k, at + _MAC + 1, idh, _ID)):
                return True
        return False

    def check(self, ts, mac, msg_id, now, synced):
        """ACCEPT or DUPLICATE; raises ProtocolError 401 stale_timestamp. Does not record: call accept()."""
        ref = self.reference(now, synced)
        if ref is not None and (ts < ref - self.window or ts > ref + self.window):
            raise unauthorized("stale_timestamp", "timestamp is %d s away from the terminal's time (window %d s); "
                               "check the sender's clock" % (ts - ref, self.window))
        if self._n and self._find(_mac_key(mac), self._digest(msg_id)):
            return DUPLICATE
        if ts <= self.floor:
            raise unauthorized("stale_timestamp", "timestamp is older than the terminal's replay memory; "
                               "sign again with the current time")
        return _ACCEPT

    def accept(self, ts, mac, msg_id, now, synced):
        ref = self.reference(now, synced)
        if ref is not None:
            self._prune(ref - self.window)
        if self._n >= self.capacity and self._base is not None:
            oldest = -1
            low = 0
            for i in range(len(self._ts)):
                t = self._ts[i]
                if t is not None and (oldest < 0 or t < low):
                    oldest = i
                    low = t
            if self._base + low > self.floor:
                self.floor = self._base + low
            self._drop(oldest)
        if self._base is None:
            self._base = ts
        slot = None
        for i in range(len(self._ts)):
            if self._ts[i] is None:
                slot = i
                break
        if slot is None:
            slot = len(self._ts)
            self._ts.append(None)
            self._keys.extend(bytes(_ENTRY))
        at = slot * _ENTRY
        k = self._keys
        mac = _mac_key(mac)
        for j in range(_MAC):
            k[at + j] = mac[j]
        if msg_id is None:
            k[at + _MAC] = 0
        else:
            k[at + _MAC] = 1
            d = self._digest(msg_id)
            for j in range(_ID):
                k[at + _MAC + 1 + j] = d[j]
            self._idm = self._idh = None
        self._ts[slot] = ts - self._base
        self._n += 1
        if self._newest is None or ts > self._newest:
            self._newest = ts
            self._newest_at = now

    def _prune(self, before):
        # Entries the window refuses anyway can go without raising the floor.
        if self._base is None:
            return
        before -= self._base
        for i in range(len(self._ts)):
            t = self._ts[i]
            if t is not None and t < before:
                self._drop(i)

    def _drop(self, i):
        self._ts[i] = None
        self._n -= 1

    def __len__(self):
        return self._n

    def export(self):
        """What must survive a reboot: after one, nothing at or below the newest accepted timestamp is taken."""
        f = self.floor
        if self._newest is not None and self._newest > f:
            f = self._newest
        return {"replay_floor": f}

    def restore(self, state):
        f = state.get("replay_floor") if isinstance(state, dict) else None
        if type(f) is int and f > self.floor:
            self.floor = f
