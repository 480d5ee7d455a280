# Where each pixel of the upright image sits on the LED data line, and in which byte order the driver wants it.
# The renderer draws in image coordinates (x to the right, y down, as the operator sees the box) and looks the LED
# up in a table built once here, so wiring and mounting cost nothing per frame.

from array import array

from sentinel_core.compat import const

ORDERS = ("RGB", "RBG", "GRB", "GBR", "BRG", "BGR")
ROTATIONS = (0, 90, 180, 270)
# 64x64: beyond that the frame buffer alone would not fit an ESP32's heap next to the rest.
_MAX_LEDS = const(4096)


def _dim(name, v):
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError("layout %s must be an int >= 1, not %r" % (name, v))


class Layout:
    """A panel of width x height LEDs as wired (a strip is height 1).

    The data line enters at the panel's top-left LED and runs along row 0 to the right; serpentine: each next row
    runs back the other way (the usual WS2812B matrix), progressive: every row runs left to right.
    rotation: how far the panel is turned clockwise from that orientation when mounted, 0/90/180/270; the image
    is counter-rotated so it reads upright. At 90 and 270 the image is height wide and width tall.
    order: the driver's byte order per LED, "GRB" for WS2812B (MicroPython's NeoPixel), or any other permutation.

    After construction: cols x rows is the image size, n the LED count, nbytes the frame size, r_off/g_off/b_off
    the byte offset of each channel within an LED, leds[y * cols + x] the LED index of image pixel (x, y).
    """

    def __init__(self, width, height, serpentine=True, rotation=0, order="GRB"):
        _dim("width", width)
        _dim("height", height)
        if width * height > _MAX_LEDS:
            raise ValueError("layout has %d LEDs, more than %d" % (width * height, _MAX_LEDS))
        if rotation not in ROTATIONS:
            raise ValueError("layout rotation must be one of 0, 90, 180, 270, not %r" % (rotation,))
        if order not in ORDERS:
            raise ValueError("layout order must be a permutation of RGB such as GRB, not %r" % (order,))
        self.width = width
        self.height = height
        self.serpentine = bool(serpentine)
        self.rotation = rotation
        self.order = order
        if rotation == 90 or rotation == 270:
            self.cols = height
            self.rows = width
        else:
            self.cols = width
            self.rows = height
        self.n = width * height
        self.nbytes = 3 * self.n
        self.r_off = order.index("R")
        self.g_off = order.index("G")
        self.b_off = order.index("B")
        # One byte per entry while every index fits (up to 16x16, the usual box): half the heap of 16-bit ones.
        leds = array("B" if self.n <= 256 else "H", range(self.n))
        for y in range(self.rows):
            for x in range(self.cols):
                leds[y * self.cols + x] = self.index(x, y)
        self.leds = leds

    def index(self, x, y):
        """LED index (position on the data line) of image pixel (x, y)."""
        if not (0 <= x < self.cols and 0 <= y < self.rows):
            raise ValueError("pixel (%r, %r) outside the %dx%d image" % (x, y, self.cols, self.rows))
        w = self.width
        h = self.height
        rot = self.rotation
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
        if self.serpentine and r & 1:
            c = w - 1 - c
        return r * w + c

    def __repr__(self):
        return "Layout(%d, %d, serpentine=%r, rotation=%d, order=%r)" % (
            self.width, self.height, self.serpentine, self.rotation, self.order)
