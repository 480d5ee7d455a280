# What the board runner adds to the firmware for the tests, read from /_harness/settings.json (tests/unixport.py
# writes it): the server bound to loopback, and MemoryErrors injected at named steps of a request. Nothing here
# changes what the firmware does unless a setting asks for it.
import json
import sys

settings = {}
injected = []  # (point, call number) of every MemoryError raised so far


def report(line):
    print("[harness] " + line)


def _resolve(point):
    # "package.module:Name" or "package.module:Class.attr" -> (owner object, attribute name)
    mod_name, attr = point.split(":")
    __import__(mod_name)
    owner = sys.modules[mod_name]
    parts = attr.split(".")
    for p in parts[:-1]:
        owner = getattr(owner, p)
    return owner, parts[-1]


def _inject(spec):
    point = spec["at"]
    nth = spec.get("nth", 1)  # the first call that fails
    times = spec.get("times", 1)  # how many calls in a row fail
    after = spec.get("after")  # a generator: fail after this many pieces instead of at the call
    hang = spec.get("hang", False)  # block the whole loop at that call instead (a hung task, for the watchdog)
    arm = spec.get("arm")  # or let the call through and make the next call of this other point fail instead
    owner, name = _resolve(point)
    real = getattr(owner, name)
    calls = [0]

    def failing():
        calls[0] += 1
        if nth <= calls[0] < nth + times:
            injected.append((point, calls[0]))
            report("MemoryError injected at %s (call %d)" % (point, calls[0]))
            return True
        return False

    if arm is not None:

        def wrapper(*a, **kw):
            if failing():
                _inject({"at": arm, "nth": 1})
            return real(*a, **kw)
    elif hang:

        def wrapper(*a, **kw):
            if failing():
                report("hanging at %s" % point)
                while True:
                    pass
            return real(*a, **kw)
    elif after is None:

        def wrapper(*a, **kw):
            if failing():
                raise MemoryError("injected at " + point)
            return real(*a, **kw)
    else:

        def wrapper(*a, **kw):
            fail = failing()
            n = 0
            for piece in real(*a, **kw):
                if fail and n == after:
                    raise MemoryError("injected at " + point)
                n += 1
                yield piece

    setattr(owner, name, wrapper)


def _shim(real, **overrides):
    # A stand-in for a built-in module: everything of the real one, with the given attributes replaced.
    class Shim:
        pass

    shim = Shim()
    for k in dir(real):
        if not k.startswith("__"):
            setattr(shim, k, getattr(real, k))
    for k in overrides:
        setattr(shim, k, overrides[k])
    return shim


def _loopback():
    # The firmware listens on every interface, as a board does; in the tests it must only be reachable locally:
    # socket is a shim whose getaddrinfo() maps 0.0.0.0 to the loopback address.
    import socket as real

    bind = settings.get("bind", "127.0.0.1")

    def getaddrinfo(host, port, *a):
        return real.getaddrinfo(bind if host == "0.0.0.0" else host, port, *a)

    sys.modules["socket"] = _shim(real, getaddrinfo=getaddrinfo)


def _watchdog():
    # machine.WDT as the hardware does it: a timer outside the Python loop that resets the board when it is not
    # fed in time. Here a thread, and the reset is the process killed (the harness boots it again).
    import _thread
    import os
    import time

    fake = sys.modules["machine"]
    real_init = fake.WDT.__init__
    real_feed = fake.WDT.feed

    def init(self, id=0, timeout=5000):
        real_init(self, id, timeout)
        self.fed_at = time.ticks_ms()
        _thread.start_new_thread(watch, (self,))

    def feed(self):
        real_feed(self)
        self.fed_at = time.ticks_ms()

    def watch(wdt):
        while True:
            time.sleep_ms(100)
            if time.ticks_diff(time.ticks_ms(), wdt.fed_at) > wdt.timeout:
                print("[harness] watchdog reset: not fed for %d ms" % wdt.timeout)
                os.system("kill -9 $PPID")  # the shell's parent: this process

    fake.WDT.__init__ = init
    fake.WDT.feed = feed


def _short_pause():
    # main.py waits 10 s before machine.reset() after a fatal error (time for Ctrl-C at a REPL); this console is
    # not one, so that pause is cut to 0.2 s. Every other sleep is the real one.
    import time as real

    def sleep(s):
        real.sleep(0.2 if s >= 5 else s)

    sys.modules["time"] = _shim(real, sleep=sleep)


def _collecting_mem_free():
    # For the soak bench: the status page's heap_free is read after a collection (what stays, not what the last
    # garbage happened to leave), so a trend is the heap's own. gc is a shim; everything else in it is the real one.
    import gc as real

    def mem_free():
        real.collect()
        if settings.get("qstr_report"):
            import micropython

            micropython.qstr_info()
        return real.mem_free()

    sys.modules["gc"] = _shim(real, mem_free=mem_free)


def install():
    global settings
    try:
        with open("/_harness/settings.json") as f:
            settings = json.load(f)
    except OSError:
        settings = {}
    _loopback()
    if settings.get("lean"):
        # A run whose heap matters: the fakes count what the firmware sends instead of keeping copies of it.
        sys.modules["neopixel"].NeoPixel.KEEP = 0
        sys.modules["machine"].UART.RECORD = False
        sys.modules["machine"].Pin.HISTORY = False
    if settings.get("watchdog"):
        _watchdog()
    if settings.get("short_pause"):
        _short_pause()
    if settings.get("collect_on_status"):
        _collecting_mem_free()
    for spec in settings.get("faults", ()):
        _inject(spec)
