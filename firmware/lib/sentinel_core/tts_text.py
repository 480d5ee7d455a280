# Text for the TTS chips in Unicode mode: UTF-16 by hand (MicroPython has no utf-16 codec), the inline tags the
# chips read as commands, and the rule that cuts a long text into frame-sized pieces.
# Both chips share all of this; only the byte order and the frame around the text differ.

from sentinel_core.compat import code_points, const

# Whitespace and punctuation, ASCII and CJK: a cut just after one of these falls where a reader would pause.
BREAKS = (
    0x09,
    0x0A,
    0x0D,
    0x20,
    0x21,
    0x2C,
    0x2E,
    0x3A,
    0x3B,
    0x3F,  # \t \n \r space ! , . : ; ?
    0x3001,
    0x3002,  # 、 。
    0xFF01,
    0xFF0C,
    0xFF1A,
    0xFF1B,
    0xFF1F,  # ！ ， ： ； ？
)

# The longest inline tag the chips know ("[m16]", "[v10]") is 5 code units; a cut never lands inside a bracket
# opened this close before it, so a tag in raw text is never halved across two frames.
_TAG_UNITS = const(8)

_REPLACEMENT = const(0xFFFD)


def units(text):
    """The number of UTF-16 code units text takes (2 bytes each; a code point above U+FFFF takes two)."""
    n = 0
    for o in text.encode("utf-8", "surrogatepass"):  # bytes (see put): one unit per character, two above U+FFFF
        if o < 0x80 or o >= 0xC0:
            n += 2 if o >= 0xF0 else 1
    return n


def put(buf, pos, text, big):
    """Writes text as UTF-16 (big-endian if big) into buf from pos; returns the position after it.

    A lone surrogate (CPython strings can hold one, e.g. from JSON "\\ud800") has no UTF-16 form: it is written
    as U+FFFD so that one odd character never costs the whole alarm its voice.
    """
    # Code points decoded from the UTF-8 bytes: on MicroPython each character a str yields is interned for good,
    # and every new Chinese character spoken grew the board's full pool of names (docs/FIRMWARE.md "Memory").
    # CPython: a lone surrogate as its 3 bytes, then U+FFFD below
    for cp in code_points(text.encode("utf-8", "surrogatepass")):
        if cp > 0xFFFF:
            cp -= 0x10000
            pos = _unit(buf, pos, 0xD800 | (cp >> 10), big)
            cp = 0xDC00 | (cp & 0x3FF)
        elif 0xD800 <= cp <= 0xDFFF:
            cp = _REPLACEMENT
        pos = _unit(buf, pos, cp, big)
    return pos


def _unit(buf, pos, u, big):
    if big:
        buf[pos] = u >> 8
        buf[pos + 1] = u & 0xFF
    else:
        buf[pos] = u & 0xFF
        buf[pos + 1] = u >> 8
    return pos + 2


def encode(text, big):
    buf = bytearray(2 * units(text))
    put(buf, 0, text, big)
    return bytes(buf)


def unit_at(data, i, big):
    if big:
        return (data[i] << 8) | data[i + 1]
    return (data[i + 1] << 8) | data[i]


def plain(text):
    """Text from the wire with its square brackets turned into parentheses: the chips read "[...]" as a command
    (volume, speed, reading mode), and an alarm's text must be spoken, not obeyed."""
    return text.replace("[", "(").replace("]", ")")


def tag(letter, value, low, high, what):
    """The inline tag "[<letter><value>]", after checking value is an int in low..high."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("%s must be an int %d..%d, got %r" % (what, low, high, value))
    if value < low or value > high:
        raise ValueError("%s must be %d..%d, got %d" % (what, low, high, value))
    return "[%s%d]" % (letter, value)


def cut(data, start, budget, big):
    """Where the piece of the UTF-16 bytes data that starts at start ends, for a piece of at most budget bytes.

    The rule (docs/TTS.md): all the rest if it fits; else just after the last whitespace or punctuation in the
    second half of the window; else before a "[" that opens a tag the window would halve; else at the window's
    end, one unit earlier if that would separate a surrogate pair.
    """
    end = len(data)
    if end - start <= budget:
        return end
    hard = start + (budget & ~1)
    if 0xDC00 <= unit_at(data, hard, big) <= 0xDFFF:
        hard -= 2
    floor = start + ((hard - start) >> 1)
    i = hard - 2
    while i >= floor:
        if unit_at(data, i, big) in BREAKS:
            return i + 2
        i -= 2
    i = hard - 2
    floor = hard - 2 * _TAG_UNITS
    if floor < start:
        floor = start
    while i > floor:
        u = unit_at(data, i, big)
        if u == 0x5D:  # "]": the window ends after a closed tag
            break
        if u == 0x5B:
            return i
        i -= 2
    return hard


def pieces(data, budget, big):
    """(start, end) byte ranges that cut data into pieces of at most budget bytes by the rule in cut()."""
    if budget < 4:
        # A code point above U+FFFF needs 4 bytes and may not be split: a smaller piece could never hold it.
        raise ValueError("a frame must hold at least 4 bytes of text, got %d" % budget)
    out = []
    start = 0
    n = len(data)
    while start < n:
        end = cut(data, start, budget, big)
        out.append((start, end))
        start = end
    return out
