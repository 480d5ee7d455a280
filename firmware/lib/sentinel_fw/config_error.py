# What runs when the config file cannot be used: the matrix shows config_error on the board's default pins and the
# console repeats the reason. Its own module so that a board with a good config never loads it (startup imports it
# only on that path): at boot every byte of loaded bytecode counts.
import time

from sentinel_fw import log, ticks


def detect_board():
    """ "esp32s3" on an ESP32-S3, else "esp32" (also the answer under CPython and WebAssembly)."""
    try:
        import os

        m = os.uname().machine
    except Exception:  # noqa: BLE001 - a port without uname().machine: the plain ESP32's pins
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
