"""The RFC's debounce window, with memory that stays bounded.

Semantics are the RFC's: a key that fired less than `window` seconds ago is suppressed, and a suppressed event does
not extend the window (the RFC stores the time only when it alarms). The RFC's sync.Map only ever grows; here
entries are kept in firing order so expired ones fall off the front in amortised O(1), and a hard cap evicts the
oldest entry (counted) if a storm of distinct keys outruns the window.
"""

from __future__ import annotations

from collections import OrderedDict


class Debouncer:
    def __init__(self, window: float = 120.0, max_keys: int = 200_000):
        if window < 0:
            raise ValueError("debounce window must be >= 0 seconds")
        if max_keys < 1:
            raise ValueError("debounce max_keys must be >= 1")
        self.window = float(window)
        self.max_keys = int(max_keys)
        self._last: OrderedDict[str, float] = OrderedDict()
        self._high = 0
        # the time of the oldest entry (the first in _last), or None when unknown or empty: while now is within
        # its window there is nothing to prune, and fire() skips the call (a Python call per event saved)
        self._oldest = None
        self.suppressed = 0
        self.evicted = 0
        self.pruned = 0

    def __len__(self) -> int:
        return len(self._last)

    def fire(self, key: str, now: float) -> bool:
        """True: alarm (and remember now); False: suppressed, within the window of the last alarm for key."""
        oldest = self._oldest
        if oldest is None or not now - oldest < self.window:  # (written so a NaN now prunes, as before)
            self.prune(now)
        last = self._last.get(key)
        if last is not None and now - last < self.window:
            self.suppressed += 1
            return False
        if last is not None:
            del self._last[key]
            self._oldest = None  # it may have been the oldest
        self._last[key] = now
        if len(self._last) > self.max_keys:
            self._last.popitem(last=False)
            self._oldest = None
            self.evicted += 1
        if len(self._last) > self._high:
            self._high = len(self._last)
        return True

    def forget(self, key: str) -> None:
        """A recovery clears the key: the same fault coming back is news, not a repeat."""
        if self._last.pop(key, None) is not None:
            self._oldest = None

    def prune(self, now: float) -> int:
        """Drop every entry whose window has passed; returns how many."""
        d = self._last
        n = 0
        window = self.window
        self._oldest = None
        while d:
            k = next(iter(d))
            t = d[k]
            if now - t < window:
                self._oldest = t
                break
            del d[k]
            n += 1
        if n:
            self.pruned += n
            # A dict keeps its table after deletions: rebuild once it is mostly empty so memory returns.
            if self._high > 1024 and len(d) < self._high // 4:
                self._last = OrderedDict(d)
                self._high = len(d)
        return n
