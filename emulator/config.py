"""The emulator's per-user configuration: where it lives, its defaults, first-start secret, and validation.

The file is shared with the host_client CLI, which reads `url`, `key_id` and `secret` from it to reach a local
terminal without any flags: those three key names are a contract and must not change.
"""

import copy
import difflib
import ipaddress
import json
import os
import secrets
import shutil
import socket
import stat
import sys

# A configuration the emulator must not start with (the message names the key, never the secret): the host
# side's one ConfigError, re-exported here.
from host_client.errors import ConfigError

ENV_PATH = "SENTINEL_EMULATOR_CONFIG"
APP_DIR = "gpu-sentinel"
FILE_NAME = "emulator.json"

DEFAULTS = {
    "host": "127.0.0.1",
    "port": 8765,
    "width": 16,
    "height": 16,
    "serpentine": True,
    "rotation": 0,
    "fps": 30,
    # The box's defaults (see sentinel_core.render / power): the window shows what the LEDs would show.
    "brightness": 128,
    "night_brightness": 16,
    "night_p0_full": True,  # a P0 keeps full brightness in quiet hours (night dimming applies below P0)
    "budget_ma": 730,
    "utc_offset_min": None,
    # Signed requests remembered against replay. The board keeps 64 (its heap); a laptop can afford more, so a
    # burst of more than 64 alarms within one second is not refused as stale.
    "replay_capacity": 2048,
    "voice": {"rate": 170, "en": "gmw/en-us", "zh": "auto"},
    # Passed to the core's Terminal unchanged (its keys are documented in docs/STATE_MACHINE.md).
    "terminal": {},
}

# Secrets that appear in the RFC, in docs or in examples: anyone can sign with them.
WELL_KNOWN_SECRETS = frozenset(
    [
        "AI#TrainSecureHMACSecretKey2026",
        "secret",
        "changeme",
        "change-me",
        "change_me",
        "example",
        "example-secret",
        "test",
        "test-secret",
        "password",
        "sentinel",
        "gpu-sentinel",
        "your-secret",
        "your_secret_here",
        "0123456789abcdef",
        "00000000000000000000000000000000",
    ]
)
MIN_REMOTE_SECRET_LEN = 16

_TYPES = {
    "url": str,
    "key_id": str,
    "secret": str,
    "host": str,
    "port": int,
    "width": int,
    "height": int,
    "serpentine": bool,
    "rotation": int,
    "fps": int,
    "brightness": int,
    "night_brightness": int,
    "night_p0_full": bool,
    "budget_ma": int,
    "replay_capacity": int,
    "voice": dict,
    "terminal": dict,
}


def _terminal_keys():
    from sentinel_core.terminal_config import DEFAULTS as CORE

    return frozenset(CORE) | {"debounce_ms", "long_ms"}


# The terminal section goes to the core's Terminal (its settings) plus the button's timing; keys starting with "_"
# are comments, as on the box.
TERMINAL_KEYS = _terminal_keys()
VOICE_KEYS = frozenset(("rate", "en", "zh"))


def default_path(environ=None):
    env = os.environ if environ is None else environ
    explicit = env.get(ENV_PATH)
    if explicit:
        return explicit
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, APP_DIR, FILE_NAME)


def url_for(host, port):
    shown = "[%s]" % host if ":" in host else host
    return "http://%s:%d" % (shown, port)


def new_identity():
    """A fresh key id and secret: the secret is the string itself (its UTF-8 bytes are the HMAC key)."""
    return "emu-" + secrets.token_hex(4), secrets.token_hex(32)


def is_loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_weak_secret(secret):
    return secret in WELL_KNOWN_SECRETS or len(secret) < MIN_REMOTE_SECRET_LEN


def validate(cfg):
    """Check types and ranges; raise ConfigError naming the first bad key. Returns cfg."""
    for key, want in _TYPES.items():
        if key not in cfg:
            raise ConfigError("config key %r is missing" % key)
        value = cfg[key]
        ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
        if not ok:
            raise ConfigError("config key %r must be %s, got %s" % (key, want.__name__, type(value).__name__))
    # Nested sections are refused key by key, as the box refuses them: a typo in quiet hours (terminal.quiet_star)
    # or the mute (terminal.mute) must not pass silently and leave the default in force.
    for section, known in (("terminal", TERMINAL_KEYS), ("voice", VOICE_KEYS)):
        for k in cfg[section]:
            if k not in known and not str(k).startswith("_"):
                raise ConfigError(
                    "config key '%s.%s' is not a setting%s; known: %s"
                    % (section, k, _did_you_mean(k, known, section + "."), ", ".join(sorted(known)))
                )
    if not cfg["secret"]:
        raise ConfigError("config key 'secret' is empty")
    if not cfg["key_id"] or len(cfg["key_id"]) > 64 or not all("!" <= c <= "~" for c in cfg["key_id"]):
        raise ConfigError("config key 'key_id' must be 1..64 visible ASCII characters (what X-API-Key carries)")
    if not 0 <= cfg["port"] < 65536:
        raise ConfigError("config key 'port' must be 0..65535 (0: any free port), got %d" % cfg["port"])
    for key in ("width", "height"):
        if not 1 <= cfg[key] <= 64:
            raise ConfigError("config key %r must be 1..64, got %d" % (key, cfg[key]))
    if cfg["rotation"] not in (0, 90, 180, 270):
        raise ConfigError("config key 'rotation' must be 0, 90, 180 or 270, got %d" % cfg["rotation"])
    if not 1 <= cfg["fps"] <= 120:
        raise ConfigError("config key 'fps' must be 1..120, got %d" % cfg["fps"])
    for key in ("brightness", "night_brightness"):
        if not 0 <= cfg[key] <= 255:
            raise ConfigError("config key %r must be 0..255, got %d" % (key, cfg[key]))
    if not 1 <= cfg["replay_capacity"] <= 100000:
        raise ConfigError("config key 'replay_capacity' must be 1..100000, got %d" % cfg["replay_capacity"])
    off = cfg.get("utc_offset_min")
    if off is not None and (not isinstance(off, int) or isinstance(off, bool) or not -840 <= off <= 840):
        raise ConfigError("config key 'utc_offset_min' must be null or minutes in -840..840")
    if not is_loopback(cfg["host"]) and is_weak_secret(cfg["secret"]):
        raise ConfigError(
            "refusing to listen on %s with a well-known or short secret: anyone on the network could sign alarms. "
            "Use a random secret of at least %d characters (delete the config file to have one generated)"
            % (cfg["host"], MIN_REMOTE_SECRET_LEN)
        )
    return cfg


def merge(base, override):
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def _write_private(path, data):
    """Create the file readable by its owner only, from the first byte (no window with wider permissions)."""
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")


def _did_you_mean(key, known, prefix=""):
    close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
    return " (did you mean '%s%s'?)" % (prefix, close[0]) if close else " (a typo?)"


def load(path=None, overrides=None, environ=None):
    """Load (creating on first start) the config file. Returns (config, path, created, warnings).

    overrides (e.g. from the command line) apply to this run only and are not written back.
    """
    path = path or default_path(environ)
    warnings = []
    created = False
    if not os.path.exists(path):
        key_id, secret = new_identity()
        stored = {"url": url_for(DEFAULTS["host"], DEFAULTS["port"]), "key_id": key_id, "secret": secret}
        stored.update(copy.deepcopy(DEFAULTS))
        try:
            _write_private(path, stored)
            created = True
        except FileExistsError:
            pass  # another process created it first: read theirs so both agree on the secret
        except OSError as e:
            raise ConfigError(
                "cannot create config %s: %s (give another with --config or $%s)" % (path, e.strerror or e, ENV_PATH)
            ) from None
    try:
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
    except OSError as e:
        raise ConfigError("cannot read config %s: %s" % (path, e.strerror or e)) from None
    except ValueError as e:
        raise ConfigError("cannot read config %s: %s" % (path, e)) from None
    if not isinstance(stored, dict):
        raise ConfigError("config %s must hold a JSON object" % path)
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077:
        warnings.append("config %s is readable by others (mode %o): run chmod 600 on it" % (path, mode))
    # refused as the gateway and the probe refuse theirs: a typo must not leave the default silently in force
    unknown = sorted(k for k in set(stored) - set(_TYPES) - set(DEFAULTS) if not str(k).startswith("_"))
    if unknown:
        k = unknown[0]
        raise ConfigError(
            "config %s: key %r is not a setting%s" % (path, k, _did_you_mean(k, set(_TYPES) | set(DEFAULTS)))
        )
    cfg = merge(DEFAULTS, stored)
    cfg = merge(cfg, overrides or {})
    if "url" not in cfg:
        cfg["url"] = url_for(cfg["host"], cfg["port"])
    validate(cfg)
    return cfg, path, created, warnings


def listen_url(cfg):
    """The URL a local sender uses for this run (it differs from cfg['url'] when --host/--port override it)."""
    host = cfg["host"]
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return url_for(host, cfg["port"])


def remote_url(cfg, hostname=None):
    """The URL another machine uses for this run, or None when it listens on loopback only (no other machine can
    reach it). Listening on every address, it is this host's name (the addresses are the network's business)."""
    host = cfg["host"]
    if is_loopback(host):
        return None
    if host in ("0.0.0.0", "::", ""):
        host = hostname or socket.gethostname()
    return url_for(host, cfg["port"])


def sender_program(which=None, executable=None, cwd=None, environ=None):
    """How to run sentinel-send from the shell that started the emulator: its name when it is on that shell's PATH,
    else the script next to this Python, relative to cwd when inside it. Under make (MAKELEVEL is set) the PATH is
    make's own, which `make emulator` extends with .venv/bin: the operator's shell does not have it."""
    which = which or shutil.which
    environ = os.environ if environ is None else environ
    if which("sentinel-send") and not environ.get("MAKELEVEL"):
        return "sentinel-send"
    executable = executable or sys.executable
    script = os.path.join(os.path.dirname(executable), "sentinel-send")
    if not os.path.exists(script):
        return "%s -m host_client.cli" % executable
    cwd = cwd or os.getcwd()
    rel = os.path.relpath(script, cwd)
    return rel if not rel.startswith("..") else script


def send_command(cfg, text="GPU 7 fell off the bus", program="sentinel-send"):
    """A ready-to-paste command for the host_client CLI (it reads the same config file by default)."""
    cmd = '%s --preset p0 --text "%s"' % (program, text)
    stored = cfg.get("url")
    if stored and stored.rstrip("/") != listen_url(cfg):
        cmd += " --url %s" % listen_url(cfg)
    return cmd
