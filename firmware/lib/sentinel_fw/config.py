# The terminal's configuration file (/config.json on the board): defaults, validation and precise errors.
# A message names the field and what is wrong with it, never a secret's or password's value.
from sentinel_core import strictjson
from sentinel_fw import pins as _pins

PATH = "/config.json"
EXAMPLE_SECRET = "change-me-to-a-long-random-secret"
MIN_SECRET = 16
BOARDS = ("esp32", "esp32s3")
CHIPS = ("syn6288", "xfs5152", "none")


class ConfigError(Exception):
    """The configuration cannot be used. args[0] is the whole report, one problem per line."""


def defaults(board="esp32"):
    return {
        "board": board,
        "name": "sentinel",
        "wifi": {"ssid": None, "password": "", "hostname": "sentinel"},
        "keys": {},
        "http": {"port": 80, "window_s": 300, "max_body": 2048, "max_conn": 7, "backlog": 128},
        "time": {"ntp_host": "pool.ntp.org", "resync_s": 3600},
        "pins": dict(_pins.DEFAULTS[board]),
        "matrix": {"width": 16, "height": 16, "serpentine": True, "rotation": 0, "order": "GRB"},
        "light": {
            "brightness": 64,
            "night_brightness": 16,
            "night_p0_full": True,
            "budget_ma": 2000,
            "ma_per_led": 55,
            "fps": 25,
        },
        "tts": {
            "chip": "syn6288",
            "uart": _pins.TTS_UART[board],
            "baud": 9600,
            "volume": None,
            "speed": None,
            "busy_active_high": True,
        },
        "button": {"debounce_ms": 30, "long_ms": 3000, "active_low": True},
        "watchdog": {"timeout_ms": 10000},
        "terminal": {},
    }


# (section, key, kind, low, high): the checks every value goes through. kind: "int", "bool", "str", "password",
# "opt_int" (int or null), "choice:<a>|<b>". The "terminal" section is the state machine's own config
# (quiet hours, UTC offset, mute length...): sentinel_core.terminal_config checks it.
FIELDS = (
    ("", "name", "str", 1, 32),
    ("wifi", "ssid", "str", 1, 32),
    ("wifi", "password", "password", 0, 63),
    ("wifi", "hostname", "str", 1, 32),
    ("http", "port", "int", 1, 65535),
    ("http", "window_s", "int", 10, 3600),
    ("http", "max_body", "int", 256, 16384),
    ("http", "max_conn", "int", 2, 8),  # lwIP has 10 sockets: the listener, a new connection, NTP need theirs
    ("http", "backlog", "int", 1, 128),
    ("time", "ntp_host", "str", 1, 64),
    ("time", "resync_s", "int", 60, 86400),
    ("matrix", "width", "int", 1, 64),
    ("matrix", "height", "int", 1, 64),
    ("matrix", "serpentine", "bool", 0, 0),
    ("matrix", "rotation", "choice:0|90|180|270", 0, 0),
    ("matrix", "order", "choice:GRB|RGB", 0, 0),
    ("light", "brightness", "int", 1, 255),
    ("light", "night_brightness", "int", 0, 255),
    ("light", "night_p0_full", "bool", 0, 0),
    ("light", "budget_ma", "int", 100, 20000),
    ("light", "ma_per_led", "int", 1, 80),
    ("light", "fps", "int", 1, 60),
    ("tts", "chip", "choice:syn6288|xfs5152|none", 0, 0),
    ("tts", "uart", "int", 1, 2),
    ("tts", "baud", "choice:9600|19200|38400|115200", 0, 0),
    ("tts", "volume", "opt_int", 0, 16),
    ("tts", "speed", "opt_int", 0, 10),
    ("tts", "busy_active_high", "bool", 0, 0),
    ("button", "debounce_ms", "int", 5, 500),
    ("button", "long_ms", "int", 500, 20000),
    ("button", "active_low", "bool", 0, 0),
    ("watchdog", "timeout_ms", "int", 2000, 60000),
)
SECTIONS = ("wifi", "keys", "http", "time", "pins", "matrix", "light", "tts", "button", "watchdog", "terminal")
SECRET_WORDS = ("password", "secret")


def _check(kind, v, lo, hi):
    """None when fine, else what is wrong (never quoting the value of a secret)."""
    if kind == "int" or kind == "opt_int":
        if v is None and kind == "opt_int":
            return None
        if not isinstance(v, int) or isinstance(v, bool):
            return "must be an integer"
        if v < lo or v > hi:
            return "%d is outside %d..%d" % (v, lo, hi)
        return None
    if kind == "bool":
        return None if isinstance(v, bool) else "must be true or false"
    if kind == "str" or kind == "password":
        if not isinstance(v, str):
            return "must be a string"
        if len(v) < lo or len(v) > hi:
            return "must be %d..%d characters long" % (lo, hi)
        if kind == "password" and 0 < len(v) < 8:
            return "a WPA2 password has 8..63 characters (empty for an open network)"
        return None
    choices = kind[7:].split("|")
    for c in choices:
        if str(v) == c and (isinstance(v, str) == (not c.isdigit())):
            return None
    return "must be one of %s" % ", ".join(choices)


def parse(text, source="config.json"):
    """Parse and validate the file's text: returns the full config (defaults filled in) or raises ConfigError."""
    # strictjson: the same grammar on both interpreters (MicroPython alone would accept trailing commas).
    try:
        raw = strictjson.loads(text.encode() if isinstance(text, str) else text)
    except ValueError as e:
        raise ConfigError("%s is not valid JSON: %s" % (source, e))
    return validate(raw, source)


def validate(raw, source="config.json"):
    if not isinstance(raw, dict):
        raise ConfigError("%s: the top level must be an object {...}" % source)
    problems = []
    warnings = []
    board = raw.get("board", "esp32")
    if board not in BOARDS:
        problems.append("board: must be one of %s" % ", ".join(BOARDS))
        board = "esp32"
    cfg = defaults(board)
    for k in raw:
        if k not in cfg and not k.startswith("_"):
            problems.append("%s: unknown setting (a typo?)" % k)
    for sec in SECTIONS:
        if sec not in raw:
            continue
        v = raw[sec]
        if not isinstance(v, dict):
            problems.append("%s: must be an object {...}" % sec)
            continue
        if sec == "terminal":
            # The state machine ignores keys it does not know; a typo in quiet hours must not pass silently.
            from sentinel_core.terminal_config import DEFAULTS as TERMINAL_KEYS

            for k in v:
                if k not in TERMINAL_KEYS and not k.startswith("_"):
                    problems.append("terminal.%s: unknown setting (known: %s)" % (k, ", ".join(sorted(TERMINAL_KEYS))))
        if sec in ("keys", "terminal"):
            cfg[sec] = dict(v)
            continue
        for k in v:
            if k not in cfg[sec] and not k.startswith("_"):
                problems.append("%s.%s: unknown setting (a typo?)" % (sec, k))
            else:
                cfg[sec][k] = v[k]
    if "name" in raw:
        cfg["name"] = raw["name"]
    for sec, key, kind, lo, hi in FIELDS:
        v = cfg[sec][key] if sec else cfg[key]
        where = "%s.%s" % (sec, key) if sec else key
        if sec == "wifi" and key == "ssid" and v is None:
            problems.append("wifi.ssid: required (the network the terminal joins)")
            continue
        err = _check(kind, v, lo, hi)
        if err:
            problems.append("%s: %s" % (where, err))
    if not cfg["keys"]:
        problems.append('keys: at least one "key-id": "secret" pair is required (senders sign with it)')
    for kid in cfg["keys"]:
        sec = cfg["keys"][kid]
        if not kid or len(kid) > 64 or not all("!" <= c <= "~" for c in kid):
            problems.append("keys: a key id must be 1..64 visible ASCII characters (what X-API-Key carries)")
        elif not isinstance(sec, str):
            problems.append("keys.%s: the secret must be a string" % kid)
        elif sec == EXAMPLE_SECRET:
            problems.append(
                "keys.%s: still the example secret: generate one with "
                "python3 -c 'import secrets; print(secrets.token_hex(32))'" % kid
            )
        elif len(sec) < MIN_SECRET:
            problems.append("keys.%s: the secret is too short (at least %d characters)" % (kid, MIN_SECRET))
    for msg in _pins.check(board, cfg["pins"]):
        if msg.startswith("warning:"):
            warnings.append(msg)
        else:
            problems.append(msg)
    for k in cfg["pins"]:
        if k not in _pins.NAMES:
            problems.append("pins.%s: unknown pin name (known: %s)" % (k, ", ".join(_pins.NAMES)))
    if not problems and cfg["light"]["night_brightness"] > cfg["light"]["brightness"]:
        problems.append("light.night_brightness: must not exceed light.brightness")
    if problems:
        raise ConfigError("%s: %d problem(s):\n  %s" % (source, len(problems), "\n  ".join(problems)))
    cfg["warnings"] = warnings
    return cfg


def load(path=PATH):
    """Read and validate the board's config file; ConfigError with a readable report when it is unusable."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        raise ConfigError(
            "%s not found: copy firmware/config.example.json, fill in Wi-Fi and a key, and deploy "
            "it (python3 firmware/deploy.py --config my.json)" % path
        )
    return parse(text, path)


def secrets_of(cfg):
    """The key ring's input: {key id: secret bytes}."""
    out = {}
    for kid in cfg["keys"]:
        out[kid] = cfg["keys"][kid].encode()
    return out
