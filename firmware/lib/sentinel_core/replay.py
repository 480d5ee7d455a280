# Replay and clock rules. A request is judged against a reference time: the terminal's clock once NTP has set it,
# and until then the newest authenticated timestamp it has accepted plus the time elapsed since (the sender's
# clock, proven by the HMAC). A bounded memory remembers what was accepted; when it must forget an entry, the
# floor rises to that entry's timestamp and nothing at or below the floor is accepted again, so forgetting never
# re-opens a replay. The floor is exported so a reboot does not re-open one either (docs/PROTOCOL.md).
#
# The memory is allocated once, when the guard is made (at boot): a request never grows it, so running out of heap
# in the middle of a request cannot leave it half-updated. prepare() does everything that can allocate (the id's
# digest, the entry to forget, the floor's value) before commit() changes anything, which allocates nothing: a
# request is recorded completely or not at all, and the receiver commits only once the terminal has taken it.
#
# How many it holds (capacity) bounds bursts: the floor only reaches a fresh request's second when more than
# `capacity` requests signed at or after that second have been accepted within the window. 256 entries hold the
# RFC's gateway in a storm (200 distinct alarms in one second) with room for the steady traffic around it; each
# entry is 19 bytes of table plus a list slot (about 5.9 KB on a 32-bit board; docs/FIRMWARE.md has the figures).
import hashlib

from sentinel_core.compat import const
from sentinel_core.errors import unauthorized

_ACCEPT = const(0)
DUPLICATE = const(1)
CAPACITY = const(256)

# What one entry remembers, packed into one bytearray (on the ESP32 three Python objects per entry cost ~150 bytes,
# this 19 + a list slot): the first 10 bytes of the request's HMAC (a replay has the same one; a fresh request
# matches one of the 256 remembered MACs by chance with probability 256 / 2**80, and nobody without the key can
# aim a MAC at one), a flag, and 8 bytes of SHA-256 of the sender's message id (64 bits among at most a few
# thousand remembered ids). 16 bytes of MAC cost 1.5 KB more of heap at 256 entries (7.4 -> 5.9 KB, 32-bit).
_MAC = const(10)
_ID = const(8)
_ENTRY = const(_MAC + 1 + _ID)


def _id_digest(msg_id):
    return hashlib.sha256(msg_id.encode()).digest()[:_ID]


def _mac_key(mac):
    # The first 10 bytes of the receiver's 32-byte MACs; anything shorter (tests, other callers) is hashed first.
    return (mac if len(mac) >= _MAC else hashlib.sha256(mac).digest())[:_MAC]


class ReplayGuard:
    def __init__(self, window=300, capacity=CAPACITY):
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
        self._ts = [None] * capacity
        self._keys = bytearray(capacity * _ENTRY)
        self._n = 0
        # The receiver checks a request twice (before and after reading its message id), then accepts it: the MAC's
        # key and the id's digest are computed once for all three, and forgotten once accepted.
        self._macm = self._mach = None
        self._idm = self._idh = None
        # What prepare() made ready for commit() (attributes, not a tuple: nothing to allocate between them).
        self._p_key = self._p_idh = self._p_base = self._p_off = self._p_ts = self._p_now = None
        self._p_floor = 0
        self._p_victim = -1

    def _mac(self, mac):
        if mac is not self._macm:
            self._mach = _mac_key(mac)
            self._macm = mac
        return self._mach

    def _digest(self, msg_id):
        if msg_id is None:
            return None
        if msg_id is not self._idm:
            self._idh = _id_digest(msg_id)
            self._idm = msg_id
        return self._idh

    def reference(self, now, synced):
        """The Unix time requests are judged against, or None before the first request on an unsynced clock."""
        if synced:
            return now
        if self._newest is None:
            return None
        return self._newest + (now - self._newest_at)

    def _slot_of(self, value, field):
        # The live slot whose field (byte offset field within an entry) holds value, else -1. bytearray.find scans
        # in C; a hit at another offset of an entry, or in a forgotten slot, is skipped.
        k = self._keys
        start = field
        while True:
            at = k.find(value, start)
            if at < 0:
                return -1
            i = (at - field) // _ENTRY
            if (at - field) % _ENTRY == 0 and self._ts[i] is not None and (field == 0 or k[at - 1]):
                return i
            start = at + 1

    def _seen(self, mac, idh):
        if self._slot_of(mac, 0) >= 0:
            return True
        return idh is not None and self._slot_of(idh, _MAC + 1) >= 0

    def check(self, ts, mac, msg_id, now, synced):
        """ACCEPT or DUPLICATE; raises ProtocolError 401 stale_timestamp. Does not record: call accept()."""
        ref = self.reference(now, synced)
        if ref is not None and (ts < ref - self.window or ts > ref + self.window):
            raise unauthorized(
                "stale_timestamp",
                "timestamp is %d s away from the terminal's time (window %d s); "
                "check the sender's clock" % (ts - ref, self.window),
            )
        if self._n and self._seen(self._mac(mac), self._digest(msg_id)):
            return DUPLICATE
        if ts <= self.floor:
            raise unauthorized(
                "stale_timestamp",
                "timestamp is older than the terminal's replay memory; sign again with the current time",
            )
        return _ACCEPT

    def accept(self, ts, mac, msg_id, now, synced):
        """Record an accepted request: prepare() then commit()."""
        self.prepare(ts, mac, msg_id, now, synced)
        self.commit()

    def prepare(self, ts, mac, msg_id, now, synced):
        """Everything recording the request needs that can allocate (the MAC's key, the id's digest, the entry to
        forget and the floor that follows): a MemoryError here leaves the guard as it was. commit() records it."""
        key = self._mac(mac)
        idh = self._digest(msg_id)
        base = ts if self._base is None else self._base
        victim = -1
        floor = self.floor
        if self._n >= self.capacity:
            ref = self.reference(now, synced)
            ts_ = self._ts
            if ref is not None:
                # Entries the window refuses anyway are forgotten without raising the floor (no loss either way:
                # check() refuses them by the window first).
                cut = ref - self.window - base
                for i in range(self.capacity):
                    t = ts_[i]
                    if t is not None and t < cut:
                        ts_[i] = None
                        self._n -= 1
            if self._n >= self.capacity:
                low = 0
                for i in range(self.capacity):
                    t = ts_[i]
                    if t is not None and (victim < 0 or t < low):
                        victim = i
                        low = t
                floor = base + low
        self._p_key = key
        self._p_idh = idh
        self._p_base = base
        self._p_off = ts - base
        self._p_ts = ts
        self._p_now = now
        self._p_victim = victim
        self._p_floor = floor

    def commit(self):
        """Record what prepare() made ready. Allocates nothing, so it cannot fail half-way."""
        victim = self._p_victim
        if victim >= 0:
            if self._p_floor > self.floor:
                self.floor = self._p_floor
            self._ts[victim] = None
            self._n -= 1
        slot = 0
        while self._ts[slot] is not None:
            slot += 1
        at = slot * _ENTRY
        k = self._keys
        key = self._p_key
        for j in range(_MAC):
            k[at + j] = key[j]
        idh = self._p_idh
        if idh is None:
            k[at + _MAC] = 0
        else:
            k[at + _MAC] = 1
            for j in range(_ID):
                k[at + _MAC + 1 + j] = idh[j]
        self._base = self._p_base
        self._ts[slot] = self._p_off
        self._n += 1
        ts = self._p_ts
        if self._newest is None or ts > self._newest:
            self._newest = ts
            self._newest_at = self._p_now
        self._macm = self._mach = self._idm = self._idh = None
        self._p_key = self._p_idh = None
        self._p_victim = -1

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
