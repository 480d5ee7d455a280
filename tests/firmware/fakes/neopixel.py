# A fake of MicroPython's neopixel module: the same buf/write() shape as the real class (write() sends self.buf
# as it is), recording each frame sent.


fail = False  # True: the constructor raises, like a pin the RMT peripheral cannot take


class NeoPixel:
    ORDER = (1, 0, 2, 3)
    instances = []
    KEEP = 4  # frames kept by each new strip (0: count only, for runs whose heap is measured)

    def __init__(self, pin, n, bpp=3, timing=1):
        if fail:
            raise OSError(19)  # ENODEV
        self.pin = pin
        self.n = n
        self.bpp = bpp
        self.buf = bytearray(n * bpp)
        self.frames = []
        self.keep = NeoPixel.KEEP  # frames kept: enough for assertions, bounded for long runs
        self.writes = 0
        pin.init(pin.OUT)
        NeoPixel.instances.append(self)

    def __len__(self):
        return self.n

    def __setitem__(self, i, v):
        o = self.ORDER
        b = i * self.bpp
        for j in range(self.bpp):
            self.buf[b + o[j]] = v[j]

    def __getitem__(self, i):
        o = self.ORDER
        b = i * self.bpp
        return tuple(self.buf[b + o[j]] for j in range(self.bpp))

    def fill(self, v):
        for i in range(self.n):
            self[i] = v

    def write(self):
        self.writes += 1
        if self.keep:  # keep = 0: count only (benchmarks must not measure the fake's own copies)
            self.frames.append(bytes(self.buf))
            if len(self.frames) > self.keep:
                self.frames.pop(0)

    @property
    def last(self):
        return self.frames[-1] if self.frames else None
