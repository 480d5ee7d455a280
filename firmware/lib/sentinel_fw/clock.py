# Wall-clock time for the terminal: Unix seconds whatever the port's epoch, set from NTP in UTC and resynced
# periodically. Local time (quiet hours) is the state machine's business: it gets the UTC offset from the config.
import time

from sentinel_core import epoch
from sentinel_core.compat import const
from sentinel_fw import ticks

RETRY_MS = const(30000)  # after a failed sync: the network may just be coming up


class Clock:
    def __init__(self, ntp=None, host="pool.ntp.org", resync_s=3600, time_fn=None):
        self._ntp = ntp
        if ntp is not None and host:
            ntp.host = host
        self._time = time_fn or time.time
        self._offset = epoch.offset_for(time.gmtime(0)[0])
        self.resync_ms = resync_s * 1000
        self.synced = False
        self.last_error = None
        self.syncs = 0
        self._next = None  # ticks of the next attempt; None: at once

    def now(self):
        """Unix seconds (int)."""
        return int(self._time()) + self._offset

    def due(self, t_ms):
        return self._next is None or ticks.diff(t_ms, self._next) >= 0

    def sync(self, t_ms):
        """One NTP attempt (blocks for at most ntptime's own timeout, ~1 s). True when the clock was set."""
        if self._ntp is None:
            return False
        try:
            self._ntp.settime()
        except Exception as e:  # noqa: BLE001 - OSError (timeout, DNS) or an IndexError from a short reply
            self.last_error = "%s: %s" % (type(e).__name__, e)
            self._next = ticks.add(t_ms, RETRY_MS)
            return False
        self.synced = True
        self.syncs += 1
        self.last_error = None
        self._next = ticks.add(t_ms, self.resync_ms)
        return True
