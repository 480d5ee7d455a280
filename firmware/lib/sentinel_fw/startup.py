# Startup: from the config file to a running terminal, or to the config-error screen when the file cannot be used.
# Only the boot needs this module (and config, pins): a .mpy's bytecode sits in the heap, so all three are dropped
# from memory once the terminal is built.
import gc
import sys
import time

from sentinel_fw import ticks
from sentinel_fw.app import Sentinel, log


def detect_board():
    """"esp32s3" on an ESP32-S3, else "esp32" (also the answer under CPython and WebAssembly)."""
    try:
        import os
        m = os.uname().machine
    except Exception:
        return "esp32"
    return "esp32s3" if "S3" in m.upper() else "esp32"



class ConfigErrorTerminal:
    """What runs when the config cannot be used: the matrix shows config_error on the board's default pins and the
    console repeats the reason. No Wi-Fi, no HTTP and no watchdog: a human has to fix the file."""

    def __init__(self, message, board=None):
        from sentinel_core.layout import Layout
        from sentinel_core.render import Renderer
        from sentinel_core.terminal import Terminal
        from sentinel_fw import pins
        from sentinel_fw.pixels import Pixels
        self.message = message
        self.board = board or detect_board()
        self.terminal = Terminal()
        self.terminal.set_health("config", False, 0, message)
        self.renderer = Renderer(Layout(16, 16), brightness=32, night_brightness=32, budget_ma=500)
        self.pixels = Pixels(pins.DEFAULTS[self.board]["pixels"], 256)

    def frame_step(self, t_ms):
        buf = self.renderer.render(self.terminal.display(0), t_ms)
        self.pixels.show(buf)
        return buf

    def announce(self):
        log("CONFIG ERROR, the terminal is not running:")
        for line in self.message.split("\n"):
            print("    " + line)

    def run_forever(self):
        n = 0
        while True:
            if n % 1500 == 0:  # every ~30 s at 50 fps, for whoever opens the serial console later
                self.announce()
            self.frame_step(ticks.ms())
            n += 1
            time.sleep(0.02)


def build(config_path="/config.json", state_path="/state.json"):
    """Load the config and build the terminal from the real modules: a Sentinel, or a ConfigErrorTerminal."""
    from sentinel_fw import config
    try:
        cfg = config.load(config_path)
    except config.ConfigError as e:
        return ConfigErrorTerminal(str(e))
    for w in cfg["warnings"]:
        log(w)
    import network
    import ntptime

    from sentinel_fw.clock import Clock
    from sentinel_fw.store import Store
    clock = Clock(ntptime, cfg["time"]["ntp_host"], cfg["time"]["resync_s"])
    return Sentinel(cfg, clock, Store(state_path), network.WLAN(network.STA_IF))


# Modules only the boot needs: their bytecode sits in the heap (a .mpy is loaded into RAM), so they are dropped
# once the terminal is built. Anything still calling into them keeps them alive; nothing does after boot() returns.
BOOT_ONLY = ("config", "pins", "startup")


def drop_boot_modules():
    import sentinel_fw
    for name in BOOT_ONLY:
        sys.modules.pop("sentinel_fw." + name, None)
        if hasattr(sentinel_fw, name):
            delattr(sentinel_fw, name)
    gc.collect()


def boot(config_path="/config.json", state_path="/state.json"):
    """Build the terminal and return it, with the boot-only modules dropped (this one too: the caller lets go of
    it, then runs app.main(terminal)). A config that cannot be used shows config_error forever instead."""
    terminal = build(config_path, state_path)
    if isinstance(terminal, ConfigErrorTerminal):
        terminal.run_forever()
    drop_boot_modules()
    return terminal
