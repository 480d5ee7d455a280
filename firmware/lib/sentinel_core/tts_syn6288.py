# UART frames for the SYN6288 speech chip (docs/TTS.md, FACTS.md section 1):
#   FD | lenH | lenL | cmd | [param] | data... | XOR
# length counts cmd, param, data and the checksum; the checksum is the XOR of every byte before it.
# Text goes in Unicode mode (UTF-16 big-endian): MicroPython has no GB2312 codec. These functions only build and
# read bytes; the firmware's UART driver writes them and feeds what it reads to parse_reply.

from sentinel_core import tts_frame, tts_reply, tts_text
from sentinel_core.compat import const

NAME = "syn6288"
BIG_ENDIAN = True

_SYNTHESIZE = const(0x01)
_STOP_CMD = const(0x02)
_PAUSE_CMD = const(0x03)
_RESUME_CMD = const(0x04)
_STATUS_CMD = const(0x21)
_BAUD_CMD = const(0x31)
_POWER_DOWN_CMD = const(0x88)

_UNICODE = const(3)  # param bits 2..0; bits 7..3 pick a background music (0: none)

# Text bytes per synthesis frame (tags included): the limit the drivers enforce. 100 UTF-16 units.
MAX_TEXT = const(200)
# What the 16-bit length field can still describe, for a max_text raised after testing a chip.
_LIMIT_TEXT = const(0xFFFF - 3)

VOLUME = (0, 16)  # [v..]
SPEED = (0, 5)  # [t..]
MUSIC = (0, 15)  # param bits 7..3
MUSIC_VOLUME = (0, 16)  # [m..]

BAUD_RATES = (9600, 19200, 38400)

STOP = b"\xfd\x00\x02\x02\xfd"
PAUSE = b"\xfd\x00\x02\x03\xfc"
RESUME = b"\xfd\x00\x02\x04\xfb"
STATUS = b"\xfd\x00\x02\x21\xde"
POWER_DOWN = b"\xfd\x00\x02\x88\x77"

parse_reply = tts_reply.parse_reply


def frame(cmd, param=None, data=b""):
    """One frame: header, cmd, the optional param byte, data, checksum."""
    from sentinel_core import tts_command

    return tts_command.build(cmd, param, data, True)


def set_baud(rate):
    """The frame that moves the chip's UART to rate (it answers at the old rate, then switches)."""
    from sentinel_core import tts_command

    return tts_command.choice(_BAUD_CMD, BAUD_RATES, rate, "baud rate", True)


def tags(volume=None, speed=None, music_volume=None):
    """The inline tags that start every frame: only those asked for, each range-checked."""
    s = ""
    if volume is not None:
        s += tts_text.tag("v", volume, VOLUME[0], VOLUME[1], "volume")
    if speed is not None:
        s += tts_text.tag("t", speed, SPEED[0], SPEED[1], "speed")
    if music_volume is not None:
        s += tts_text.tag("m", music_volume, MUSIC_VOLUME[0], MUSIC_VOLUME[1], "music volume")
    return s


def synthesize(text, volume=None, speed=None, music=0, music_volume=None, raw=False, max_text=MAX_TEXT):
    """The frames that speak text, in order: a list of bytes, each at most max_text bytes of text (tts_frame.speak
    says how long text is cut and why brackets are neutralised)."""
    tts_frame.check_int(music, MUSIC[0], MUSIC[1], "background music")
    return tts_frame.speak(
        _SYNTHESIZE,
        (music << 3) | _UNICODE,
        tags(volume, speed, music_volume),
        text,
        raw,
        max_text,
        _LIMIT_TEXT,
        True,
        True,
    )


def decode(data):
    """A frame back to {"cmd", "param", "data", "text"}: text is the spoken text of a Unicode synthesis frame,
    else None. ValueError for anything that is not one well-formed frame (header, length, checksum)."""
    from sentinel_core import tts_decode

    return tts_decode.decode(data, True, "SYN6288", (_SYNTHESIZE, _BAUD_CMD), 7, _UNICODE, True)


class Encoder:
    """A SYN6288 configured once (volume, speed, background music); builds frames, owns no UART.

    The same interface as tts_xfs5152.Encoder: synthesize(text, volume=None, speed=None, raw=False) -> list of
    bytes; stop(), pause(), resume(), status(), sleep() -> bytes; parse_reply(data) -> tts_reply.Reply.
    """

    name = NAME
    volume_range = VOLUME
    speed_range = SPEED

    def __init__(self, volume=None, speed=None, music=0, music_volume=None, max_text=MAX_TEXT):
        # Build once to check every setting now, at configuration time, not at the first alarm.
        synthesize("a", volume, speed, music, music_volume, True, max_text)
        self.volume = volume
        self.speed = speed
        self.music = music
        self.music_volume = music_volume
        self.max_text = max_text

    def synthesize(self, text, volume=None, speed=None, raw=False):
        return synthesize(
            text,
            self.volume if volume is None else volume,
            self.speed if speed is None else speed,
            self.music,
            self.music_volume,
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
        return POWER_DOWN

    def parse_reply(self, data):
        return tts_reply.parse_reply(data)
