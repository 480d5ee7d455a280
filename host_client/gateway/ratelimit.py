"""The per-terminal rate limit: a token bucket, so a storm cannot make a room's terminal talk without pause."""

from __future__ import annotations


class RateLimit:
    """Token bucket: `burst` alarms at once, then one per `interval` seconds. Time is monotonic seconds, passed in."""

    def __init__(self, burst: int = 3, interval: float = 5.0):
        self.burst = max(1, int(burst))
        self.interval = max(0.0, float(interval))
        self.tokens = float(self.burst)
        self.t = None

    def wait(self, mono: float) -> float:
        """Seconds until a send is allowed (0: now)."""
        self._refill(mono)
        if self.tokens >= 1.0 or self.interval == 0.0:
            return 0.0
        return (1.0 - self.tokens) * self.interval

    def take(self, mono: float) -> None:
        self._refill(mono)
        if self.interval:
            self.tokens = max(0.0, self.tokens - 1.0)

    def _refill(self, mono: float) -> None:
        if self.t is not None and self.interval:
            self.tokens = min(float(self.burst), self.tokens + (mono - self.t) / self.interval)
        self.t = mono
