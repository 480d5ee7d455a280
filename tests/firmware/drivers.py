# The device shells one by one, on the fakes: each touches hardware in one method, so the bytes and levels that
# would reach the pins are asserted exactly.
import machine
import network
import ntptime
from _fw import FakeTime, fresh_fakes, scratch
from neopixel import NeoPixel

from sentinel_core import tts_syn6288, tts_xfs5152
from sentinel_core.button import Button
from sentinel_fw import ticks
from sentinel_fw.buttonpoll import ButtonPoller
from sentinel_fw.clock import RETRY_MS, Clock
from sentinel_fw.pixels import Pixels
from sentinel_fw.store import Store
from sentinel_fw.tts_uart import GRACE_MS, TtsUart, make_encoder
from sentinel_fw.watchdog import Watchdog
from sentinel_fw.wifi import FIRST_MS, MAX_MS, WiFi

# ---- Wi-Fi


def test_wifi_joins_and_backs_off_up_to_the_cap():
    fresh_fakes()
    network.ap_up = False
    wlan = network.WLAN(network.STA_IF)
    w = WiFi(wlan, "lab", "password123", "sentinel")
    assert wlan.active() and network.hostname() == "sentinel"
    t = 0
    starts = []
    while t < 600000:
        n = len(wlan.connects)
        w.step(t)
        if len(wlan.connects) > n:
            starts.append(t)
        t += 100
    gaps = [starts[i + 1] - starts[i] for i in range(len(starts) - 1)]
    # An attempt is abandoned after 20 s; the retry waits for the back-off, which doubles to at most 60 s.
    assert gaps[0] >= 20000 and max(gaps) <= MAX_MS + 100, gaps
    assert w.backoff_ms == MAX_MS and not w.connected
    network.ap_up = True
    while not w.step(t):
        t += 100
    assert w.connected and w.backoff_ms == FIRST_MS and w.address() == "10.0.0.42"


def test_wifi_reconnects_after_a_drop():
    fresh_fakes()
    wlan = network.WLAN(network.STA_IF)
    w = WiFi(wlan, "lab", "pw123456")
    w.step(0)
    assert w.step(100)
    wlan.drop()
    assert not w.step(200)
    t = 200
    while not w.step(t):
        t += 100
    assert t < 5000 and len(wlan.connects) == 2


# ---- clock


def test_clock_unix_time_and_ntp_retry():
    fresh_fakes()
    ft = FakeTime(1764460800)
    c = Clock(ntptime, "time.example", 3600, time_fn=ft)
    assert ntptime.host == "time.example"
    assert c.now() == 1764460800 and not c.synced  # WebAssembly/unix ports count from 1970
    ntptime.fail = True
    assert c.due(0) and not c.sync(0)
    assert "OSError" in c.last_error and not c.synced
    assert not c.due(RETRY_MS - 1) and c.due(RETRY_MS)
    ntptime.fail = False
    assert c.sync(RETRY_MS) and c.synced and c.syncs == 1
    assert not c.due(RETRY_MS + 3599000) and c.due(RETRY_MS + 3600000)


# ---- pixels


def test_pixels_hand_the_frame_itself_to_neopixel():
    fresh_fakes()
    p = Pixels(13, 4)
    assert p.ok and machine.Pin.registry[13].mode == machine.Pin.OUT
    # No buffer of the driver's own sits in the heap until the first frame brings the renderer's.
    assert len(NeoPixel.instances[-1].buf) == 0 and len(NeoPixel.instances[-1]) == 4
    frame = bytearray(b"\x01\x02\x03" * 4)
    p.show(frame)
    np = NeoPixel.instances[-1]
    assert np.buf is frame and np.last == bytes(frame)
    frame[0] = 0xFF
    p.show(frame)
    assert np.writes == 2 and np.last[0] == 0xFF


def test_pixels_wrong_length_refused_and_missing_driver_reported():
    fresh_fakes()
    p = Pixels(13, 4)
    try:
        p.show(bytearray(9))
    except ValueError as e:
        assert "9 bytes" in str(e)
    else:
        raise AssertionError("short frame accepted")
    import neopixel

    neopixel.fail = True
    try:
        q = Pixels(13, 4)
    finally:
        neopixel.fail = False
    assert not q.ok and "OSError" in q.error and q.show(bytearray(12)) is False


# ---- button


def test_button_pins_read_the_raw_level_and_light_the_lamp():
    # The driver only reads the pin (debouncing is the core's, tests/core/button.py and tests/vectors/shell.json).
    fresh_fakes()
    pin = machine.Pin(32, machine.Pin.IN, machine.Pin.PULL_UP)
    lamp = machine.Pin(33, machine.Pin.OUT, value=0)
    b = ButtonPoller(pin, True, lamp)
    assert b.pressed() is False  # pulled up: released
    pin.drive(0)
    assert b.pressed() is True  # the contact pulls it low
    high = ButtonPoller(machine.Pin(34, machine.Pin.IN, machine.Pin.PULL_DOWN), False)
    assert high.pressed() is False
    # Bounce reaches the core unfiltered, and the core's Button turns it into one press.
    pin.drive(1)
    deb = Button(30, 3000)
    evs = []
    deb.sample(b.pressed(), 0)
    for t, level in ((10, 1), (15, 0), (20, 1), (25, 0)):
        pin.drive(level)
        evs.append(deb.sample(b.pressed(), t))
    for t in range(30, 300, 10):
        evs.append(deb.sample(b.pressed(), t))
    pin.drive(1)
    for t in range(300, 400, 10):
        evs.append(deb.sample(b.pressed(), t))
    assert [e for e in evs if e] == ["short"], evs
    b.set_lamp(True)
    b.set_lamp(True)
    b.set_lamp(False)
    assert lamp.history == [1, 0]  # repeated "on" is not written again


# ---- TTS on the UART


def _tts(chip="syn6288", busy=True):
    fresh_fakes()
    uart = machine.UART(2, 9600, tx=25, rx=26)
    pin = machine.Pin(27, machine.Pin.IN) if busy else None
    return TtsUart(uart, make_encoder(chip), pin), uart, pin


def test_tts_long_text_paced_by_busy_pin():
    tts, uart, busy = _tts()
    text = "GPU " * 80  # 320 characters: more than one 200-byte frame
    frames = tts_syn6288.synthesize(text)
    assert len(frames) >= 4
    tts.say(text, 0)
    assert uart.take() == [frames[0]]
    busy.drive(1)
    assert not tts.step(GRACE_MS + 10) and uart.take() == []
    sent = [frames[0]]
    t = GRACE_MS + 10
    while True:
        busy.drive(0)  # the chip finished a frame
        t += 50
        done = tts.step(t)
        got = uart.take()
        sent.extend(got)
        if done:
            break
        busy.drive(1)
        t += GRACE_MS
        assert not tts.step(t)
    assert sent == frames and not tts.speaking


def test_tts_stop_is_immediate_and_exact():
    tts, uart, busy = _tts()
    tts.say("第一句", 0)
    uart.take()
    tts.stop(10)
    assert uart.take() == [b"\xfd\x00\x02\x02\xfd"] and not tts.speaking


def test_tts_xfs5152_frames_and_status_polling_without_busy_pin():
    tts, uart, _ = _tts("xfs5152", busy=False)
    state = {"busy": True}

    def chip(frame):
        if frame == tts_xfs5152.STATUS:
            return b"\x41" + (b"\x4e" if state["busy"] else b"\x4f")
        return b"\x41"

    uart.responder = chip
    tts.say("你好", 0)
    assert uart.take() == [b"\xfd\x00\x06\x01\x03\x60\x4f\x7d\x59"]  # FACTS.md: the datasheet's example
    t = 0
    for _ in range(10):
        t += 100
        assert not tts.step(t)
    polls = uart.take()
    assert polls and all(f == tts_xfs5152.STATUS for f in polls)
    assert tts.answering is True
    state["busy"] = False
    done = False
    for _ in range(10):
        t += 100
        done = done or tts.step(t)
    assert done and not tts.speaking


def test_tts_absent_chip_detected_and_speech_still_ends():
    tts, uart, busy = _tts()
    t = 0
    tts.step(t)  # the idle health query goes out
    assert uart.take() == [tts_syn6288.STATUS]
    for _ in range(20):
        t += 50
        tts.step(t)
    assert tts.answering is False
    tts.say("ab", t)
    done = False
    for _ in range(100):
        t += 50
        done = done or tts.step(t)
    assert done, "speech to a missing chip must end by estimate"


def test_tts_garbage_on_the_line_is_not_an_answer():
    tts, uart, _ = _tts()
    uart.feed(b"\x00\xff\x13")
    tts.step(0)
    assert tts.answering is None
    uart.feed(b"\x41\x45")
    tts.step(10)
    assert tts.answering is True and tts.errors == 1


def test_unknown_chip_refused():
    try:
        make_encoder("sp0256")
    except ValueError as e:
        assert "sp0256" in str(e)
    else:
        raise AssertionError("unknown chip accepted")


# ---- watchdog


def test_watchdog_created_late_and_fed_only_when_all_beat():
    fresh_fakes()
    wd = Watchdog(8000)
    assert machine.WDT.instances == []  # not at construction: it could never be stopped
    wd.expect("a", 0)
    wd.expect("b", 0)
    assert wd.check(100) and machine.WDT.instances[0].timeout == 8000
    wd.beat("a", 5000)
    assert not wd.check(5000) and wd.stale(5000) == ["b"]
    wd.beat("b", 5001)
    assert wd.check(5001) and machine.WDT.instances[0].feeds == 2


def test_watchdog_ticks_wrap():
    wd = Watchdog(8000, wdt_factory=lambda ms: machine.WDT(timeout=ms))
    near_wrap = (1 << 30) - 1000 if hasattr(ticks, "add") else 0
    wd.expect("a", near_wrap)
    t = ticks.add(near_wrap, 2000)
    assert wd.check(t)


# ---- flash state


def test_store_atomic_write_and_corrupt_file():
    import os

    path = scratch("drv_state.json")
    s = Store(path)
    for p in (path, path + ".tmp"):
        try:
            os.remove(p)
        except OSError:
            pass
    assert s.load() is None and s.last_error is None
    assert s.save({"v": 1, "version": 3})
    assert s.save({"v": 1, "version": 4})
    assert s.load() == {"v": 1, "version": 4} and s.writes == 2
    d = path[: path.rindex("/")] or "/"
    base = path[path.rindex("/") + 1 :]
    names = os.listdir(d)
    assert base in names and base + ".tmp" not in names
    with open(path, "w") as f:
        f.write("[1, 2")
    assert s.load() is None and "not valid JSON" in s.last_error
