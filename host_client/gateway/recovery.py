"""Recovery tracking: which queued or delivered alarm stands for each open incident, so a recovery clears the
alarm the terminal knows (a summary's key, or the first GPU's incident key) once every incident it carried has
recovered, and says how many nodes it stood for.

Bounded: entries older than `track_s` fall off the front (a recovery after that goes out under the incident's own
key), and at most `max_tracked` incidents are held (the oldest is forgotten first).
"""

from __future__ import annotations

from collections import OrderedDict


class RecoveryTracker:
    def __init__(self, *, max_tracked: int = 100_000, track_s: float = 6 * 3600.0):
        self.max_tracked = int(max_tracked)
        self.track_s = float(track_s)
        self.carrier_of: OrderedDict = OrderedDict()  # incident key -> (alarm key that told the terminal, since)
        # alarm key -> the incident keys not yet recovered, as a dict's keys: a storm's summary stands for tens of
        # thousands, and a dict holds them in about half a set's memory (a compact index, no sparse table of entries)
        self.open: dict = {}
        self.carried_size: dict = {}  # alarm key -> how many incidents (nodes) it stood for
        self.scope_head: dict = {}  # scope (rack:host:type) -> incident key that fired for it
        self._high = 0
        self._last_entry = None
        # the since-time of carrier_of's first entry, or None when unknown: while it is within track_s there is
        # nothing to prune, and track() skips the call (a Python call per incident saved). Forgotten whenever
        # an entry that may be the first is removed.
        self._head_since = None

    def __len__(self) -> int:
        return len(self.carrier_of)

    def carrier(self, incident_key):
        """The alarm key standing for an open incident, or None."""
        e = self.carrier_of.get(incident_key)
        return None if e is None else e[0]

    def standing_for(self, scope):
        """The alarm key still open for a scope's first incident (a debounced GPU attaches to it), or None."""
        e = self.carrier_of.get(self.scope_head.get(scope))
        if e is not None and e[0] in self.open:
            return e[0]
        return None

    def head(self, inc) -> None:
        """Remember which incident's alarm stands for its scope: later GPUs of that scope attach to it."""
        if inc.scope is None:
            return
        self.scope_head[inc.scope] = inc.key
        if len(self.scope_head) > 2 * len(self.carrier_of) + 1024:
            self._forget_heads()

    def _forget_heads(self) -> None:
        # apart from head(): the comprehension's closure would make every head() call build a cell for self
        self.scope_head = {s: k for s, k in self.scope_head.items() if k in self.carrier_of}

    def track(self, incident_key: str, alarm_key: str, now: float, *, count: bool = True) -> None:
        """count=False: an attached GPU adds no node to the alarm's recovery wording."""
        d = self.carrier_of
        old = d.pop(incident_key, None)
        if old is not None:
            self._head_since = None
            if old[0] != alarm_key:
                self._release(incident_key, old[0])
        # A storm attaches thousands of GPUs to one alarm within a second: consecutive entries for the same alarm
        # share one (alarm key, since) tuple, its first's time (at most 1 s earlier, against track_s of hours), so
        # an entry costs a reference instead of a tuple and a float. Order by time holds: only the last is shared.
        e = self._last_entry
        if e is None or e[0] != alarm_key or not 0.0 <= now - e[1] < 1.0:
            e = self._last_entry = (alarm_key, now)
        d[incident_key] = e
        s = self.open.get(alarm_key)
        if s is None:
            s = self.open[alarm_key] = {}
        if incident_key not in s:
            s[incident_key] = None
            if count:
                self.carried_size[alarm_key] = self.carried_size.get(alarm_key, 0) + 1
        if len(d) > self._high:
            self._high = len(d)
        while len(d) > self.max_tracked:
            k, e = d.popitem(last=False)
            self._head_since = None
            self._release(k, e[0])
        h = self._head_since
        if h is None or not h > now - self.track_s:  # prune()'s own test, inline (a NaN now prunes, as before)
            self.prune(now)

    def recovered(self, incident_key: str):
        """An incident recovered. Returns (carrier, cleared, size): the alarm key that stood for it (None if not
        tracked), whether that alarm now stands for nothing open (send its recovery), and how many nodes it
        stood for."""
        e = self.carrier_of.pop(incident_key, None)
        if e is None:
            return None, False, 0
        self._head_since = None
        carrier = e[0]
        keys = self.open.get(carrier)
        if keys is not None:
            keys.pop(incident_key, None)
            if keys:
                return carrier, False, 0  # the alarm still stands for other incidents
            del self.open[carrier]
        return carrier, True, self.carried_size.pop(carrier, 1)

    def untrack(self, alarm_key: str) -> None:
        """An alarm the terminal will never show (dropped, expired, refused, dead): forget what it stood for."""
        s = self.open.pop(alarm_key, None)
        self.carried_size.pop(alarm_key, None)
        if s:
            for k in s:
                e = self.carrier_of.get(k)
                if e is not None and e[0] == alarm_key:
                    del self.carrier_of[k]
                    self._head_since = None

    def _release(self, incident_key, alarm_key) -> None:
        s = self.open.get(alarm_key)
        if s is not None:
            s.pop(incident_key, None)
            if not s:
                del self.open[alarm_key]
                self.carried_size.pop(alarm_key, None)

    def prune(self, now) -> None:
        """Forget incidents older than track_s: a recovery after that is sent under the incident's own key."""
        d = self.carrier_of
        limit = now - self.track_s
        h = self._head_since
        if h is not None and h > limit:
            return
        self._head_since = None
        n = 0
        while d:
            k = next(iter(d))
            e = d[k]
            if e[1] > limit:
                self._head_since = e[1]
                break
            del d[k]
            self._release(k, e[0])
            n += 1
        if n and self._high > 1024 and len(d) < self._high // 4:
            # dicts keep their table after deletions: rebuild so the memory really returns
            self.carrier_of = OrderedDict(d)
            self.open = {k: dict(v) for k, v in self.open.items()}
            self.scope_head = {s: k for s, k in self.scope_head.items() if k in d}
            self._high = len(d)
