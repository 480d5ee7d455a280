# The one shim between the two interpreters: MicroPython's compiler folds `_NAME = const(123)` (int only) into the
# code that uses it and, for a name starting with "_", keeps neither a global nor an interned name for it, which
# saves heap on the board. CPython has no such builtin: there const() just returns its value.
try:
    # (type: ignore: the stubs' const is positional-only, a syntax MicroPython cannot parse in the fallback)
    from micropython import const  # pyright: ignore[reportAssignmentType]
except ImportError:

    def const(x):
        return x


def code_points(b):
    """The code points of the UTF-8 bytes b, one int each. On MicroPython each character a str yields (iterating,
    indexing) is interned for good; the ints of its bytes are not (docs/FIRMWARE.md "Memory")."""
    n = len(b)
    i = 0
    while i < n:
        o = b[i]
        if o < 0x80:
            i += 1
        elif o < 0xE0:
            o = (o & 0x1F) << 6 | b[i + 1] & 0x3F
            i += 2
        elif o < 0xF0:
            o = (o & 0x0F) << 12 | (b[i + 1] & 0x3F) << 6 | b[i + 2] & 0x3F
            i += 3
        else:
            o = (o & 0x07) << 18 | (b[i + 1] & 0x3F) << 12 | (b[i + 2] & 0x3F) << 6 | b[i + 3] & 0x3F
            i += 4
        yield o
