# Where each pixel of the upright image sits on the LED data line, and in which byte order the driver wants it.
# The renderer draws in image coordinates (x to the right, y down, as the operator sees the box) and looks the LED
# up in a table built once (sentinel_core.wiring, boot-only), so wiring and mounting cost nothing per frame.

from array import array


class Layout:
    """A panel of width x height LEDs as wired (a strip is height 1).

    The data line enters at the panel's top-left LED and runs along row 0 to the right; serpentine: each next row
    runs back the other way (the usual WS2812B matrix), progressive: every row runs left to right.
    rotation: how far the panel is turned clockwise from that orientation when mounted, 0/90/180/270; the image
    is counter-rotated so it reads upright. At 90 and 270 the image is height wide and width tall.
    order: the driver's byte order per LED, "GRB" for WS2812B (MicroPython's NeoPixel), or any other permutation.

    After construction (sentinel_core.wiring.wire sets them): width, height, serpentine, rotation and order as
    given (serpentine a bool); cols x rows is the image size, n the LED count, nbytes the frame size, r_off/g_off/b_off
    the byte offset of each channel within an LED, leds[y * cols + x] the LED index of image pixel (x, y).
    """

    # Named here for readers and pyright; a bare annotation costs nothing on MicroPython (no class attribute).
    width: int
    height: int
    serpentine: bool
    rotation: int
    order: str
    cols: int
    rows: int
    n: int
    nbytes: int
    r_off: int
    g_off: int
    b_off: int
    leds: array

    def __init__(self, width, height, serpentine=True, rotation=0, order="GRB"):
        # Checking and building the table is boot-only code (sentinel_core.wiring): the board drops it once built.
        from sentinel_core.wiring import wire

        wire(self, width, height, serpentine, rotation, order)

    def index(self, x, y):
        """LED index (position on the data line) of image pixel (x, y)."""
        from sentinel_core.wiring import index

        return index(self, x, y)

    def __repr__(self):
        return "Layout(%d, %d, serpentine=%r, rotation=%d, order=%r)" % (
            self.width,
            self.height,
            self.serpentine,
            self.rotation,
            self.order,
        )
