"""The board's own server on CPython: microdot and the firmware's modules as they run on the ESP32, with the
project's fakes of machine, neopixel, network and ntptime. `python tests/board_cpython.py CONFIG STATE` boots the
terminal from the config file (sentinel_fw.startup) and serves it (app.main) until SIGINT/SIGTERM. Used by the
hostile corpus test and bench/bench_slowclients.py next to the MicroPython Unix port (tests/unixport.py)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class Board:
    """This script in a subprocess on a free loopback port (a context manager): .port, .key_id, .secret."""

    def __init__(self, directory, **cfg):
        sys.path.insert(0, HERE)
        import unixport  # the same config and key as the Unix-port box

        sys.path.pop(0)
        self.port = unixport.free_port()
        self.dir = str(directory)
        self.config = os.path.join(self.dir, "config.json")
        with open(self.config, "w") as f:
            json.dump(unixport.config(http={"port": self.port}, **cfg), f)
        self.log = os.path.join(self.dir, "board.log")
        self.key_id, self.secret = unixport.KEY_ID, unixport.SECRET
        self.proc = None

    def __enter__(self):
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), self.config, os.path.join(self.dir, "state.json")],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("the board exited: " + open(self.log).read()[-2000:])
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.__exit__()
        raise RuntimeError("the board did not listen: " + open(self.log).read()[-2000:])

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def main(config_path, state_path):
    # The fakes go on the path in the board's own process only, never in a test's or the bench's.
    sys.path[:0] = [os.path.join(HERE, "firmware", "fakes"), os.path.join(ROOT, "firmware", "lib")]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from sentinel_fw import app, startup

    terminal = startup.boot(config_path, state_path)
    try:
        app.main(terminal)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
