"""A bounded memory of resolved incidents, so a stale firing that arrives after its resolve is dropped.

An Alertmanager HA pair is at-least-once by design: the second instance may send a firing it held back for its
peer wait after the first has already sent the resolve, with the same fingerprint and startsAt (the incident's
ident). Without this memory the gateway would take it as news and the terminal would go red again. Entries are
held `hold_s` seconds (at least the Alertmanager peer timeout plus group_interval; docs/GATEWAY.md) and at most
`max_keys` of them (the oldest is forgotten first). A firing with a new startsAt is a new incident and goes through.
"""

from __future__ import annotations

from collections import OrderedDict


class ResolvedMemory:
    def __init__(self, *, hold_s: float = 900.0, max_keys: int = 100_000):
        self.hold_s = float(hold_s)
        self.max_keys = int(max_keys)
        self._at: OrderedDict[str, float] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._at)

    def resolved(self, ident: str, now: float) -> None:
        self._prune(now)
        self._at.pop(ident, None)
        self._at[ident] = now
        while len(self._at) > self.max_keys:
            self._at.popitem(last=False)
            self.evicted += 1

    def is_stale(self, ident: str, now: float) -> bool:
        """True: this firing's incident was resolved less than hold_s ago."""
        if not self._at:
            return False
        self._prune(now)
        return ident in self._at

    def prune(self, now: float) -> int:
        """Forget the incidents resolved hold_s ago or longer; returns how many."""
        n = len(self._at)
        self._prune(now)
        n -= len(self._at)
        if n > 1024 and len(self._at) < n // 4:
            self._at = OrderedDict(self._at)  # a dict keeps its table after deletions: rebuilt, the memory returns
        return n

    def _prune(self, now: float) -> None:
        d = self._at
        limit = now - self.hold_s
        while d:
            k = next(iter(d))
            if d[k] > limit:
                break
            del d[k]
