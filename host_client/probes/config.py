"""The probe's configuration: TOML file (examples/probe.toml), defaults for everything but the gateway URL.

Unknown sections or keys are errors (a typo must not silently disable a check); every error names the key.
"""

import socket

from host_client import schema
from host_client.config import check_url, unreadable_hint
from host_client.errors import ConfigError  # the host side's one ConfigError, re-exported here
from host_client.schema import Key

from .gpu_checks import GpuRules
from .progress import ProgressRules

DEFAULT_SOCKET = "/run/sentinel-probe/progress.sock"


# Every number of the probe's file is >= 0 (the lower bounds above that are the rules in build(), with their units)
def _f(default):
    return Key("float", default, lo=0)


def _i(default):
    return Key("int", default, lo=0)


KEYS: dict[str, dict[str, Key]] = {
    "node": {"rack": Key("str", "unknown"), "host": Key("str", ""), "gateway": Key("str", "")},
    "gpu": {
        "source": Key("str", "auto", choices=("auto", "nvml", "smi", "replay", "none")),
        "interval_s": _f(1.0),
        "replay": Key("str", ""),
        "nvidia_smi": Key("str", "nvidia-smi"),
        "confirm": _i(2),
        "expected_gen": _i(0),
        "expected_width": _i(0),
        "thermal_fallback_c": _f(82.0),
        "thermal_hysteresis_c": _f(3.0),
        "nvlink_min_delta": _i(1),
        "nvlink_quiet_s": _f(60.0),
        "util_drop": Key("bool", True),
        "busy_pct": _f(80.0),
        "idle_pct": _f(5.0),
        "util_window_s": _f(30.0),
        "util_drop_s": _f(10.0),
        "load_util_pct": _f(20.0),
        "load_power_frac": _f(0.3),
        "load_pcie_mbps": _f(1000.0),
    },
    "xid": {
        "source": Key("str", "auto", choices=("auto", "kmsg", "journal", "file", "none")),
        "path": Key("str", ""),
        "hold_s": _f(600.0),
        "ignore": Key("list", []),
    },
    "nccl": {"logs": Key("list", []), "from_start": Key("bool", False), "hold_s": _f(600.0), "rescan_s": _f(2.0)},
    "progress": {
        "enabled": Key("bool", True),
        "socket": Key("str", DEFAULT_SOCKET),
        "socket_mode": _i(0o666),
        "k": _f(4.0),
        "floor_s": _f(0.5),
        "ceiling_s": _f(900.0),
        "warmup": _i(3),
        "window": _i(32),
        "first_step_s": _f(300.0),
        "early_floor_s": _f(60.0),
        "dead_clear_s": _f(300.0),
    },
    "sender": {
        "capacity": _i(1000),
        "timeout_s": _f(2.0),
        "backoff_initial_s": _f(0.2),
        "backoff_max_s": _f(30.0),
        "batch_max": _i(100),
        "batch_bytes": _i(60000),
        "token_env": Key("str", ""),
        "token_file": Key("str", ""),
    },
    "status": {"listen": Key("str", "127.0.0.1:9410")},
    # issue 35: the fabric and the hardware under the GPU; each source is on where it exists on the node
    "fabric": {
        "enabled": Key("bool", True),
        "sysfs_root": Key("str", "/sys/class/infiniband"),
        "interval_s": _f(1.0),
        "window_s": _f(60.0),
        "expected_rate_gbps": _f(0.0),
        "bit_errors": _i(10),
        "retransmits": _i(1000),
        "cnps": _i(0),
        "flap_downs": _i(3),
        "up_hold_s": _f(10.0),
        "pause_share": _f(0.5),
        "ethtool": Key("str", "ethtool"),
        "stats_interval_s": _f(10.0),
        "module_interval_s": _f(60.0),
        # the NIC's hwmon (module temperature without CAP_NET_ADMIN, which ethtool -m needs)
        "hwmon_root": Key("str", "/sys/class/hwmon"),
        "hwmon_interval_s": _f(5.0),
        "command_timeout_s": _f(2.0),
    },
    "pcie": {
        "enabled": Key("bool", True),
        "sysfs_root": Key("str", "/sys/bus/pci/devices"),
        "interval_s": _f(5.0),
        "window_s": _f(60.0),
        "corrected_storm": _i(100),
    },
    "fabric_manager": {"log": Key("str", "/var/log/fabricmanager.log")},
    "gpu_health": {"enabled": Key("bool", True), "throttle_s": _f(10.0), "memory_every": _i(5)},
}
# Settings spelt differently before: still taken, with a deprecation line (once)
RENAMED = {"sender": {"backoff_min_s": "backoff_initial_s"}}


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


def build(raw):
    """Merge a parsed TOML dict over the defaults and validate it. Returns the full config dict."""
    if not isinstance(raw, dict):
        raise ConfigError("configuration must be a table")
    schema.check_sections(raw, KEYS, schema.BRACKETED)
    cfg = {
        name: schema.section(raw, name, keys, schema.BRACKETED, renamed=RENAMED.get(name))
        for name, keys in KEYS.items()
    }
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
    if cfg["fabric"]["hwmon_interval_s"] < 0.05:
        raise ConfigError("[fabric] hwmon_interval_s must be >= 0.05 s")
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
    return build(schema.read_toml(path, invalid="%s: %s"))


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
