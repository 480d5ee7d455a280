# The speech chips' frames read back into what they say: for tests and tools (a captured UART line, a fake chip).
# The board only writes frames, so it never loads this: reading them back would cost its heap ~1 KB for nothing.
# The frame layout is tts_frame's, the UTF-16 rules tts_text's; the chip modules' decode() call in here.
from sentinel_core.tts_frame import xor
from sentinel_core.tts_text import unit_at


def parse(data, checksum, name, param_cmds):
    """A frame -> (cmd, param or None, body bytes). ValueError for anything that is not one well-formed frame.
    param_cmds: the commands whose first data byte is a parameter."""
    n = len(data)
    least = 5 if checksum else 4
    if n < least or data[0] != 0xFD:
        raise ValueError("not a %s frame: it must start with FD and be at least %d bytes" % (name, least))
    length = (data[1] << 8) | data[2]
    if length != n - 3:
        raise ValueError("length field says %d, the frame has %d bytes after the header" % (length, n - 3))
    if checksum and xor(data, n - 1) != data[n - 1]:
        raise ValueError("checksum %02X does not match %02X" % (data[n - 1], xor(data, n - 1)))
    cmd = data[3]
    param = None
    body = bytes(data[4 : n - 1] if checksum else data[4:])
    if cmd in param_cmds:
        if not body:
            raise ValueError("command %02X needs a parameter byte" % cmd)
        param = body[0]
        body = body[1:]
    return cmd, param, body


def text(data, big):
    """UTF-16 bytes back to text. ValueError for an odd length or a broken surrogate pair."""
    n = len(data)
    if n & 1:
        raise ValueError("UTF-16 text has an odd number of bytes (%d)" % n)
    out = []
    i = 0
    while i < n:
        u = unit_at(data, i, big)
        i += 2
        if 0xD800 <= u <= 0xDBFF:
            if i >= n:
                raise ValueError("UTF-16 text ends inside a surrogate pair")
            lo = unit_at(data, i, big)
            if not 0xDC00 <= lo <= 0xDFFF:
                raise ValueError("high surrogate at byte %d is not followed by a low one" % (i - 2))
            i += 2
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00)
        elif 0xDC00 <= u <= 0xDFFF:
            raise ValueError("low surrogate without a high one at byte %d" % (i - 2))
        out.append(chr(u))
    return "".join(out)


def decode(data, checksum, name, param_cmds, unicode_mask, unicode, big):
    """A chip's frame -> {"cmd", "param", "data", "text"}. The synthesis command is param_cmds[0]; text is the
    spoken text when its param (masked by unicode_mask) says Unicode, else None."""
    cmd, param, body = parse(data, checksum, name, param_cmds)
    spoken = None
    if cmd == param_cmds[0] and param & unicode_mask == unicode:
        spoken = text(body, big)
    return {"cmd": cmd, "param": param, "data": body, "text": spoken}
