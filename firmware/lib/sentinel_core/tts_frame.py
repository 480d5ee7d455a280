# The frame both speech chips share: FD | lenH | lenL | cmd | [param] | data... | [XOR]. The SYN6288 ends every
# frame with the XOR of all bytes before it and counts that byte in the length; the XFS5152CE has no checksum.
# The chip modules hold what differs (byte order, tags, commands); this holds how a synthesis frame is laid out.
# Any other command frame is built by tts_command, reading one back by tts_decode: the board loads neither.
from sentinel_core import tts_text
from sentinel_core.compat import const

_HEADER = const(0xFD)


def xor(buf, n):
    x = 0
    for i in range(n):
        x ^= buf[i]
    return x


def check_int(value, low, high, what):
    if isinstance(value, bool) or not isinstance(value, int) or value < low or value > high:
        raise ValueError("%s must be an int %d..%d, got %r" % (what, low, high, value))


def speak(cmd, param, tags_text, text, raw, max_text, limit, big_endian, checksum):
    """The synthesis frames for text, in order, each holding the tags and at most max_text bytes in all.

    Every frame starts with the same tags, so each one speaks alike whatever the chip did before. Unless raw, the
    text's square brackets become parentheses (tts_text.plain): text from the wire cannot steer the chip.
    Text longer than one frame is cut by the rule in tts_text.cut: on code point boundaries, after punctuation
    or whitespace where it can. ValueError for empty text or a value out of range; nothing is half-built.
    """
    if not isinstance(text, str):
        raise TypeError("text must be a str, got %s" % type(text).__name__)
    if not text:
        raise ValueError("nothing to speak: the text is empty")
    check_int(max_text, 4, limit, "max_text")
    head = tts_text.encode(tags_text, big_endian)
    budget = max_text - len(head)
    if budget < 4:
        raise ValueError("max_text %d leaves no room for text after the tags (%d bytes)" % (max_text, len(head)))
    if not raw:
        text = tts_text.plain(text)
    data = tts_text.encode(text, big_endian)
    view = memoryview(data)
    tail = 1 if checksum else 0
    out = []
    for start, end in tts_text.pieces(data, budget, big_endian):
        n = len(head) + end - start
        buf = bytearray(n + 5 + tail)
        buf[0] = _HEADER
        buf[1] = (n + 2 + tail) >> 8
        buf[2] = (n + 2 + tail) & 0xFF
        buf[3] = cmd
        buf[4] = param
        buf[5 : 5 + len(head)] = head
        buf[5 + len(head) : 5 + n] = view[start:end]
        if checksum:
            buf[-1] = xor(buf, n + 5)
        out.append(bytes(buf))
    return out
