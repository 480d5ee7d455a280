# A fake of MicroPython's machine module for tests: records every output and lets a test drive every input.
# Pins are kept in Pin.registry by number, so a test reaches the pin the firmware created.


class Pin:
    IN = 1
    OUT = 3
    OPEN_DRAIN = 7
    PULL_UP = 2
    PULL_DOWN = 1
    IRQ_FALLING = 2
    IRQ_RISING = 1
    registry = {}
    HISTORY = True  # each new pin records what is written to it (False: not, for runs whose heap is measured)

    def __init__(self, id, mode=-1, pull=-1, value=None):
        if not isinstance(id, int) or id < 0 or id > 48:
            raise ValueError("invalid pin")
        self.id = id
        self.mode = mode
        self.pull = pull
        # An input with a pull-up reads high until something pulls it down.
        self._level = 1 if pull == Pin.PULL_UP else 0
        if value is not None:
            self._level = 1 if value else 0
        self.history = []
        Pin.registry[id] = self

    def init(self, mode=-1, pull=-1, value=None):
        if mode != -1:
            self.mode = mode
        if pull != -1:
            self.pull = pull
        if value is not None:
            self.value(value)

    def value(self, v=None):
        if v is None:
            return self._level
        self._level = 1 if v else 0
        if Pin.HISTORY:
            self.history.append(self._level)

    def on(self):
        self.value(1)

    def off(self):
        self.value(0)

    def __call__(self, v=None):
        return self.value(v)

    def irq(self, handler=None, trigger=3):
        self.handler = handler

    # test side
    def drive(self, level):
        """What the outside world puts on an input pin."""
        self._level = 1 if level else 0


class UART:
    registry = {}
    RECORD = True  # what each new UART does with writes (False: count only, for runs whose heap is measured)

    def __init__(self, id, baudrate=9600, tx=None, rx=None, timeout=0, **kw):
        self.id = id
        self.baudrate = baudrate
        self.tx = tx
        self.rx = rx
        self.written = bytearray()
        self.writes = []
        self._rx = bytearray()
        self.responder = None  # f(frame) -> bytes the chip answers
        self.record = UART.RECORD  # False: count only (benchmarks must not measure the fake's own copies)
        self.count = 0
        UART.registry[id] = self

    def write(self, buf):
        self.count += 1
        b = buf
        if self.record:
            b = bytes(buf)
            self.written.extend(b)
            self.writes.append(b)
        if self.responder is not None:
            reply = self.responder(b)
            if reply:
                self._rx.extend(reply)
        return len(b)

    def any(self):
        return len(self._rx)

    def read(self, n=-1):
        if not self._rx:
            return None
        if n < 0 or n > len(self._rx):
            n = len(self._rx)
        out = bytes(self._rx[:n])
        self._rx = self._rx[n:]
        return out

    def readinto(self, buf, n=None):
        if not self._rx:
            return None
        if n is None or n > len(buf):
            n = len(buf)
        if n > len(self._rx):
            n = len(self._rx)
        buf[:n] = self._rx[:n]
        self._rx = self._rx[n:]
        return n

    # test side
    def feed(self, data):
        self._rx.extend(data)

    def take(self):
        out = self.writes
        self.writes = []
        return out


class WDT:
    instances = []

    def __init__(self, id=0, timeout=5000):
        self.timeout = timeout
        self.feeds = 0
        WDT.instances.append(self)

    def feed(self):
        self.feeds += 1


class RTC:
    def __init__(self):
        self._dt = (2000, 1, 1, 5, 0, 0, 0, 0)

    def datetime(self, dt=None):
        if dt is None:
            return self._dt
        self._dt = tuple(dt)


resets = 0


def reset():
    global resets
    resets += 1
    raise SystemExit("machine.reset()")


def unique_id():
    return b"\x24\x0a\xc4\x00\x00\x01"


def freq(hz=None):
    return 240000000


def reset_fakes():
    """Forget every pin, UART and watchdog made so far (each test starts clean)."""
    Pin.registry = {}
    UART.registry = {}
    WDT.instances = []
