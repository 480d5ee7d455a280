"""The probe's configuration: TOML file (examples/probe.toml), defaults for everything but the gateway URL.

Unknown sections or keys are errors (a typo must not silently disable a check); every error names the key.
"""

import socket
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from host_client.config import check_url, unreadable_hint
from host_client.errors import ConfigError  # the host side's one ConfigError, re-exported here

from .gpu_checks import GpuRules
from .progress import ProgressRules

DEFAULT_SOCKET = "/run/sentinel-probe/progress.sock"

DEFAULTS: dict[str, dict[str, Any]] = {
    "node": {"rack": "unknown", "host": "", "gateway": ""},
    "gpu": {
        "source": "auto",
        "interval_s": 1.0,
        "replay": "",
        "nvidia_smi": "nvidia-smi",
        "confirm": 2,
        "expected_gen": 0,
        "expected_width": 0,
        "thermal_fallback_c": 82.0,
        "thermal_hysteresis_c": 3.0,
        "nvlink_min_delta": 1,
        "nvlink_quiet_s": 60.0,
        "util_drop": True,
        "busy_pct": 80.0,
        "idle_pct": 5.0,
        "util_window_s": 30.0,
        "util_drop_s": 10.0,
        "load_util_pct": 20.0,
        "load_power_frac": 0.3,
        "load_pcie_mbps": 1000.0,
    },
    "xid": {"source": "auto", "path": "", "hold_s": 600.0, "ignore": []},
    "nccl": {"logs": [], "from_start": False, "hold_s": 600.0, "rescan_s": 2.0},
    "progress": {
        "enabled": True,
        "socket": DEFAULT_SOCKET,
        "socket_mode": 0o666,
        "k": 4.0,
        "floor_s": 0.5,
        "ceiling_s": 900.0,
        "warmup": 3,
        "window": 32,
        "first_step_s": 300.0,
        "early_floor_s": 60.0,
        "dead_clear_s": 300.0,
    },
    "sender": {
        "capacity": 1000,
        "timeout_s": 2.0,
        "backoff_min_s": 0.2,
        "backoff_max_s": 30.0,
        "batch_max": 100,
        "batch_bytes": 60000,
        "token_env": "",
        "token_file": "",
    },
    "status": {"listen": "127.0.0.1:9410"},
    # issue 35: the fabric and the hardware under the GPU; each source is on where it exists on the node
    "fabric": {
        "enabled": True,
        "sysfs_root": "/sys/class/infiniband",
        "interval_s": 1.0,
        "window_s": 60.0,
        "expected_rate_gbps": 0.0,
        "bit_errors": 10,
        "retransmits": 1000,
        "cnps": 0,
        "flap_downs": 3,
        "up_hold_s": 10.0,
        "pause_share": 0.5,
        "ethtool": "ethtool",
        "stats_interval_s": 10.0,
        "module_interval_s": 60.0,
        "command_timeout_s": 2.0,
    },
    "pcie": {
        "enabled": True,
        "sysfs_root": "/sys/bus/pci/devices",
        "interval_s": 5.0,
        "window_s": 60.0,
        "corrected_storm": 100,
    },
    "fabric_manager": {"log": "/var/log/fabricmanager.log"},
    "gpu_health": {"enabled": True, "throttle_s": 10.0, "memory_every": 5},
}

_CHOICES = {
    ("gpu", "source"): ("auto", "nvml", "smi", "replay", "none"),
    ("xid", "source"): ("auto", "kmsg", "journal", "file", "none"),
}


def fabric_rules(cfg):
    from .fabric import FabricRules

    f = cfg["fabric"]
    return FabricRules(
        window_s=f["window_s"],
        expected_rate_gbps=f["expected_rate_gbps"],
        bit_errors=f["bit_errors"],
        retransmits=f["retransmits"],
        cnps=f["cnps"],
        flap_downs=f["flap_downs"],
        up_hold_s=f["up_hold_s"],
        pause_share=f["pause_share"],
    )


def _check_type(section, key, value, default):
    where = "[%s] %s" % (section, key)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError("%s must be true or false, got %r" % (where, value))
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError("%s must be a number, got %r" % (where, value))
        value = float(value)
        if value < 0:
            raise ConfigError("%s must not be negative, got %r" % (where, value))
    elif isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError("%s must be an integer, got %r" % (where, value))
        if value < 0:
            raise ConfigError("%s must not be negative, got %r" % (where, value))
    elif isinstance(default, str):
        if not isinstance(value, str):
            raise ConfigError("%s must be a string, got %r" % (where, value))
        choices = _CHOICES.get((section, key))
        if choices and value not in choices:
            raise ConfigError("%s must be one of %s, got %r" % (where, ", ".join(choices), value))
    elif isinstance(default, list):
        if not isinstance(value, list):
            raise ConfigError("%s must be a list, got %r" % (where, value))
    return value


def build(raw):
    """Merge a parsed TOML dict over the defaults and validate it. Returns the full config dict."""
    if not isinstance(raw, dict):
        raise ConfigError("configuration must be a table")
    cfg = {s: dict(v) for s, v in DEFAULTS.items()}
    for section, values in raw.items():
        if section not in DEFAULTS:
            raise ConfigError("unknown section [%s] (known: %s)" % (section, ", ".join(DEFAULTS)))
        if not isinstance(values, dict):
            raise ConfigError("[%s] must be a table" % section)
        for key, value in values.items():
            if key not in DEFAULTS[section]:
                raise ConfigError("unknown key [%s] %s (known: %s)" % (section, key, ", ".join(DEFAULTS[section])))
            cfg[section][key] = _check_type(section, key, value, DEFAULTS[section][key])
    node = cfg["node"]
    if not node["host"]:
        node["host"] = socket.gethostname()
    if not node["rack"]:
        raise ConfigError("[node] rack must not be empty")
    if cfg["gpu"]["interval_s"] < 0.05:
        raise ConfigError("[gpu] interval_s must be >= 0.05 s")
    if cfg["gpu"]["source"] == "replay" and not cfg["gpu"]["replay"]:
        raise ConfigError('[gpu] source = "replay" needs [gpu] replay = <file>')
    for section in ("fabric", "pcie"):
        if cfg[section]["interval_s"] < 0.05 or cfg[section]["window_s"] <= 0:
            raise ConfigError("[%s] interval_s must be >= 0.05 s and window_s > 0" % section)
    if cfg["nccl"]["rescan_s"] < 0.05:
        raise ConfigError("[nccl] rescan_s must be >= 0.05 s")
    if cfg["xid"]["source"] == "file" and not cfg["xid"]["path"]:
        raise ConfigError('[xid] source = "file" needs [xid] path = <file>')
    for i, p in enumerate(cfg["nccl"]["logs"]):
        if not isinstance(p, str) or not p:
            raise ConfigError("[nccl] logs[%d] must be a non-empty path" % i)
    for i, x in enumerate(cfg["xid"]["ignore"]):
        if not isinstance(x, int) or isinstance(x, bool):
            raise ConfigError("[xid] ignore[%d] must be an XID number" % i)
    if not 1 <= cfg["sender"]["batch_max"] <= 1000:
        raise ConfigError(
            "[sender] batch_max must be 1..1000 (1: one event per request), got %r" % cfg["sender"]["batch_max"]
        )
    if cfg["sender"]["batch_bytes"] < 1024:
        raise ConfigError("[sender] batch_bytes must be >= 1024 (keep it under the gateway's max_body, 65536)")
    if cfg["sender"]["timeout_s"] < 0.05:  # 0 would make the socket non-blocking: every send fails at once
        raise ConfigError("[sender] timeout_s must be >= 0.05 s, got %r" % cfg["sender"]["timeout_s"])
    if cfg["sender"]["token_env"] and cfg["sender"]["token_file"]:
        raise ConfigError("[sender] set token_env or token_file, not both")
    listen = cfg["status"]["listen"]
    if listen and (
        ":" not in listen or not listen.rsplit(":", 1)[1].isdigit() or int(listen.rsplit(":", 1)[1]) > 65535
    ):
        raise ConfigError("[status] listen must be host:port (port 0..65535) or empty, got %r" % listen)
    if node["gateway"]:
        check_url(node["gateway"], "[node] gateway")  # the daemon's sender refuses it later otherwise
    try:
        gpu = cfg["gpu"]
        GpuRules(confirm=gpu["confirm"], load_power_frac=gpu["load_power_frac"])
        progress_rules(cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return cfg


def check_files(cfg):
    """The files the daemon opens at start must be readable by this user: say so now, naming the key."""
    import os

    for key, path, wanted in (
        ("[gpu] replay", cfg["gpu"]["replay"], cfg["gpu"]["source"] == "replay"),
        ("[xid] path", cfg["xid"]["path"], cfg["xid"]["source"] == "file"),
    ):
        if wanted and path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as e:
                raise ConfigError(
                    "%s: cannot read %s: %s%s" % (key, path, e.strerror or e, unreadable_hint(e))
                ) from None
    for path in cfg["nccl"]["logs"]:
        if os.path.exists(path) and not os.access(path, os.R_OK):
            raise ConfigError("[nccl] logs: cannot read %s: Permission denied" % path)


def source_problems(cfg):
    """What --check-config can tell about the sources before the daemon runs: one line each, naming the key, for a
    kernel log, NCCL log or progress socket directory that cannot be read. The daemon does not refuse to start
    over these (a log may appear later); it raises its own alarm while they stay unreadable (source_health.py)."""
    import glob
    import os
    import shutil

    out = []
    x = cfg["xid"]
    if x["source"] in ("kmsg", "auto"):
        path = x["path"] or "/dev/kmsg"
        try:
            with open(path, "rb"):
                pass
        except OSError as e:
            if x["source"] == "kmsg":
                out.append("[xid] source kmsg: cannot read %s: %s%s" % (path, e.strerror or e, unreadable_hint(e)))
            elif shutil.which("journalctl") is None:
                why = e.strerror or e
                out.append("[xid] source auto: cannot read %s (%s) and journalctl is not installed" % (path, why))
    if x["source"] == "journal" and shutil.which("journalctl") is None:
        out.append("[xid] source journal: journalctl is not installed")
    for path in cfg["nccl"]["logs"]:
        if glob.has_magic(path):
            top = os.path.dirname(path)
            while top and glob.has_magic(top):
                top = os.path.dirname(top)
            if top and not os.path.isdir(top):
                out.append("[nccl] logs: %s: directory %s does not exist" % (path, top))
        elif not os.path.exists(path):
            out.append("[nccl] logs: %s does not exist (a log that comes with each job: use a glob pattern)" % path)
    g = cfg["gpu"]
    if g["source"] == "smi" and shutil.which(g["nvidia_smi"]) is None:
        out.append("[gpu] source smi: %s is not installed" % g["nvidia_smi"])
    return out


def ingest_token(cfg, env=None):
    """The bearer token the gateway's ingest wants ([sender] token_env or token_file; its [ingest] section), or
    None. Errors name the variable or file, never the token."""
    import os

    s = cfg["sender"]
    env = os.environ if env is None else env
    if s["token_env"]:
        v = (env.get(s["token_env"]) or "").strip()
        if not v:
            raise ConfigError("[sender] token_env: environment variable %s is not set or empty" % s["token_env"])
        return v
    if s["token_file"]:
        try:
            with open(s["token_file"], encoding="utf-8") as f:
                v = f.read().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(
                "[sender] token_file: cannot read %s: %s%s"
                % (
                    s["token_file"],
                    getattr(e, "strerror", None) or e,
                    unreadable_hint(e) if isinstance(e, OSError) else "",
                )
            ) from None
        if not v:
            raise ConfigError("[sender] token_file: %s is empty" % s["token_file"])
        return v
    return None


def load(path):
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except OSError as e:
        raise ConfigError("cannot read %s: %s" % (path, e.strerror or e)) from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("%s: %s" % (path, e)) from e
    return build(raw)


def gpu_rules(cfg):
    g = cfg["gpu"]
    return GpuRules(
        confirm=g["confirm"],
        expected_gen=g["expected_gen"],
        expected_width=g["expected_width"],
        thermal_fallback_c=g["thermal_fallback_c"],
        thermal_hysteresis_c=g["thermal_hysteresis_c"],
        nvlink_min_delta=g["nvlink_min_delta"],
        nvlink_quiet_s=g["nvlink_quiet_s"],
        util_drop=g["util_drop"],
        busy_pct=g["busy_pct"],
        idle_pct=g["idle_pct"],
        util_window_s=g["util_window_s"],
        util_drop_s=g["util_drop_s"],
        load_util_pct=g["load_util_pct"],
        load_power_frac=g["load_power_frac"],
        load_pcie_mbps=g["load_pcie_mbps"],
    )


def progress_rules(cfg):
    p = cfg["progress"]
    return ProgressRules(
        k=p["k"],
        floor_s=p["floor_s"],
        ceiling_s=p["ceiling_s"],
        warmup=p["warmup"],
        window=p["window"],
        first_step_s=p["first_step_s"],
        early_floor_s=p["early_floor_s"],
        dead_clear_s=p["dead_clear_s"],
    )
