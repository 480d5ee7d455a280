# Command frames built on demand, for tools and tests: any command with its optional param byte and data, and a
# setting chosen from a chip's list (the SYN6288's baud rate). The board sends only the chips' fixed frames
# (precomputed bytes in the chip modules) and synthesis frames (tts_frame.speak), so it never loads this.
from sentinel_core.tts_frame import xor


def build(cmd, param, data, checksum):
    """One frame: header, length, cmd, the optional param byte, data, and the XOR byte when checksum."""
    extra = 0 if param is None else 1
    tail = 1 if checksum else 0
    length = len(data) + extra + 1 + tail
    if length > 0xFFFF:
        raise ValueError("frame data of %d bytes does not fit the length field" % len(data))
    buf = bytearray(length + 3)
    buf[0] = 0xFD
    buf[1] = length >> 8
    buf[2] = length & 0xFF
    buf[3] = cmd
    if param is not None:
        buf[4] = param
    buf[4 + extra : 4 + extra + len(data)] = data
    if checksum:
        buf[-1] = xor(buf, len(buf) - 1)
    return bytes(buf)


def choice(cmd, choices, value, what, checksum):
    """The frame whose param byte is value's index in choices; ValueError naming what for anything else."""
    for i in range(len(choices)):
        if choices[i] == value:
            return build(cmd, i, b"", checksum)
    raise ValueError("%s must be one of %s, got %r" % (what, ", ".join(str(c) for c in choices), value))
