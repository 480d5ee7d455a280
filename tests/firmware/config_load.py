# The config loader: defaults, every kind of mistake named precisely, secrets never echoed.
# The example file itself is checked on CPython (tests/test_firmware_config.py): the runner has no copy of it.
from _fw import SECRET, config_dict, config_text

from sentinel_fw import config, pins


def _error(text):
    try:
        config.parse(text)
    except config.ConfigError as e:
        return str(e)
    raise AssertionError("accepted: %s" % text)


def test_minimal_config_gets_defaults():
    cfg = config.parse(config_text())
    assert cfg["pins"] == pins.DEFAULTS["esp32"]
    assert cfg["matrix"]["width"] == 16 and cfg["matrix"]["order"] == "GRB"
    assert cfg["tts"]["chip"] == "syn6288" and cfg["tts"]["uart"] == 2
    assert cfg["http"]["port"] == 80
    assert cfg["terminal"] == {"utc_offset_min": 480}
    assert config.secrets_of(cfg) == {"gw-test": SECRET.encode()}


def test_s3_board_gets_s3_pins():
    cfg = config.parse(config_text(board="esp32s3"))
    assert cfg["pins"]["pixels"] == 4 and cfg["tts"]["uart"] == 1


def test_trailing_comma_refused_on_both_interpreters():
    msg = _error('{"board": "esp32",}')
    assert "not valid JSON" in msg


def test_not_json():
    assert "not valid JSON" in _error("wifi = lab")


def test_missing_wifi_and_keys_reported_together():
    msg = _error('{"board": "esp32"}')
    assert "2 problem(s)" in msg, msg
    assert "wifi.ssid: required" in msg
    assert "keys: at least one" in msg


def test_wrong_types_and_ranges_named():
    msg = _error(config_text(matrix={"width": "16", "rotation": 45}, light={"fps": 0}, tts={"chip": "sam"}))
    assert "matrix.width: must be an integer" in msg, msg
    assert "matrix.rotation: must be one of 0, 90, 180, 270" in msg, msg
    assert "light.fps: 0 is outside 1..60" in msg, msg
    assert "tts.chip: must be one of syn6288, xfs5152, none" in msg, msg


def test_typo_in_a_key_is_caught():
    msg = _error(config_text(light={"brigthness": 30}))
    assert "light.brigthness: unknown setting" in msg, msg


def test_secret_and_password_never_echoed():
    short = "tooshort"
    msg = _error(config_text(keys={"k1": short}, wifi={"ssid": "lab", "password": "abc"}))
    assert "keys.k1: the secret is too short" in msg, msg
    assert "wifi.password: a WPA2 password has 8..63" in msg, msg
    assert short not in msg and "abc" not in msg


def test_flash_pin_refused_strapping_pin_warned():
    msg = _error(config_text(pins={"pixels": 6}))
    assert "pins.pixels: GPIO6 is used by the flash" in msg, msg
    cfg = config.parse(config_text(pins={"button_led": 2}))
    assert cfg["warnings"] and "strapping" in cfg["warnings"][0]


def test_input_only_pin_cannot_drive():
    msg = _error(config_text(pins={"tts_tx": 34}))
    assert "GPIO34 is input-only" in msg, msg


def test_pin_used_twice():
    msg = _error(config_text(pins={"button": 13}))
    assert "pins.button: GPIO13 is already pins.pixels" in msg, msg


def test_optional_pins_may_be_null():
    cfg = config.parse(config_text(pins={"tts_busy": None, "button_led": None}))
    assert cfg["pins"]["tts_busy"] is None


def test_night_brighter_than_day_refused():
    assert "night_brightness" in _error(config_text(light={"brightness": 10, "night_brightness": 20}))


def test_missing_file_says_what_to_do():
    try:
        config.load("/no/such/config.json")
    except config.ConfigError as e:
        assert "not found" in str(e) and "config.example.json" in str(e)
    else:
        raise AssertionError("missing file accepted")


def test_validate_does_not_mutate_input():
    d = config_dict(light={"fps": 30})
    config.validate(d)
    assert d["light"] == {"fps": 30}


def test_typo_in_the_terminal_section_is_caught():
    msg = _error(config_text(terminal={"quiet_strat": "23:00"}))
    assert "terminal.quiet_strat: unknown setting" in msg and "quiet_start" in msg, msg
