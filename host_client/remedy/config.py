"""remedy.toml: what sentinel-remedy listens on, whom it trusts, what it may do. Every key but key_id and the
secret has a default; mode defaults to "off", so a config with only those keys changes nothing in Slurm.
Errors are one line (ConfigError) naming the key."""

from __future__ import annotations

import os
import re
import signal
import sys
from dataclasses import dataclass, field

from host_client.config import check_url, unreadable_hint
from host_client.errors import ConfigError

from .actions import ACTION_NAMES, Action, Policy

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

MODES = ("off", "dry_run", "enforce")
_KEYS = {
    "": {
        "host",
        "port",
        "key_id",
        "secret_env",
        "secret_file",
        "mode",
        "state_dir",
        "slurm",
        "breaker",
        "policy",
        "announce",
    },
    "slurm": {
        "checkpoint_signal",
        "checkpoint_grace_s",
        "max_restarts_per_job",
        "scontrol",
        "scancel",
        "squeue",
        "timeout_s",
        "slurm_conf",
        "retry_max_s",
    },
    "breaker": {"max_nodes", "window_s"},
    "policy": {"xids", "event_types", "self_clearing"},
    "announce": {"url", "token_env", "token_file", "timeout_s"},
}
_TYPE_RE = re.compile(r"[A-Z][A-Z0-9_]{0,47}\Z")


def default_state_dir(env) -> str:
    base = env.get("XDG_STATE_HOME")
    return os.path.join(base, "sentinel-remedy") if base else "/var/lib/sentinel-remedy"


@dataclass
class RemedyConfig:
    key_id: str
    secret: bytes = field(repr=False)
    host: str = "127.0.0.1"
    port: int = 9130
    mode: str = "off"
    state_dir: str = ""
    checkpoint_signal: str = "USR1"
    checkpoint_grace_s: float = 120.0
    max_restarts_per_job: int = 3
    scontrol: str = "scontrol"
    scancel: str = "scancel"
    squeue: str = "squeue"
    slurm_timeout_s: float = 15.0
    slurm_conf: str | None = None
    retry_max_s: float = 60.0
    max_nodes: int = 3
    window_s: float = 600.0
    policy: Policy = field(default_factory=Policy)
    announce_url: str = ""
    announce_token: str | None = field(default=None, repr=False)
    announce_timeout_s: float = 5.0
    source: str = ""


def _num(d, key, where, default, lo, hi, integer=False):
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise ConfigError("%s%s must be %s" % (where, key, "an integer" if integer else "a number"))
    if not lo <= v <= hi:
        raise ConfigError("%s%s must be between %s and %s (got %s)" % (where, key, lo, hi, v))
    return v


def _str(d, key, where, default=None):
    v = d.get(key, default)
    if v is not None and (not isinstance(v, str) or not v):
        raise ConfigError("%s%s must be a non-empty string" % (where, key))
    return v


def _secret(d, where, env, base_dir, env_key, file_key, what):
    se, sf = _str(d, env_key, where), _str(d, file_key, where)
    if se and sf:
        raise ConfigError("%sset one of %s or %s, not both" % (where, env_key, file_key))
    if se:
        v = env.get(se)
        if not v:
            raise ConfigError("%s%s: environment variable %s is not set or empty" % (where, env_key, se))
        return v.encode("utf-8")
    if sf:
        path = os.path.join(base_dir, sf)
        try:
            with open(path, "rb") as f:
                raw = f.read().rstrip(b"\r\n")
        except OSError as e:
            raise ConfigError(
                "%s%s: cannot read %s: %s%s" % (where, file_key, path, e.strerror, unreadable_hint(e))
            ) from None
        if not raw:
            raise ConfigError("%s%s: %s is empty" % (where, file_key, path))
        return raw
    if what:
        raise ConfigError("%s is required: set secret_env (an environment variable) or secret_file" % what)
    return None


def _policy(p) -> Policy:
    base = Policy()
    xids, types = dict(base.xids), dict(base.types)
    for key, table, conv in (("xids", xids, _xid), ("event_types", types, _etype)):
        v = p.get(key, {})
        if not isinstance(v, dict):
            raise ConfigError("policy.%s must be a table of %s = action" % (key, key[:-1]))
        for k, a in v.items():
            if a not in ACTION_NAMES:
                raise ConfigError("policy.%s.%s must be one of %s (got %r)" % (key, k, ", ".join(ACTION_NAMES), a))
            table[conv(k)] = Action(a)
    sc = p.get("self_clearing", [])
    if not isinstance(sc, list) or not all(isinstance(x, str) and _TYPE_RE.match(x) for x in sc):
        raise ConfigError("policy.self_clearing must be a list of event types (e.g. PCIE_DOWNGRADE)")
    return Policy(xids=xids, types=types, self_clearing=frozenset(sc))


def _xid(k):
    if not str(k).isdigit() or not 0 <= int(k) <= 65535:
        raise ConfigError("policy.xids: %r is not an XID number (0..65535)" % (k,))
    return int(k)


def _etype(k):
    if not _TYPE_RE.match(k):
        raise ConfigError("policy.event_types: %r is not an event type (upper-case, e.g. GPU_LOST)" % (k,))
    return k


def _signal(v):
    name = v.upper().removeprefix("SIG")
    if not hasattr(signal, "SIG" + name) or name in ("KILL", "STOP"):
        raise ConfigError("slurm.checkpoint_signal %r is not a signal a job can trap (e.g. USR1)" % v)
    return name


def from_dict(data: dict, env=None, base_dir=".") -> RemedyConfig:
    env = os.environ if env is None else env
    for table, keys in _KEYS.items():
        d = data if not table else data.get(table, {})
        if not isinstance(d, dict):
            raise ConfigError("[%s] must be a table" % table)
        for k in d:
            if k not in keys:
                raise ConfigError(
                    "unknown key %s%s (known: %s)" % (table + "." if table else "", k, ", ".join(sorted(keys)))
                )
    if "secret" in data:
        raise ConfigError("put the secret in an environment variable (secret_env) or a file (secret_file)")
    key_id = _str(data, "key_id", "")
    if not key_id or len(key_id) > 64 or not all("!" <= c <= "~" for c in key_id):
        raise ConfigError("key_id is required: 1..64 visible ASCII characters (the gateway's [remedy] key_id)")
    secret = _secret(data, "", env, base_dir, "secret_env", "secret_file", "the secret")
    assert secret is not None
    host = _str(data, "host", "", "127.0.0.1")
    mode = data.get("mode", "off")
    if mode not in MODES:
        raise ConfigError("mode must be one of %s (got %r)" % (", ".join(MODES), mode))
    s, b, a = data.get("slurm", {}), data.get("breaker", {}), data.get("announce", {})
    url = _str(a, "url", "announce.")
    if url:
        if not re.match(r"https?://[^/\s]+", url):
            raise ConfigError("announce.url must be the gateway's http:// or https:// URL")
        check_url(url, "announce.url")
    cfg = RemedyConfig(
        key_id=key_id,
        secret=secret,
        host=host or "127.0.0.1",
        port=int(_num(data, "port", "", 9130, 0, 65535, integer=True)),
        mode=mode,
        state_dir=_str(data, "state_dir", "", default_state_dir(env)) or "",
        checkpoint_signal=_signal(_str(s, "checkpoint_signal", "slurm.", "USR1") or "USR1"),
        checkpoint_grace_s=_num(s, "checkpoint_grace_s", "slurm.", 120, 0, 86400),
        max_restarts_per_job=int(_num(s, "max_restarts_per_job", "slurm.", 3, 0, 1000, integer=True)),
        scontrol=_str(s, "scontrol", "slurm.", "scontrol") or "scontrol",
        scancel=_str(s, "scancel", "slurm.", "scancel") or "scancel",
        squeue=_str(s, "squeue", "slurm.", "squeue") or "squeue",
        slurm_timeout_s=_num(s, "timeout_s", "slurm.", 15, 0.5, 600),
        slurm_conf=_str(s, "slurm_conf", "slurm.") or env.get("SLURM_CONF"),
        retry_max_s=_num(s, "retry_max_s", "slurm.", 60, 0.1, 3600),
        max_nodes=int(_num(b, "max_nodes", "breaker.", 3, 1, 100_000, integer=True)),
        window_s=_num(b, "window_s", "breaker.", 600, 1, 30 * 86400),
        policy=_policy(data.get("policy", {})),
        announce_url=(url or "").rstrip("/"),
        announce_token=(lambda t: t.decode() if t else None)(
            _secret(a, "announce.", env, base_dir, "token_env", "token_file", None)
        ),
        announce_timeout_s=_num(a, "timeout_s", "announce.", 5, 0.1, 120),
    )
    return cfg


def load_config(path: str, env=None) -> RemedyConfig:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigError("cannot read %s: %s%s" % (path, e.strerror, unreadable_hint(e))) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("%s is not valid TOML: %s" % (path, e)) from None
    cfg = from_dict(data, env, os.path.dirname(os.path.abspath(path)))
    cfg.source = path
    return cfg
