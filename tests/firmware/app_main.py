# Booting the way main.py does: startup.build() from a config file, the config-error mode, and the real asyncio tasks
# running for a moment on the fakes.
import asyncio

from _fw import boot, config_text, fresh_fakes, scratch

import sentinel_fw
from sentinel_fw import app, config_error, startup


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def test_build_from_a_valid_file_gives_a_running_terminal():
    fresh_fakes()
    _write(scratch("cfg_ok.json"), config_text(name="room-a"))
    s = startup.build(scratch("cfg_ok.json"), scratch("cfg_ok_state.json"))
    assert isinstance(s, app.Sentinel) and s.cfg["name"] == "room-a"
    assert s.wifi is not None and s.wifi.ssid == "lab"
    # The config module and pins were dropped once the file was checked, before the terminal was built, and
    # building it did not load them back: they are not in the heap at boot's peak.
    import sys

    assert "sentinel_fw.config" not in sys.modules and "sentinel_fw.pins" not in sys.modules


def test_missing_config_shows_config_error_on_the_leds():
    from neopixel import NeoPixel

    fresh_fakes()
    t = startup.build("/no/such/config.json")
    assert isinstance(t, config_error.ConfigErrorTerminal)
    assert "not found" in t.message
    # The default pin of the board, whatever the file would have said.
    assert NeoPixel.instances[-1].pin.id == 13
    lit = None
    for ms in range(0, 2000, 50):
        buf = t.frame_step(ms)
        if max(buf) > 0:
            lit = bytes(buf)
            break
    assert lit is not None, "config_error pattern never lit"
    # Magenta in GRB order: red and blue, no green.
    g = max(lit[i] for i in range(0, len(lit), 3))
    r = max(lit[i + 1] for i in range(0, len(lit), 3))
    b = max(lit[i + 2] for i in range(0, len(lit), 3))
    assert g == 0 and r > 0 and b > 0, (r, g, b)
    assert NeoPixel.instances[-1].last == lit


def test_invalid_config_message_names_the_field_and_hides_the_secret():
    fresh_fakes()
    _write(scratch("cfg_bad.json"), config_text(keys={"gw": "short"}, light={"fps": 999}))
    t = startup.build(scratch("cfg_bad.json"))
    assert isinstance(t, config_error.ConfigErrorTerminal)
    assert "light.fps" in t.message and "keys.gw" in t.message and 'short"' not in t.message
    lines = []
    sentinel_fw.quiet = False
    import builtins

    real_print = builtins.print
    try:
        builtins.print = lambda *a: lines.append(" ".join(str(x) for x in a))
        t.announce()
    finally:
        builtins.print = real_print
        sentinel_fw.quiet = True
    assert lines[0].startswith("[sentinel] CONFIG ERROR") and any("light.fps" in x for x in lines), lines


def test_bad_terminal_section_is_a_config_error_on_the_running_box():
    s, ft = boot(cfg_sections={"terminal": {"quiet_start": "25:00"}})
    st = s.status(ft())
    assert st["health"]["config"] is False and "25:00" in (st["health"]["config_detail"] or ""), st["health"]
    assert s.terminal.display(ft()).pattern == "config_error"


async def test_the_real_tasks_run_and_feed_the_watchdog():
    import machine
    from neopixel import NeoPixel

    s, ft = boot()
    tasks = [asyncio.create_task(c) for c in s.tasks()]
    try:
        await asyncio.sleep(0.7)  # the network task runs every 500 ms: two steps join the fake AP
    finally:
        for t in tasks:
            t.cancel()
    await asyncio.sleep(0)
    assert NeoPixel.instances[-1].writes >= 3, NeoPixel.instances[-1].writes
    assert machine.WDT.instances and machine.WDT.instances[-1].feeds >= 1
    assert s.wifi.connected
    assert s.watchdog.stale(s.watchdog._beats["frame"]) == []


def test_terminal_keeps_working_after_boot_modules_are_dropped():
    import sys

    from _fw import preset_body, signed

    s, ft = boot()
    startup.drop_boot_modules()
    assert "sentinel_fw.config" not in sys.modules and "sentinel_fw.pins" not in sys.modules
    assert "sentinel_fw.startup" not in sys.modules
    h, b = signed(preset_body("p0", "after the drop", key="k"), ft())
    status, _ = s.handle_http("POST", "/api/v1/send_msg", h, b)
    assert status == 200
    assert s.frame_step(1000) is not None and s.status(ft())["device"]["board"] == "esp32"


def test_boot_returns_the_running_terminal_without_the_boot_modules():
    import sys

    fresh_fakes()
    _write(scratch("cfg_boot.json"), config_text(name="room-b"))
    s = startup.boot(scratch("cfg_boot.json"), scratch("cfg_boot_state.json"))
    assert isinstance(s, app.Sentinel) and s.cfg["name"] == "room-b"
    for name in ("config", "pins", "startup"):
        assert "sentinel_fw." + name not in sys.modules, name
    assert s.frame_step(0) is not None


def test_board_boot_and_main_in_safe_mode():
    import os
    import sys

    if sys.implementation.name != "micropython":
        return  # main.py looks at the file system root: only the MicroPython VFS is a safe place for that
    import builtins

    _write("/safe_mode", "")
    lines = []
    real_print = builtins.print
    builtins.print = lambda *a: lines.append(" ".join(str(x) for x in a))
    try:
        import boot  # noqa: F401 - runs the board's boot.py (no esp module here: skipped quietly)
        import main  # noqa: F401 - returns at once in safe mode instead of starting the app and its watchdog
    finally:
        builtins.print = real_print
        os.remove("/safe_mode")
    assert any("safe mode" in x for x in lines), lines


async def test_run_serves_real_http_on_cpython():
    import sys

    if sys.implementation.name == "micropython":
        return  # the WebAssembly port has no sockets; on the board this is microdot's own start_server
    import socket

    from _fw import preset_body, signed

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    s, ft = boot(cfg_sections={"http": {"port": port}})
    task = asyncio.create_task(s.run())
    try:
        for _ in range(50):
            await asyncio.sleep(0.02)
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                continue
        h, b = signed(preset_body("p0", "over real TCP", key="tcp"), ft())
        head = "POST /api/v1/send_msg HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % len(b)
        head += "".join("%s: %s\r\n" % kv for kv in h.items()) + "Connection: close\r\n\r\n"
        writer.write(head.encode() + b)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 5)
        writer.close()
    finally:
        task.cancel()
    assert raw.startswith(b"HTTP/1.0 200") or raw.startswith(b"HTTP/1.1 200"), raw[:200]
    assert b'"level": "P0"' in raw and s.terminal.display(ft()).key == "tcp"
