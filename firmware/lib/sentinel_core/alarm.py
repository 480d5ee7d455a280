# The alarm model and the RFC's presets. An Alarm is what the terminal acts on once a request has been
# verified and validated; senders build the same object before it is encoded on the wire.

P0 = 2
P1 = 1
NORMAL = 0
LEVEL_NAMES = ("NORMAL", "P1", "P0")

LIGHT_MODES = ("solid", "flash", "breath")
AUDIO_MODES = ("once", "cycle", "none")
# A v1 sender (the RFC's gateway) sends no level: it is inferred from the light pattern it chose.
LEVEL_OF_LIGHT = {"flash": P0, "breath": P1, "solid": NORMAL}

# The RFC: NORMAL shows green for 10 s.
NORMAL_DURATION_S = 10


def level_from_name(name):
    """'P0' -> 2; None for a name that is not a level."""
    for i in range(3):
        if LEVEL_NAMES[i] == name:
            return i
    return None


def level_name(level):
    return LEVEL_NAMES[level]


# The presets' colours, by level. An alarm of one of these colours holds this very tuple (shared_color).
_COLORS = {NORMAL: (0, 255, 0), P1: (255, 165, 0), P0: (255, 0, 0)}


def shared_color(c):
    """c, or the preset's own tuple when c is equal to one (as ints): most alarms wear a preset's colour, and the
    board then holds one tuple for all of them instead of one each (32 B per alarm)."""
    if type(c) is tuple and len(c) == 3 and type(c[0]) is int and type(c[1]) is int and type(c[2]) is int:
        for level in _COLORS:
            p = _COLORS[level]
            if p == c:
                return p
    return c


def color_hex(rgb):
    return "#%02X%02X%02X" % rgb


def is_int(v):
    """An int and not a bool. The checks of the alarm body, the config, the state file and the terminal's inputs
    share it (here, where all of them import it without a circle)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v):
    """An int or a float, not a bool."""
    return (isinstance(v, int) or isinstance(v, float)) and not isinstance(v, bool)


def incident_key(alarm):
    """The incident an alarm belongs to: its key, or for a v1 sender that sends none, its text."""
    return alarm.key if alarm.key is not None else alarm.text


def check_alarm(alarm):
    """Raise ValueError naming the first bad field."""
    for name in ("text", "color", "light_mode", "audio_mode", "repeat_times", "level", "key", "id", "duration"):
        if not hasattr(alarm, name):
            raise ValueError("alarm has no %s" % name)
    if not isinstance(alarm.text, str) or not alarm.text:
        raise ValueError("alarm text must be a non-empty string")
    if alarm.level not in (P0, P1, NORMAL) or isinstance(alarm.level, bool):
        raise ValueError("alarm level must be 0, 1 or 2")
    c = alarm.color
    if not isinstance(c, (tuple, list)) or len(c) != 3:
        raise ValueError("alarm color must be (r, g, b)")
    for x in c:
        if not is_int(x) or x < 0 or x > 255:
            raise ValueError("alarm color components must be ints 0..255")
    if alarm.light_mode not in LIGHT_MODES:
        raise ValueError("alarm light_mode must be one of solid, flash, breath")
    if alarm.audio_mode not in AUDIO_MODES:
        raise ValueError("alarm audio_mode must be one of once, cycle, none")
    if not is_int(alarm.repeat_times) or alarm.repeat_times < 1:
        raise ValueError("alarm repeat_times must be an int >= 1")
    if alarm.key is not None and (not isinstance(alarm.key, str) or not alarm.key):
        raise ValueError("alarm key must be a non-empty string or None")
    if alarm.duration is not None and (not is_num(alarm.duration) or alarm.duration <= 0):
        raise ValueError("alarm duration must be a number of seconds > 0 or None")


def check_now(now):
    """ValueError unless now is Unix seconds."""
    if not is_num(now):
        raise ValueError("now must be Unix seconds (int or float)")


class Active:
    """An alarm the terminal holds: when it came, when it goes (None: until cleared), its arrival order."""

    # Four attributes keep an instance's member table at four slots (48 B on the board, which holds up to
    # max_active of these): the incident key is read off the alarm, and the label is the terminal's, for the
    # shown alarm only.
    def __init__(self, alarm, since, expires, order):
        self.alarm = alarm
        self.since = since
        self.expires = expires
        self.order = order

    @property
    def key(self):
        return incident_key(self.alarm)


class Alarm:
    """One alarm. color is an (r, g, b) tuple of ints 0..255.

    key names the incident (a NORMAL with the same key clears it; None: no incident / all clear for a NORMAL).
    id is the sender's message id for idempotent retries. duration is seconds on display: for NORMAL how long the
    green shows (default 10), for P0/P1 an optional expiry (None: until cleared).
    """

    # The constructor's defaults (the RFC's P0) answer as class attributes: a field left at its default is not
    # stored in the instance, whose member table then stays a size class or two smaller (16 B per two fields on the
    # board, which holds up to max_active alarms). Reading and assigning the fields work as for any attribute.
    color = _COLORS[P0]
    light_mode = "flash"
    audio_mode = "cycle"
    repeat_times = 3
    key = None
    id = None
    duration = None

    def __init__(
        self,
        text,
        color=(255, 0, 0),
        light_mode="flash",
        audio_mode="cycle",
        repeat_times=3,
        level=None,
        key=None,
        id=None,
        duration=None,
    ):
        self.text = text
        color = shared_color(color)
        if color is not _COLORS[P0]:
            self.color = color
        if light_mode != "flash":
            self.light_mode = light_mode
        if audio_mode != "cycle":
            self.audio_mode = audio_mode
        if repeat_times != 3 or type(repeat_times) is not int:
            self.repeat_times = repeat_times
        self.level = LEVEL_OF_LIGHT.get(light_mode, NORMAL) if level is None else level
        if key is not None:
            self.key = key
        if id is not None:
            self.id = id
        if duration is None and self.level == NORMAL:
            duration = NORMAL_DURATION_S
        if duration is not None:
            self.duration = duration

    def to_wire(self, v1_only=False):
        """The JSON object a sender puts on the wire. v1_only: exactly the RFC's five fields."""
        d = {
            "text": self.text,
            "color": color_hex(self.color),
            "light_mode": self.light_mode,
            "audio_mode": self.audio_mode,
            "repeat_times": self.repeat_times,
        }
        if not v1_only:
            d["level"] = LEVEL_NAMES[self.level]
            if self.key is not None:
                d["key"] = self.key
            if self.id is not None:
                d["id"] = self.id
            if self.duration is not None:
                d["duration"] = self.duration
        return d

    def __eq__(self, other):
        return isinstance(other, Alarm) and self.to_wire() == other.to_wire()

    def __repr__(self):
        return "Alarm(%s %s %r key=%r)" % (LEVEL_NAMES[self.level], self.light_mode, self.text, self.key)


# The RFC's table (section 4.1). text=None: the caller supplies the words.
PRESETS = {
    "p0": {"color": _COLORS[P0], "light_mode": "flash", "audio_mode": "cycle", "repeat_times": 3, "level": P0},
    "p1": {"color": _COLORS[P1], "light_mode": "breath", "audio_mode": "once", "repeat_times": 1, "level": P1},
    "normal": {
        "color": _COLORS[NORMAL],
        "light_mode": "solid",
        "audio_mode": "once",
        "repeat_times": 1,
        "level": NORMAL,
        "duration": NORMAL_DURATION_S,
    },
}
RECOVERED_TEXT = "训练集群已恢复正常"


def preset(name, text=None, key=None, id=None, duration=None):
    """Build an alarm from a preset: 'p0' (NCCL deadlock / fatal XID), 'p1' (NVLink / optics), 'normal' (recovered)."""
    p = PRESETS[name]
    if text is None:
        text = RECOVERED_TEXT if name == "normal" else None
    if text is None:
        raise ValueError("preset %s needs a text" % name)
    if duration is None:
        duration = p.get("duration")
    return Alarm(text, p["color"], p["light_mode"], p["audio_mode"], p["repeat_times"], p["level"], key, id, duration)
