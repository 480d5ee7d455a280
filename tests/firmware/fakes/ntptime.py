# A fake of MicroPython's ntptime: settime() succeeds or raises as the test decides, and counts calls.
host = "pool.ntp.org"
timeout = 1
fail = False
calls = 0


def settime():
    global calls
    calls += 1
    if fail:
        raise OSError(110)  # ETIMEDOUT, what the real one raises when no answer comes


def time():
    return 0
