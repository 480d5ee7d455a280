# How a panel is wired, worked out once: the Layout's checks and its table of which LED on the data line each image
# pixel is. Only building a Layout needs this (and Layout.index, which the emulator and tests call), so it is its
# own module: the board drops it from the heap once the renderer is built and then only reads the table.

from array import array

from sentinel_core.compat import const

# What a Layout takes (here, beside the checks that use them: layout.py imports this module, not the reverse).
ORDERS = ("RGB", "RBG", "GRB", "GBR", "BRG", "BGR")
ROTATIONS = (0, 90, 180, 270)
# 64x64: beyond that the frame buffer alone would not fit an ESP32's heap next to the rest.
_MAX_LEDS = const(4096)


def _dim(name, v):
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError("layout %s must be an int >= 1, not %r" % (name, v))


def wire(lay, width, height, serpentine, rotation, order):
    """Check the Layout lay's arguments (ValueError naming the first bad one, lay untouched) and set its named
    attributes (see Layout)."""
    _dim("width", width)
    _dim("height", height)
    n = width * height
    if n > _MAX_LEDS:
        raise ValueError("layout has %d LEDs, more than %d" % (n, _MAX_LEDS))
    if rotation not in ROTATIONS:
        raise ValueError("layout rotation must be one of 0, 90, 180, 270, not %r" % (rotation,))
    if order not in ORDERS:
        raise ValueError("layout order must be a permutation of RGB such as GRB, not %r" % (order,))
    serpentine = bool(serpentine)
    if rotation == 90 or rotation == 270:
        cols = height
        rows = width
    else:
        cols = width
        rows = height
    # One byte per entry while every index fits (up to 16x16, the usual box): half the heap of 16-bit ones.
    leds = array("B" if n <= 256 else "H", range(n))
    for y in range(rows):
        for x in range(cols):
            leds[y * cols + x] = _led(x, y, width, height, rotation, serpentine)
    lay.width = width
    lay.height = height
    lay.serpentine = serpentine
    lay.rotation = rotation
    lay.order = order
    lay.cols = cols
    lay.rows = rows
    lay.n = n
    lay.nbytes = 3 * n
    lay.r_off = order.index("R")
    lay.g_off = order.index("G")
    lay.b_off = order.index("B")
    lay.leds = leds


def index(lay, x, y):
    """LED index (position on the data line) of image pixel (x, y) of the Layout lay."""
    if not (0 <= x < lay.cols and 0 <= y < lay.rows):
        raise ValueError("pixel (%r, %r) outside the %dx%d image" % (x, y, lay.cols, lay.rows))
    return _led(x, y, lay.width, lay.height, lay.rotation, lay.serpentine)


def _led(x, y, w, h, rot, serpentine):
    # (c, r): the LED's column and row on the panel as wired.
    if rot == 0:
        c = x
        r = y
    elif rot == 90:
        c = y
        r = h - 1 - x
    elif rot == 180:
        c = w - 1 - x
        r = h - 1 - y
    else:
        c = w - 1 - y
        r = x
    if serpentine and r & 1:
        c = w - 1 - c
    return r * w + c
