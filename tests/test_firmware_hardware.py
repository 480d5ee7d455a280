"""The hardware docs and the firmware agree: the pinout table, the wiring table and drawing, the example config
and the config defaults name the same GPIOs; the power budget uses the firmware's defaults."""

import json
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "firmware", "lib"))

from sentinel_fw import config, pins  # noqa: E402


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def _pinout_rows():
    rows = {}
    for line in _read("hardware", "PINOUT.md").splitlines():
        m = re.match(r"\|\s*[^|]+\|\s*`(\w+)`\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|", line)
        if m:
            rows[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return rows


def test_pinout_table_matches_firmware_defaults_for_both_boards():
    rows = _pinout_rows()
    assert set(rows) == set(pins.NAMES), rows
    for name in pins.NAMES:
        assert rows[name] == (pins.DEFAULTS["esp32"][name], pins.DEFAULTS["esp32s3"][name]), name


def test_pinout_names_the_tts_uart_of_each_board():
    text = _read("hardware", "PINOUT.md")
    assert "UART%d on the ESP32 " % pins.TTS_UART["esp32"] in text
    assert "UART%d on the ESP32-S3" % pins.TTS_UART["esp32s3"] in text


def test_wiring_table_and_drawing_use_the_esp32_defaults():
    text = _read("hardware", "WIRING.md")
    table = {int(n) for n in re.findall(r"^\| ESP32 GPIO(\d+) \|", text, re.M)}
    assert table == set(pins.DEFAULTS["esp32"].values()), table
    drawing = text.split("```")[1]
    for name, n in pins.DEFAULTS["esp32"].items():
        assert "GPIO%d" % n in drawing and "(%s)" % name in drawing, name
    # No GPIO in the drawing that the firmware does not use.
    assert {int(n) for n in re.findall(r"GPIO(\d+)", drawing)} == set(pins.DEFAULTS["esp32"].values())


def test_bench_checklist_names_the_default_pins():
    text = _read("hardware", "BENCH_CHECKLIST.md")
    d = pins.DEFAULTS["esp32"]
    for key, label in (
        ("pixels", "data"),
        ("tts_tx", "TTS TX"),
        ("tts_rx", "RX"),
        ("tts_busy", "BUSY"),
        ("button", "button"),
        ("button_led", "lamp"),
    ):
        assert "%s GPIO%d" % (label, d[key]) in text, (key, label)


def test_default_pins_are_clean_on_both_boards():
    for board in pins.DEFAULTS:
        assert pins.check(board, pins.DEFAULTS[board]) == [], board


def test_example_config_uses_the_defaults():
    ex = json.loads(_read("firmware", "config.example.json"))
    assert ex["pins"] == pins.DEFAULTS[ex["board"]]
    assert ex["tts"]["uart"] == pins.TTS_UART[ex["board"]]
    d = config.defaults(ex["board"])
    for sec in ("matrix", "light", "button", "watchdog", "http"):
        assert ex[sec] == d[sec], sec


def test_example_config_refused_until_the_secret_is_changed():
    text = _read("firmware", "config.example.json")
    with pytest.raises(config.ConfigError) as e:
        config.parse(text)
    assert "still the example secret" in str(e.value) and config.EXAMPLE_SECRET not in str(e.value)
    cfg = config.parse(text.replace(config.EXAMPLE_SECRET, "x" * 40))
    assert cfg["terminal"]["utc_offset_min"] == 480 and cfg["warnings"] == []


def test_power_budget_uses_the_firmware_defaults():
    text = _read("hardware", "POWER.md")
    light = config.defaults()["light"]
    assert "%d x 55 = 14,080 mA" % 256 in text
    assert '"budget_ma": %d' % light["budget_ma"] in text
    # WLED's estimate for the P0 row, recomputed: 256 LEDs of pure red at the default brightness cap.
    p0 = round(256 * light["brightness"] * light["ma_per_led"] / 765)
    assert "%s mA" % format(p0, ",") in text and "| %d (default cap) |" % light["brightness"] in text
    assert "night" in text and "%d |" % light["night_brightness"] in text


def test_bom_has_the_parts_the_wiring_needs():
    bom = _read("hardware", "BOM.md")
    for part in (
        "74AHCT125",
        "1000 uF",
        "330 ohm",
        "SYN6288",
        "XFS5152CE",
        "WS2812B",
        "ESP32-S3",
        "5 V 4 A",
        "S8050",
        "PAM8403",
        "enclosure",
    ):
        assert part in bom, part
