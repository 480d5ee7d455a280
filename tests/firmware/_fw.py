# Shared helpers for the firmware tests (not a test module: the runner skips names starting with "_").
import json

SECRET = "0123456789abcdef0123456789abcdef"
KEY_ID = "gw-test"


def config_dict(**sections):
    d = {
        "board": "esp32",
        "wifi": {"ssid": "lab", "password": "password123"},
        "keys": {KEY_ID: SECRET},
        "terminal": {"utc_offset_min": 480},
    }
    for k in sections:
        d[k] = sections[k]
    return d


def config_text(**sections):
    return json.dumps(config_dict(**sections))


def fresh_fakes():
    import machine
    import network
    import ntptime
    from neopixel import NeoPixel

    import sentinel_fw

    sentinel_fw.quiet = True  # the board's log switch (the package holds the log)
    machine.reset_fakes()
    NeoPixel.instances = []
    network.WLAN.instances = []
    network.ap_up = True
    network.connect_after = 0
    ntptime.fail = False
    ntptime.calls = 0


class FakeTime:
    """A settable wall clock (Unix seconds) standing in for time.time()."""

    def __init__(self, t=1764460800):
        self.t = t

    def __call__(self):
        return self.t


def signed(body, now, key_id=KEY_ID, secret=SECRET, path="/api/v1/send_msg"):
    """Headers and body of a signed request for path, as the gateway sends it."""
    from sentinel_core.signing import scope, sign

    if isinstance(body, dict):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    ts = str(now)
    return {
        "Content-Type": "application/json",
        "X-API-Key": key_id,
        "X-Timestamp": ts,
        "X-Signature": sign(secret.encode(), ts, body, scope("POST", path)),
    }, body


def preset_body(name, text=None, key=None, id=None):
    from sentinel_core.alarm import preset

    return preset(name, text, key=key, id=id).to_wire()


def scratch(name):
    """A path for a test file: the root of MicroPython's in-memory file system, a temp dir on CPython (never the
    host's real root)."""
    import sys

    if sys.implementation.name == "micropython":
        return "/" + name
    import tempfile

    return tempfile.gettempdir() + "/sentinel_fw_test_" + name


STATE_PATH = scratch("fw_state.json")


def boot(cfg_sections=None, state_path=STATE_PATH, now=1764460800, keep_state=False):
    """A Sentinel on fake hardware with a fake wall clock; returns (sentinel, fake time)."""
    import os

    import network
    import ntptime

    from sentinel_fw import config
    from sentinel_fw.app import Sentinel
    from sentinel_fw.clock import Clock
    from sentinel_fw.store import Store

    if not keep_state:
        fresh_fakes()
        for p in (state_path, state_path + ".tmp"):
            try:
                os.remove(p)
            except OSError:
                pass
    cfg = config.validate(config_dict(**(cfg_sections or {})))
    ft = FakeTime(now)
    clock = Clock(ntptime, "pool.ntp.org", 3600, time_fn=ft)
    s = Sentinel(cfg, clock, Store(state_path), network.WLAN(network.STA_IF))
    return s, ft


def chip_answers(uart):
    """Make the fake UART behave like a SYN6288 that is idle: accept every frame, answer status queries idle."""

    def respond(frame):
        if frame == b"\xfd\x00\x02\x21\xde":
            return b"\x41\x4f"
        return b"\x41"

    uart.responder = respond
