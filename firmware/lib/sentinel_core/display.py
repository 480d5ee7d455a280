# What the LEDs show: the state machine's answer and the renderer's input. Plain attributes so the renderer reads
# them without calls; the health patterns carry their own colour so that a dead alarm path never looks like the
# quiet green of a healthy cluster.
from sentinel_core.alarm import LEVEL_NAMES

IDLE_COLOR = (0, 40, 0)
OFF_COLOR = (0, 0, 0)

# A Display's pattern is "off", an alarm's light mode (alarm.LIGHT_MODES), "idle", or a health pattern below.
# (check, pattern, color, label) in priority order: the first problem that holds owns an idle display. The order puts
# first what most likely means "alarms cannot reach this box". The health patterns' names are spelled here alone: a
# name longer than 10 characters is a separate string object wherever a .mpy spells it, so the renderer and the icons
# key their tables through these rows.
HEALTH_PATTERNS = (
    ("config", "config_error", (255, 0, 255), "CONFIG"),
    ("network", "health_network", (0, 0, 255), "NO NET"),
    ("heartbeat", "health_heartbeat", (160, 0, 255), "NO HEARTBEAT"),
    ("clock", "health_clock", (0, 160, 255), "NO CLOCK"),
    ("speech", "health_speech", (255, 255, 0), "NO VOICE"),
)


def ascii_label(s, limit):
    """s cut to limit characters if it is printable ASCII (the matrix font has nothing else), else None."""
    if not isinstance(s, str) or not s:
        return None
    for o in s.encode("utf-8", "surrogatepass"):  # bytes: a str's characters are interned for good on MicroPython
        if o < 32 or o > 126:
            return None
    if len(s) > limit:
        s = s[:limit]
    return s


class Display:
    def __init__(self, pattern="idle", color=IDLE_COLOR, level=None, text=None, night=False, key=None):
        self.pattern = pattern
        self.color = color
        self.level = level
        self.text = text
        self.night = night
        self.key = key

    def __eq__(self, other):
        return (
            isinstance(other, Display)
            and self.pattern == other.pattern
            and tuple(self.color) == tuple(other.color)
            and self.level == other.level
            and self.text == other.text
            and self.night == other.night
            and self.key == other.key
        )

    def __ne__(self, other):
        return not self.__eq__(other)

    def to_dict(self):
        return {
            "pattern": self.pattern,
            "color": "#%02X%02X%02X" % (self.color[0], self.color[1], self.color[2]),
            "level": None if self.level is None else LEVEL_NAMES[self.level],
            "text": self.text,
            "night": self.night,
            "key": self.key,
        }

    def __repr__(self):
        return "Display(%s %r level=%r text=%r night=%r)" % (
            self.pattern,
            self.color,
            self.level,
            self.text,
            self.night,
        )
