# The terminal's own health: flags the shells report, and the gateway heartbeat as a dead-man's switch. A silent
# gateway and a quiet cluster look the same from the terminal unless the gateway promises a beat and we count.

NAMES = ("clock", "network", "speech", "config")


class Health:
    def __init__(self, misses=2.5):
        # The clock starts unsynced: until a shell says otherwise the terminal must not trust local time.
        self.clock = False
        self.network = True
        self.speech = True
        self.config = True
        self.config_detail = None
        self.misses = misses
        self.interval = None  # seconds announced by the gateway; None: switch disarmed
        self.last_beat = None  # now of the last heartbeat (or of arming after a restore)

    def set(self, name, ok):
        """Returns True when the flag changed."""
        if name not in NAMES:
            raise ValueError("health name must be one of clock, network, speech, config; got %r" % (name,))
        ok = bool(ok)
        old = getattr(self, name)
        setattr(self, name, ok)
        return old != ok

    def beat(self, interval, now):
        """A heartbeat; returns True when the announced interval changed."""
        if interval is not None:
            if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval < 0:
                raise ValueError("heartbeat interval must be a number of seconds >= 0 or None")
        self.last_beat = now
        if interval is None:
            return False
        new = int(interval) if interval > 0 else None
        changed = new != self.interval
        self.interval = new
        return changed

    def heartbeat_ok(self, now):
        if self.interval is None:
            return True
        return now - self.last_beat <= self.interval * self.misses

    def problems(self, now):
        """Names of the problems that hold, in the display's priority order."""
        out = []
        if not self.config:
            out.append("config")
        if not self.network:
            out.append("network")
        if not self.heartbeat_ok(now):
            out.append("heartbeat")
        if not self.clock:
            out.append("clock")
        if not self.speech:
            out.append("speech")
        return out

    def shift(self, delta):
        if self.last_beat is not None:
            self.last_beat += delta
