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

    if after is None:
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


def _loopback():
    # The firmware listens on every interface, as a board does; in the tests it must only be reachable locally.
    import asyncio
    real = asyncio.start_server

    async def start_server(cb, host, port, *a, **kw):
        kw.pop("start_serving", None)  # microdot tries CPython's keyword first; the board's asyncio has none
        return await real(cb, settings.get("bind", "127.0.0.1"), port, *a, **kw)
    asyncio.start_server = start_server


def install():
    global settings
    try:
        with open("/_harness/settings.json") as f:
            settings = json.load(f)
    except OSError:
        settings = {}
    _loopback()
    for spec in settings.get("faults", ()):
        _inject(spec)
