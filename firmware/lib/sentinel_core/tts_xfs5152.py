# UART frames for the XFS5152CE speech chip (docs/TTS.md, FACTS.md section 1):
#   FD | lenH | lenL | cmd | [param] | data...
# length counts cmd, param and data; there is no checksum. Text goes in Unicode mode, which on this chip is
# UTF-16 little-endian (the SYN6288 wants big-endian). These functions only build and read bytes; the firmware's
# UART driver writes them and feeds what it reads to parse_reply.

from sentinel_core import tts_frame, tts_reply, tts_text
from sentinel_core.compat import const

NAME = "xfs5152"
BIG_ENDIAN = False

_SYNTHESIZE = const(0x01)
_STOP_CMD = const(0x02)
_PAUSE_CMD = const(0x03)
_RESUME_CMD = const(0x04)
_STATUS_CMD = const(0x21)
_SLEEP_CMD = const(0x88)
_WAKE_CMD = const(0xFF)

_UNICODE = const(3)

# Text bytes per synthesis frame (tags included). No source we could check states this chip's limit, so it is
# the SYN6288's 200 bytes (100 UTF-16 units): longer than an alarm needs, and a refused frame (silence in an
# alarm) costs far more than an extra frame boundary. Raise it with max_text after testing a chip.
MAX_TEXT = const(200)
_LIMIT_TEXT = const(0xFFFF - 2)

VOLUME = (0, 10)  # [v..]
SPEED = (0, 10)  # [s..]
TONE = (0, 10)  # [t..]

STOP = b"\xfd\x00\x01\x02"
PAUSE = b"\xfd\x00\x01\x03"
RESUME = b"\xfd\x00\x01\x04"
STATUS = b"\xfd\x00\x01\x21"
SLEEP = b"\xfd\x00\x01\x88"
WAKE = b"\xfd\x00\x01\xff"

parse_reply = tts_reply.parse_reply


def frame(cmd, param=None, data=b""):
    """One frame: header, cmd, the optional param byte, data."""
    from sentinel_core import tts_command

    return tts_command.build(cmd, param, data, False)


def tags(volume=None, speed=None, tone=None):
    """The inline tags that start every frame: only those asked for, each range-checked."""
    s = ""
    if volume is not None:
        s += tts_text.tag("v", volume, VOLUME[0], VOLUME[1], "volume")
    if speed is not None:
        s += tts_text.tag("s", speed, SPEED[0], SPEED[1], "speed")
    if tone is not None:
        s += tts_text.tag("t", tone, TONE[0], TONE[1], "tone")
    return s


def synthesize(text, volume=None, speed=None, tone=None, raw=False, max_text=MAX_TEXT):
    """The frames that speak text, in order: a list of bytes, each at most max_text bytes of text.

    Every frame starts with the same tags. Unless raw, square brackets become parentheses (tts_text.plain).
    Long text is cut by the rule in tts_text.cut. ValueError for empty text or a value out of range.
    """
    return tts_frame.speak(
        _SYNTHESIZE, _UNICODE, tags(volume, speed, tone), text, raw, max_text, _LIMIT_TEXT, False, False
    )


def decode(data):
    """A frame back to {"cmd", "param", "data", "text"}: text is the spoken text of a Unicode synthesis frame,
    else None. ValueError for anything that is not one well-formed frame (header, length)."""
    from sentinel_core import tts_decode

    return tts_decode.decode(data, False, "XFS5152CE", (_SYNTHESIZE,), 0xFF, _UNICODE, False)


class Encoder:
    """An XFS5152CE configured once (volume, speed, tone); builds frames, owns no UART.

    The same interface as tts_syn6288.Encoder: synthesize(text, volume=None, speed=None, raw=False) -> list of
    bytes; stop(), pause(), resume(), status(), sleep() -> bytes; parse_reply(data) -> tts_reply.Reply.
    Also wake() -> bytes.
    """

    name = NAME
    volume_range = VOLUME
    speed_range = SPEED

    def __init__(self, volume=None, speed=None, tone=None, max_text=MAX_TEXT):
        # Build once to check every setting now, at configuration time, not at the first alarm.
        synthesize("a", volume, speed, tone, True, max_text)
        self.volume = volume
        self.speed = speed
        self.tone = tone
        self.max_text = max_text

    def synthesize(self, text, volume=None, speed=None, raw=False):
        return synthesize(
            text,
            self.volume if volume is None else volume,
            self.speed if speed is None else speed,
            self.tone,
            raw,
            self.max_text,
        )

    def stop(self):
        return STOP

    def pause(self):
        return PAUSE

    def resume(self):
        return RESUME

    def status(self):
        return STATUS

    def sleep(self):
        return SLEEP

    def wake(self):
        return WAKE

    def parse_reply(self, data):
        return tts_reply.parse_reply(data)
