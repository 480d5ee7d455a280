# The hardware watchdog, fed only while every task of the main loop has reported progress recently: a task that
# hangs or dies stops the feeding and the board resets. machine.WDT cannot be stopped once started, so it is
# created only when the loop starts (not at import, not in the config-error loop that waits for a human).
from sentinel_fw import ticks


class Watchdog:
    def __init__(self, timeout_ms, stale_ms=None, wdt_factory=None):
        self.timeout_ms = timeout_ms
        self.stale_ms = stale_ms if stale_ms is not None else timeout_ms // 2
        self._factory = wdt_factory
        self._wdt = None
        self._beats = {}
        self.feeds = 0
        self.starved = 0  # checks that found a stale task

    def expect(self, name, t_ms):
        """Register a task that must beat."""
        self._beats[name] = t_ms

    def beat(self, name, t_ms):
        self._beats[name] = t_ms

    def stale(self, t_ms):
        """Names of the tasks that have not beaten within stale_ms."""
        out = []
        for name in self._beats:
            if ticks.diff(t_ms, self._beats[name]) > self.stale_ms:
                out.append(name)
        return out

    def start(self):
        if self._wdt is None:
            if self._factory is None:
                from machine import WDT

                self._wdt = WDT(timeout=self.timeout_ms)
            else:
                self._wdt = self._factory(self.timeout_ms)

    def check(self, t_ms):
        """Feed when every task is alive; returns True when fed."""
        if self.stale(t_ms):
            self.starved += 1
            return False
        self.start()
        self._feed()
        self.feeds += 1
        return True

    def _feed(self):
        self._wdt.feed()
