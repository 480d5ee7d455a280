# The LED matrix output. The renderer already produces bytes in the wire order (GRB), so the NeoPixel object is given
# the renderer's own buffer: no copy per frame. It is built with no buffer of its own (0 LEDs, then told the real
# count): one of n * 3 bytes would only sit in the heap during boot, the busiest moment, until the first frame. A
# WS2812 chain sends nothing back, so "missing" here means the driver could not be set up (bad pin, no neopixel
# module); a disconnected matrix is found on the bench checklist.


class Pixels:
    def __init__(self, pin_no, n, neopixel_mod=None, pin_factory=None):
        self.n = n
        self.ok = False
        self.error = None
        self.frames = 0
        self._np = None
        try:
            if neopixel_mod is None:
                import neopixel as neopixel_mod
            if pin_factory is None:
                from machine import Pin as pin_factory
            self._np = neopixel_mod.NeoPixel(pin_factory(pin_no, pin_factory.OUT), 0)
            self._np.n = n
            self.ok = True
        except Exception as e:  # noqa: BLE001 - a driver that fails is reported in status; the terminal runs on
            self.error = "%s: %s" % (type(e).__name__, e)

    def show(self, frame):
        """Send one frame (bytes in wire order, 3 per LED)."""
        if not self.ok:
            return False
        np = self._np
        if np.buf is not frame:
            if len(frame) != 3 * self.n:
                raise ValueError("frame has %d bytes, the chain %d" % (len(frame), 3 * self.n))
            np.buf = frame
        self._transmit()
        self.frames += 1
        return True

    def _transmit(self):
        self._np.write()
