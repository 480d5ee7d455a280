"""The board's own server on CPython: microdot and the firmware's modules as they run on the ESP32, with the
project's fakes of machine, neopixel, network and ntptime. `python tests/board_cpython.py CONFIG STATE` boots the
terminal from the config file (sentinel_fw.startup) and serves it (app.main) until SIGINT/SIGTERM. Used by the
hostile corpus test and bench/bench_slowclients.py next to the MicroPython Unix port (tests/unixport.py)."""
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(HERE, "firmware", "fakes"), os.path.join(ROOT, "firmware", "lib")]


def main(config_path, state_path):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from sentinel_fw import app, startup
    terminal = startup.boot(config_path, state_path)
    try:
        app.main(terminal)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
