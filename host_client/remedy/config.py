"""remedy.toml: what sentinel-remedy listens on, whom it trusts, what it may do. Every key but key_id and the
secret has a default; mode defaults to "off", so a config with only those keys changes nothing in Slurm.
Errors are one line (ConfigError) naming the key."""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass, field

from host_client import schema
from host_client.config import check_url, unreadable_hint
from host_client.errors import ConfigError
from host_client.schema import Key

from .actions import ACTION_NAMES, Action, Policy

MODES = ("off", "dry_run", "enforce")
# remedy's errors, as before the schema: "slurm.checkpoint_grace_s must be between 0 and 86400 (got -1)"
STYLE = schema.Style("%s.%s", got=True, sorted_known=True, got_text=" (got %r)", between=True)
KEYS: dict[str, dict[str, Key]] = {
    "": {
        "host": Key("str", "127.0.0.1"),
        "port": Key("int", 9130, lo=0, hi=65535),
        "key_id": Key("str"),
        "secret_env": Key("str"),
        "secret_file": Key("str"),
        "mode": Key("str", "off", choices=MODES),
        "state_dir": Key("str"),  # default: below XDG_STATE_HOME (default_state_dir)
        "slurm": Key("any"),
        "breaker": Key("any"),
        "policy": Key("any"),
        "announce": Key("any"),
    },
    "slurm": {
        "checkpoint_signal": Key("str", "USR1"),
        "checkpoint_grace_s": Key("float", 120.0, lo=0, hi=86400),
        "max_restarts_per_job": Key("int", 3, lo=0, hi=1000),
        "scontrol": Key("str", "scontrol"),
        "scancel": Key("str", "scancel"),
        "squeue": Key("str", "squeue"),
        "timeout_s": Key("float", 15.0, lo=0.5, hi=600),
        "slurm_conf": Key("str"),  # default: SLURM_CONF, as Slurm's own tools read it
        # a failed isolation or requeue is retried with the project's back-off (host_client/backoff.py)
        "backoff_initial_s": Key("float", 1.0, lo=0.01, hi=3600),
        "backoff_max_s": Key("float", 60.0, lo=0.1, hi=3600),
    },
    "breaker": {"max_nodes": Key("int", 3, lo=1, hi=100_000), "window_s": Key("float", 600.0, lo=1, hi=30 * 86400)},
    "policy": {"xids": Key("any", {}), "event_types": Key("any", {}), "self_clearing": Key("any", [])},
    "announce": {
        "url": Key("str"),
        "token_env": Key("str"),
        "token_file": Key("str"),
        "timeout_s": Key("float", 5.0, lo=0.1, hi=120),
    },
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
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    max_nodes: int = 3
    window_s: float = 600.0
    policy: Policy = field(default_factory=Policy)
    announce_url: str = ""
    announce_token: str | None = field(default=None, repr=False)
    announce_timeout_s: float = 5.0
    source: str = ""


def _nonempty(d, where):
    """The strings of a checked section that are set: an empty one means nothing here."""
    for k, v in d.items():
        if v == "":
            raise ConfigError("%s%s must be a non-empty string" % (where, k))
    return d


def _secret(d, where, env, base_dir, env_key, file_key, what):
    se, sf = d[env_key], d[file_key]
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
        v = p[key]
        if not isinstance(v, dict):
            raise ConfigError("policy.%s must be a table of %s = action" % (key, key[:-1]))
        for k, a in v.items():
            if a not in ACTION_NAMES:
                raise ConfigError("policy.%s.%s must be one of %s (got %r)" % (key, k, ", ".join(ACTION_NAMES), a))
            table[conv(k)] = Action(a)
    sc = p["self_clearing"]
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
    if not isinstance(data, dict):
        raise ConfigError("the configuration must be a table")
    top = _nonempty(schema.section(data, "", KEYS[""], STYLE, table=data), "")
    s, b, p, a = (
        _nonempty(schema.section(data, name, KEYS[name], STYLE), name + ".")
        for name in ("slurm", "breaker", "policy", "announce")
    )
    key_id = top["key_id"]
    if not key_id or len(key_id) > 64 or not all("!" <= c <= "~" for c in key_id):
        raise ConfigError("key_id is required: 1..64 visible ASCII characters (the gateway's [remedy] key_id)")
    secret = _secret(top, "", env, base_dir, "secret_env", "secret_file", "the secret")
    assert secret is not None
    url = a["url"]
    if url:
        if not re.match(r"https?://[^/\s]+", url):
            raise ConfigError("announce.url must be the gateway's http:// or https:// URL")
        check_url(url, "announce.url")
    if s["backoff_max_s"] < s["backoff_initial_s"]:
        raise ConfigError("slurm.backoff_max_s must be >= slurm.backoff_initial_s")
    token = _secret(a, "announce.", env, base_dir, "token_env", "token_file", None)
    return RemedyConfig(
        key_id=key_id,
        secret=secret,
        host=top["host"],
        port=top["port"],
        mode=top["mode"],
        state_dir=top["state_dir"] or default_state_dir(env),
        checkpoint_signal=_signal(s["checkpoint_signal"]),
        checkpoint_grace_s=s["checkpoint_grace_s"],
        max_restarts_per_job=s["max_restarts_per_job"],
        scontrol=s["scontrol"],
        scancel=s["scancel"],
        squeue=s["squeue"],
        slurm_timeout_s=s["timeout_s"],
        slurm_conf=s["slurm_conf"] or env.get("SLURM_CONF"),
        backoff_initial_s=s["backoff_initial_s"],
        backoff_max_s=s["backoff_max_s"],
        max_nodes=b["max_nodes"],
        window_s=b["window_s"],
        policy=_policy(p),
        announce_url=(url or "").rstrip("/"),
        announce_token=token.decode() if token else None,
        announce_timeout_s=a["timeout_s"],
    )


def load_config(path: str, env=None) -> RemedyConfig:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError("cannot read %s: %s%s" % (path, e.strerror, unreadable_hint(e))) from None
    try:
        data = schema.parse_toml(raw.decode("utf-8"))  # the host side's one TOML reader
    except (schema.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError("%s is not valid TOML: %s" % (path, e)) from None
    cfg = from_dict(data, env, os.path.dirname(os.path.abspath(path)))
    cfg.source = path
    return cfg
