# The alarm body's schema, and the small bodies of the ACK and heartbeat requests. The same rules run on the board
# and on every sender, so a body the client builds is a body the terminal accepts.
from sentinel_core.alarm import (
    AUDIO_MODES,
    LEVEL_OF_LIGHT,
    LIGHT_MODES,
    NORMAL,
    P0,
    P1,
    PRESETS,
    Alarm,
    is_int,
    level_from_name,
)
from sentinel_core.compat import code_points, const
from sentinel_core.errors import invalid

# 400 bytes of UTF-8 is 133 Chinese characters or 400 ASCII ones: about 30 s of speech, at most four TTS frames
# of 200 bytes of UTF-16 (docs/PROTOCOL.md, "Text and speech").
TEXT_MAX_BYTES = const(400)
ACK_BY_MAX_BYTES = const(32)  # public: the gateway cuts the "by" of its ACKs to it
KEY_MAX_BYTES = const(64)
REPEAT_MAX = const(10)
_DURATION_MAX_S = const(7 * 86400)
_HEARTBEAT_MAX_S = const(3600)

_PRESET_OF_LEVEL = {NORMAL: "normal", P1: "p1", P0: "p0"}


def _text(obj, field, max_bytes, required):
    v = obj.get(field)
    if v is None:
        if required:
            raise invalid(field, "required")
        return None
    if not isinstance(v, str):
        raise invalid(field, "must be a string")
    b = v.encode()
    n = len(b)
    if n > max_bytes:
        raise invalid(field, "%d bytes of UTF-8, at most %d" % (n, max_bytes))
    seen = False  # a character that shows or sounds
    # Code points decoded from the UTF-8 bytes: on MicroPython each character a str yields (iteration, indexing)
    # is interned for good, and a board that iterated alarm texts grew its full pool of names by every new
    # character (every Chinese one), then by a whole new pool (docs/FIRMWARE.md "Memory").
    for o in code_points(b):
        if 32 < o < 127:  # visible ASCII: most of every alarm, one test
            seen = True
            continue
        if o < 32 or 127 <= o <= 159 or o == 0x2028 or o == 0x2029:
            raise invalid(field, "control character U+%04X" % o)
        if 0x202A <= o <= 0x202E or 0x2066 <= o <= 0x2069:
            raise invalid(field, "bidi override U+%04X" % o)
        if not seen and not _invisible(o):
            seen = True
    if not seen:
        raise invalid(field, "must not be empty, blank or only invisible characters")
    return v


def _invisible(o):
    """Whitespace and format characters: shown as nothing (U+200B, U+FEFF, U+3000, variation selectors, ...).
    Written out rather than str.isspace(), which differs between CPython and MicroPython."""
    if o < 0x2000:
        return (
            o == 0x20
            or o == 0xA0
            or o == 0xAD
            or o == 0x34F
            or o == 0x61C
            or 0x115F <= o <= 0x1160
            or o == 0x1680
            or 0x17B4 <= o <= 0x17B5
            or 0x180B <= o <= 0x180F
        )
    if o < 0x3000:
        return o <= 0x200F or 0x202F == o or 0x205F <= o <= 0x206F or o == 0x2800
    return (
        o == 0x3000
        or o == 0x3164
        or 0xFE00 <= o <= 0xFE0F
        or o == 0xFEFF
        or o == 0xFFA0
        or 0x1BCA0 <= o <= 0x1BCA3
        or 0xE0000 <= o <= 0xE0FFF
    )


def parse_color(v):
    """ "#RRGGBB" -> (r, g, b), or ProtocolError 422."""
    if not isinstance(v, str) or len(v) != 7 or not v.startswith("#"):
        raise invalid("color", "must be #RRGGBB")
    for o in v.encode()[1:]:  # bytes: the characters a str yields are interned for good on MicroPython
        if not (48 <= o <= 57 or 65 <= o <= 70 or 97 <= o <= 102):
            raise invalid("color", "must be #RRGGBB")
    rgb = int(v[1:], 16)
    return ((rgb >> 16) & 255, (rgb >> 8) & 255, rgb & 255)


def _choice(obj, field, allowed, default):
    v = obj.get(field, default)
    if v not in allowed:
        raise invalid(field, "must be one of %s" % ", ".join(allowed))
    return v


def _int(obj, field, lo, hi, default):
    v = obj.get(field)
    if v is None:
        return default
    if not is_int(v) or v < lo or v > hi:
        raise invalid(field, "must be a whole number from %d to %d" % (lo, hi))
    return v


def parse_alarm(obj):
    """A decoded JSON body -> Alarm, or ProtocolError 422 naming the first bad field. Unknown fields are ignored.

    Fields a sender leaves out take the values of its level's preset; the level is the explicit one, else the one
    the light pattern implies (the RFC's v1 senders), else P1.
    """
    if not isinstance(obj, dict):
        raise invalid("body", "must be a JSON object")
    text = _text(obj, "text", TEXT_MAX_BYTES, True)
    level = None
    if obj.get("level") is not None:
        level = level_from_name(obj["level"]) if isinstance(obj["level"], str) else None
        if level is None:
            raise invalid("level", "must be one of P0, P1, NORMAL")
    light = obj.get("light_mode")
    if level is None:
        level = LEVEL_OF_LIGHT.get(light, P1) if isinstance(light, str) else P1
    p = PRESETS[_PRESET_OF_LEVEL[level]]
    color = parse_color(obj["color"]) if obj.get("color") is not None else p["color"]
    light = _choice(obj, "light_mode", LIGHT_MODES, p["light_mode"])
    audio = _choice(obj, "audio_mode", AUDIO_MODES, p["audio_mode"])
    repeat = _int(obj, "repeat_times", 1, REPEAT_MAX, p["repeat_times"])
    key = _text(obj, "key", KEY_MAX_BYTES, False)
    mid = _text(obj, "id", KEY_MAX_BYTES, False)
    duration = _int(obj, "duration", 1, _DURATION_MAX_S, None)
    return Alarm(text, color, light, audio, repeat, level, key, mid, duration)


def parse_ack(obj):
    """{"key": optional incident key, "long": optional bool (true: clear, as a long press), "by": optional short
    text naming who acknowledged (a gateway's "group ACK", "cli"), shown beside the alarm}."""
    if not isinstance(obj, dict):
        raise invalid("body", "must be a JSON object")
    key = _text(obj, "key", KEY_MAX_BYTES, False)
    long_press = obj.get("long", False)
    if long_press is not True and long_press is not False:
        raise invalid("long", "must be true or false")
    return {
        "key": key,
        "long": long_press,
        "id": _text(obj, "id", KEY_MAX_BYTES, False),
        "by": _text(obj, "by", ACK_BY_MAX_BYTES, False),
    }


def parse_heartbeat(obj):
    """{"interval": optional seconds until the next heartbeat is due; 0 disarms the dead-man's switch}."""
    if not isinstance(obj, dict):
        raise invalid("body", "must be a JSON object")
    return {"interval": _int(obj, "interval", 0, _HEARTBEAT_MAX_S, None), "id": _text(obj, "id", KEY_MAX_BYTES, False)}


def parse_unmute(obj):
    """{"key": optional incident key (only its acknowledgement ends), "id": optional}: the way out of an ACK."""
    if not isinstance(obj, dict):
        raise invalid("body", "must be a JSON object")
    return {"key": _text(obj, "key", KEY_MAX_BYTES, False), "id": _text(obj, "id", KEY_MAX_BYTES, False)}
