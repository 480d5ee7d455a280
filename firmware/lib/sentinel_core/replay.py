# Replay and clock rules. A request is judged against a reference time: the terminal's clock once NTP has set it,
# and until then the newest authenticated timestamp it has accepted plus the time elapsed since (the sender's
# clock, proven by the HMAC). A bounded memory remembers what was accepted; when it must forget an entry, the
# floor rises to that entry's timestamp and nothing at or below the floor is accepted again, so forgetting never
# re-opens a replay. The floor is exported so a reboot does not re-open one either (docs/PROTOCOL.md).
from sentinel_core.errors import unauthorized

ACCEPT = 0
DUPLICATE = 1


class ReplayGuard:
    def __init__(self, window=300, capacity=64):
        if window < 1 or capacity < 1:
            raise ValueError("window and capacity must be positive")
        self.window = window
        self.capacity = capacity
        self.floor = 0
        self._newest = None  # newest accepted Unix timestamp
        self._newest_at = 0  # the local clock's reading when it was accepted
        self._ts = []
        self._macs = []
        self._ids = []

    def reference(self, now, synced):
        """The Unix time requests are judged against, or None before the first request on an unsynced clock."""
        if synced:
            return now
        if self._newest is None:
            return None
        return self._newest + (now - self._newest_at)

    def check(self, ts, mac, msg_id, now, synced):
        """ACCEPT or DUPLICATE; raises ProtocolError 401 stale_timestamp. Does not record: call accept()."""
        ref = self.reference(now, synced)
        if ref is not None and (ts < ref - self.window or ts > ref + self.window):
            raise unauthorized("stale_timestamp", "timestamp is %d s away from the terminal's time (window %d s); "
                               "check the sender's clock" % (ts - ref, self.window))
        for i in range(len(self._ts)):
            if self._macs[i] == mac or (msg_id is not None and self._ids[i] == msg_id):
                return DUPLICATE
        if ts <= self.floor:
            raise unauthorized("stale_timestamp", "timestamp is older than the terminal's replay memory; "
                               "sign again with the current time")
        return ACCEPT

    def accept(self, ts, mac, msg_id, now, synced):
        ref = self.reference(now, synced)
        if ref is not None:
            self._prune(ref - self.window)
        if len(self._ts) >= self.capacity:
            oldest = 0
            for i in range(1, len(self._ts)):
                if self._ts[i] < self._ts[oldest]:
                    oldest = i
            if self._ts[oldest] > self.floor:
                self.floor = self._ts[oldest]
            self._drop(oldest)
        self._ts.append(ts)
        self._macs.append(mac)
        self._ids.append(msg_id)
        if self._newest is None or ts > self._newest:
            self._newest = ts
            self._newest_at = now

    def _prune(self, before):
        # Entries the window refuses anyway can go without raising the floor.
        i = 0
        while i < len(self._ts):
            if self._ts[i] < before:
                self._drop(i)
            else:
                i += 1

    def _drop(self, i):
        self._ts.pop(i)
        self._macs.pop(i)
        self._ids.pop(i)

    def __len__(self):
        return len(self._ts)

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
