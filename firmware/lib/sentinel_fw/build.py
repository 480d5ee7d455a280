# Building the running terminal's parts (sentinel_fw.app.Sentinel) from a validated config: the core's shell glue
# (state machine, receiver, renderer, button debouncer), the drivers, and the state restored from flash. Boot-only
# code: Sentinel.__init__ drops this module from the heap once the terminal is built. A part that is missing is
# reported (Sentinel.problem), the rest keeps working.
from sentinel_fw import forget, log


def build(s, wlan, wdt_factory, config_error):
    """Sets the parts of the Sentinel s (its cfg, clock and store set), by name: glue (a sentinel_core.shell.ShellGlue,
    the saved state restored into it), frame_ms, pixels, button, tts, wifi, watchdog (button, tts, wifi None when
    absent)."""
    from sentinel_core.button import Button
    from sentinel_core.keyring import KeyRing
    from sentinel_core.layout import Layout
    from sentinel_core.receiver import Receiver
    from sentinel_core.render import Renderer
    from sentinel_core.shell import ShellGlue
    from sentinel_fw.pixels import Pixels
    from sentinel_fw.watchdog import Watchdog

    cfg = s.cfg
    now = s.clock.now()
    # The key ring's input, {key id: secret bytes}, made here: the config module is boot-only (dropped once the
    # terminal runs), and a terminal built later (a test, a rebuilt one) must not load it back into the heap.
    keys = cfg["keys"]
    secrets = {}
    for kid in keys:
        secrets[kid] = keys[kid].encode()
    receiver = Receiver(KeyRing(secrets), window=cfg["http"]["window_s"], max_body=cfg["http"]["max_body"])
    m = cfg["matrix"]
    light = cfg["light"]
    renderer = Renderer(
        Layout(m["width"], m["height"], m["serpentine"], m["rotation"], m["order"]),
        brightness=light["brightness"],
        night_brightness=light["night_brightness"],
        night_p0_full=light["night_p0_full"],
        budget_ma=light["budget_ma"],
        ma_per_led=light["ma_per_led"],
    )
    forget("sentinel_core", "wiring")  # boot-only: the LED table is built
    pixels = Pixels(cfg["pins"]["pixels"], m["width"] * m["height"])
    if not pixels.ok:
        s.problem("matrix", "LED output not available: %s" % pixels.error)
    button = _make_button(s)
    b = cfg["button"]
    glue = ShellGlue(cfg["terminal"], receiver, renderer, Button(b["debounce_ms"], b["long_ms"]), now, config_error)
    forget("sentinel_core", "terminal_config")  # boot-only: checking the terminal's settings
    tts = _make_tts(s)
    wifi = None
    if wlan is not None:
        from sentinel_fw.wifi import WiFi

        w = cfg["wifi"]
        wifi = WiFi(wlan, w["ssid"], w["password"], w["hostname"])
    watchdog = Watchdog(cfg["watchdog"]["timeout_ms"], wdt_factory=wdt_factory)
    # The clock first: the restore trusts saved deadlines as absolute only when the clock is synced.
    glue.health("clock", s.clock.synced, now)
    _restore(s, glue, now)
    if tts is None and cfg["tts"]["chip"] != "none":
        glue.health("speech", False, now, "no speech chip")
    # The modules loaded later are loaded now, while the heap is whole: the state writer (held from the first write
    # on anyway) and the metrics writer (loaded per scrape: dropped again at once), so that their names are
    # interned now. Interned names stay for good, and on a full pool the next one needs the next pool, one block
    # (~14 KB on the 64-bit Unix port) that a heap fragmented by a burst of requests cannot give; from then on no
    # module loads. tests/test_runtime_unix.py's small-heap storm lost its state writes and its scrape that way
    # (the first write and scrape came during or after the storm; docs/SHELL_CONTRACT.md has the runs).
    import sentinel_core.metrics
    import sentinel_core.persist  # noqa: F401

    forget("sentinel_core", "metrics")
    s.glue = glue
    s.frame_ms = 1000 // light["fps"]
    s.pixels = pixels
    s.button = button
    s.tts = tts
    s.wifi = wifi
    s.watchdog = watchdog


def _make_button(s):
    from machine import Pin

    from sentinel_fw.buttonpoll import ButtonPoller

    b = s.cfg["button"]
    pins = s.cfg["pins"]
    try:
        pull = Pin.PULL_UP if b["active_low"] else Pin.PULL_DOWN
        pin = Pin(pins["button"], Pin.IN, pull)
        lamp = None
        if pins.get("button_led") is not None:
            lamp = Pin(pins["button_led"], Pin.OUT, value=0)
        return ButtonPoller(pin, b["active_low"], lamp)
    except Exception as e:  # noqa: BLE001 - a missing or broken button leaves the terminal running without it, reported
        s.problem("button", "ACK button not available: %s: %s" % (type(e).__name__, e))
        return None


def _make_tts(s):
    t = s.cfg["tts"]
    if t["chip"] == "none":
        return None
    from machine import UART, Pin

    from sentinel_fw.tts_uart import TtsUart, make_encoder

    pins = s.cfg["pins"]
    try:
        enc = make_encoder(t["chip"], t["volume"], t["speed"])
        uart = UART(t["uart"], baudrate=t["baud"], tx=pins["tts_tx"], rx=pins["tts_rx"], timeout=0)
        busy = None
        if pins.get("tts_busy") is not None:
            busy = Pin(pins["tts_busy"], Pin.IN)
        return TtsUart(uart, enc, busy, t["busy_active_high"])
    except Exception as e:  # noqa: BLE001 - a missing or broken chip leaves the terminal running silent, reported
        s.problem("speech", "%s not available: %s: %s" % (t["chip"], type(e).__name__, e))
        return None


def _restore(s, glue, now):
    store = s.store
    if store is None:
        return
    d = store.load()
    if store.last_error:
        s.problem("state", store.last_error)
    if d is None:
        return
    try:
        glue.restore(d, now)  # the replay floor first, then the terminal's part
        log("state restored: %d alarm(s)" % len(d.get("alarms", ())))
    except ValueError as e:
        s.problem("state", "saved state ignored: %s" % e)
    forget("sentinel_core", "restore")  # boot-only: reading the state back
