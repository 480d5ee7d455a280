# Quiet hours in local time. MicroPython has no time zones, so local time is UTC plus a fixed offset in minutes;
# the window is [start, end) in minutes of the local day and may cross midnight.

from sentinel_core.compat import const

_DAY_S = const(86400)
_DAY_MIN = const(1440)


def parse_hhmm(s):
    """'22:00' -> 1320 (minutes after midnight); ValueError for anything else."""
    if not isinstance(s, str) or len(s) != 5 or s[2] != ":":
        raise ValueError("expected HH:MM, got %r" % (s,))
    hh = s[0:2]
    mm = s[3:5]
    if not (hh.isdigit() and mm.isdigit()):
        raise ValueError("expected HH:MM, got %r" % (s,))
    h = int(hh)
    m = int(mm)
    if h > 23 or m > 59:
        raise ValueError("expected HH:MM, got %r" % (s,))
    return h * 60 + m


def format_hhmm(minutes):
    return "%02d:%02d" % (minutes // 60, minutes % 60)


def local_minute(now, utc_offset_min):
    """Minute of the local day (0..1439) at Unix time now."""
    # Python's % is a floor modulo on both interpreters, so times before the epoch or negative offsets are right.
    return (int(now) // 60 + utc_offset_min) % _DAY_MIN


class QuietHours:
    def __init__(self, start="22:00", end="08:00", utc_offset_min=0, enabled=True):
        if (
            not isinstance(utc_offset_min, int)
            or isinstance(utc_offset_min, bool)
            or utc_offset_min < -720
            or utc_offset_min > 840
        ):
            raise ValueError("utc_offset_min must be an int in -720..840")
        self.start = parse_hhmm(start)
        self.end = parse_hhmm(end)
        self.utc_offset_min = utc_offset_min
        self.enabled = bool(enabled)

    def contains(self, minute):
        """Is local minute-of-day inside the window? start == end is an empty window."""
        s = self.start
        e = self.end
        if s == e:
            return False
        if s < e:
            return s <= minute < e
        return minute >= s or minute < e

    def active(self, now):
        return self.enabled and self.contains(local_minute(now, self.utc_offset_min))

    def local_time(self, now):
        return format_hhmm(local_minute(now, self.utc_offset_min))
