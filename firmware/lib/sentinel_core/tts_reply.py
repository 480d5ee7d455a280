# What the TTS chips send back on the UART. SYN6288 and XFS5152CE answer with the same one-byte codes; a status
# query is answered "accepted" then "busy" or "idle". Anything else on the line (noise at power-up, a wrong baud
# rate) is reported as unknown, never raised: the speech health check must keep running on a noisy wire.

from sentinel_core.compat import const

_INIT = const(0x4A)
_ACCEPTED = const(0x41)
_ERROR = const(0x45)
_BUSY = const(0x4E)
_IDLE = const(0x4F)
NAMES = {_INIT: "init", _ACCEPTED: "accepted", _ERROR: "error", _BUSY: "busy", _IDLE: "idle"}


class Reply:
    """The bytes read from the chip, understood.

    codes: one name per byte, in order ("init", "accepted", "error", "busy", "idle" or "unknown").
    accepted / error / init: whether that code came. busy: True or False from the last busy/idle code, None if
    neither came. unknown: how many bytes were not a reply code.
    summary: one word for the whole read: "error" if the chip refused a frame; else "busy" or "idle" (the last
    state it told); else "accepted", "init", "unknown" (only garbage) or "none" (nothing read).
    """

    def __init__(self, codes, unknown, busy):
        self.codes = codes
        self.unknown = unknown
        self.busy = busy
        self.accepted = "accepted" in codes
        self.error = "error" in codes
        self.init = "init" in codes
        if self.error:
            self.summary = "error"
        elif busy is not None:
            self.summary = "busy" if busy else "idle"
        elif self.accepted:
            self.summary = "accepted"
        elif self.init:
            self.summary = "init"
        elif unknown:
            self.summary = "unknown"
        else:
            self.summary = "none"

    def __repr__(self):
        return "Reply(%s %r)" % (self.summary, self.codes)


def parse_reply(data):
    """Reads what a UART read returned: bytes, bytearray, memoryview, one int byte, or None (a read that timed
    out). Never raises for any byte values; a type that is not bytes-like is a programming error (TypeError)."""
    if data is None:
        data = b""
    elif isinstance(data, int) and not isinstance(data, bool):
        if not 0 <= data <= 255:
            raise TypeError("a reply byte must be 0..255, got %d" % data)
        data = bytes((data,))
    elif not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError("a reply must be bytes, got %s" % type(data).__name__)
    codes = []
    unknown = 0
    busy = None
    for b in data:
        name = NAMES.get(b)
        if name is None:
            unknown += 1
            name = "unknown"
        elif b == _BUSY:
            busy = True
        elif b == _IDLE:
            busy = False
        codes.append(name)
    return Reply(codes, unknown, busy)
