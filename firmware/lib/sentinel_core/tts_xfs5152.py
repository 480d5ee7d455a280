# UART frames for the XFS5152CE speech chip (docs/TTS.md, FACTS.md section 1):
#   FD | lenH | lenL | cmd | [param] | data...
# length counts cmd, param and data; there is no checksum. Text goes in Unicode mode, which on this chip is
# UTF-16 little-endian (the SYN6288 wants big-endian). These functions only build and read bytes; the firmware's
# UART driver writes them and feeds what it reads to parse_reply.

from sentinel_core import tts_reply, tts_text

NAME = "xfs5152"
BIG_ENDIAN = False

SYNTHESIZE = 0x01
STOP_CMD = 0x02
PAUSE_CMD = 0x03
RESUME_CMD = 0x04
STATUS_CMD = 0x21
SLEEP_CMD = 0x88
WAKE_CMD = 0xFF

UNICODE = 3

# Text bytes per synthesis frame (tags included). No source we could check states this chip's limit, so it is
# the SYN6288's 200 bytes (100 UTF-16 units): longer than an alarm needs, and a refused frame (silence in an
# alarm) costs far more than an extra frame boundary. Raise it with max_text after testing a chip.
MAX_TEXT = 200
LIMIT_TEXT = 0xFFFF - 2

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
    extra = 0 if param is None else 1
    length = len(data) + extra + 1
    if length > 0xFFFF:
        raise ValueError("frame data of %d bytes does not fit the length field" % len(data))
    buf = bytearray(length + 3)
    buf[0] = 0xFD
    buf[1] = length >> 8
    buf[2] = length & 0xFF
    buf[3] = cmd
    if param is not None:
        buf[4] = param
    buf[4 + extra:] = data
    return bytes(buf)


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
    if not isinstance(text, str):
        raise TypeError("text must be a str, got %s" % type(text).__name__)
    if not text:
        raise ValueError("nothing to speak: the text is empty")
    if isinstance(max_text, bool) or not isinstance(max_text, int) or max_text < 4 or max_text > LIMIT_TEXT:
        raise ValueError("max_text must be an int 4..%d, got %r" % (LIMIT_TEXT, max_text))
    head = tts_text.encode(tags(volume, speed, tone), False)
    budget = max_text - len(head)
    if budget < 4:
        raise ValueError("max_text %d leaves no room for text after the tags (%d bytes)" % (max_text, len(head)))
    if not raw:
        text = tts_text.plain(text)
    data = tts_text.encode(text, False)
    view = memoryview(data)
    out = []
    for start, end in tts_text.pieces(data, budget, False):
        n = len(head) + end - start
        buf = bytearray(n + 5)
        buf[0] = 0xFD
        buf[1] = (n + 2) >> 8
        buf[2] = (n + 2) & 0xFF
        buf[3] = SYNTHESIZE
        buf[4] = UNICODE
        buf[5:5 + len(head)] = head
        buf[5 + len(head):] = view[start:end]
        out.append(bytes(buf))
    return out


def decode(data):
    """A frame back to {"cmd", "param", "data", "text"}: text is the spoken text of a Unicode synthesis frame,
    else None. ValueError for anything that is not one well-formed frame (header, length)."""
    n = len(data)
    if n < 4 or data[0] != 0xFD:
        raise ValueError("not an XFS5152CE frame: it must start with FD and be at least 4 bytes")
    length = (data[1] << 8) | data[2]
    if length != n - 3:
        raise ValueError("length field says %d, the frame has %d bytes after the header" % (length, n - 3))
    cmd = data[3]
    param = None
    body = bytes(data[4:])
    if cmd == SYNTHESIZE:
        if not body:
            raise ValueError("command %02X needs a parameter byte" % cmd)
        param = body[0]
        body = body[1:]
    text = None
    if cmd == SYNTHESIZE and param == UNICODE:
        text = tts_text.decode(body, False)
    return {"cmd": cmd, "param": param, "data": body, "text": text}


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
        return synthesize(text, self.volume if volume is None else volume, self.speed if speed is None else speed,
                          self.tone, raw, self.max_text)

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
