"""The per-terminal rate limit: token buckets, so a storm cannot make a room's terminal talk without pause, and a
storm of P1s and summaries cannot make a P0 wait (docs/GATEWAY.md, "Rate limit")."""

from __future__ import annotations

from sentinel_core.alarm import P0


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


class TerminalRate:
    """One terminal's limit, by severity: P0s draw on a bucket of their own (`p0`), everything else on `rest`.

    A P0 never waits for a token a P1 or a summary spent, yet a P0 flood is bounded by its own bucket (the same
    burst and interval). A P0 also spends a `rest` token when one is there, so P1s yield to a P0 storm: whatever
    the mix, the terminal gets at most 2 x burst alarms at once and 2 per interval after (one per bucket).
    """

    def __init__(self, burst: int = 3, interval: float = 5.0):
        self.p0 = RateLimit(burst, interval)
        self.rest = RateLimit(burst, interval)

    def wait(self, mono: float, level: int) -> float:
        """Seconds until an alarm of this level may be sent (0: now)."""
        return (self.p0 if level >= P0 else self.rest).wait(mono)

    def take(self, mono: float, level: int) -> None:
        if level >= P0:
            self.p0.take(mono)
        self.rest.take(mono)  # floored at 0: a P0 never owes P1s more than the tokens they had
