"""The gateway's TOML configuration: terminals, routes, debounce, grouping, delivery, Alertmanager mapping.

Secrets never appear in the file: each terminal names an environment variable or a file that holds its secret
(the RFC's gateway had its secret in the source). Errors name the section and key at fault, never a secret value.
Unknown keys are errors, so a typo does not silently fall back to a default.
"""

from __future__ import annotations

import os
import re

from host_client import schema
from host_client.config import check_url, unreadable_hint
from host_client.errors import ConfigError  # the host side's one ConfigError, re-exported here
from host_client.schema import Key
from host_client.vocabulary import FIELDS
from sentinel_core.alarm import LEVEL_NAMES

from . import routing
from .events import _TYPE_RE, EVENT_TYPES, template_fields


class Secret:
    """Holds a terminal secret; its repr and str never show it."""

    __slots__ = ("_value", "source")

    def __init__(self, value: bytes, source: str):
        self._value = value
        self.source = source

    def reveal(self) -> bytes:
        return self._value

    def __repr__(self):
        return "Secret(from %s)" % self.source

    __str__ = __repr__


class Terminal:
    def __init__(
        self,
        name,
        url,
        key_id,
        secret,
        *,
        heartbeat_s=None,
        language=None,
        queue_size=None,
        rate_burst=None,
        rate_interval_s=None,
        timeout_s=None,
        compat="sentinel",
        fallback=(),
        ack_group=None,
    ):
        self.name = name
        self.url = url
        self.key_id = key_id
        self.secret = secret
        self.heartbeat_s = heartbeat_s
        self.language = language
        self.queue_size = queue_size
        self.rate_burst = rate_burst
        self.rate_interval_s = rate_interval_s
        self.timeout_s = timeout_s
        self.compat = compat
        # where an alert about this terminal goes instead of to it (it may be the thing that is down)
        self.fallback = list(fallback)
        self.ack_group = ack_group  # terminals of one group acknowledge together (docs/GATEWAY.md)

    def describe(self) -> dict:
        return {
            "name": self.name,
            "url": self.url,
            "key_id": self.key_id,
            "secret": repr(self.secret),
            "heartbeat_s": self.heartbeat_s,
            "compat": self.compat,
            "fallback": self.fallback,
            "ack_group": self.ack_group,
        }


# compat = "rfc": the terminal answers as the RFC's does (a 2xx, maybe without a body): a 2xx counts as delivered
COMPAT_MODES = ("sentinel", "rfc")
SERVERS = ("epoll", "asyncio")  # "asyncio": the old name of the epoll front (server.py), still taken
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_DAY = 86400

# Every key of the file, its kind, default and range (host_client/schema.py). "any": read below, by its own rules.
KEYS: dict[str, dict[str, Key] | None] = {
    "gateway": {
        "host": Key("str", "127.0.0.1"),
        "port": Key("int", 8080, lo=0, hi=65535),
        "language": Key("str", "zh", choices=("zh", "en")),
        "unknown_event_types": Key("str", "accept", choices=("accept", "reject")),
        "state_dir": Key("str"),
        "max_body": Key("int", 65536, lo=256, hi=16 << 20),
        "log_format": Key("str", "json", choices=("json", "text")),
        "instance": Key("str", "gw"),
        "server": Key("str", "epoll", choices=SERVERS),  # the HTTP front (server.py), the only one
        # event loops (threads): one, since two contend for the GIL (docs/GATEWAY.md has the figures)
        "io_loops": Key("int", 1, lo=1, hi=64),
        # slow and greedy clients (docs/GATEWAY.md, "Limits"): first byte of a request to the end of its head, head
        # to the end of its body; connections held (None: below RLIMIT_NOFILE, server.descriptor_room); the body
        # bytes all incomplete requests may hold together (at least max_body)
        "head_timeout_s": Key("float", 10.0, lo=0.1, hi=3600),
        "body_timeout_s": Key("float", 30.0, lo=0.1, hi=3600),
        "max_connections": Key("int", lo=16, hi=1_000_000),
        "max_partial_body_bytes": Key("int", hi=1 << 32),
    },
    "debounce": {
        "window_s": Key("float", 120.0, lo=0, hi=_DAY * 7),
        "max_keys": Key("int", 200_000, lo=1, hi=10_000_000),
    },
    "grouping": {
        "enabled": Key("bool", True),
        "group_by": Key("strlist", ["event_type", "rack"]),
        "window_s": Key("float", 60.0, lo=0, hi=_DAY),
        "cluster_threshold": Key("int", 3, lo=0, hi=100000),
    },
    "delivery": {
        "queue_size": Key("int", 256, lo=1, hi=1_000_000),
        "timeout_s": Key("float", 3.0, lo=0.05, hi=600),
        "backoff_initial_s": Key("float", 0.5, lo=0.01, hi=3600),
        "backoff_max_s": Key("float", 30.0, lo=0.01, hi=_DAY),
        "rate_burst": Key("int", 3, lo=1, hi=1000),
        "rate_interval_s": Key("float", 5.0, lo=0, hi=3600),
        "deadline_s": Key("any", {}),
        "max_tracked": Key("int", 100_000, lo=1, hi=10_000_000),
        "track_s": Key("float", 6 * 3600.0, lo=1, hi=_DAY * 30),
        # at most 2 s between reads: an ACK group's members must hear an ACK within 2 s of the press
        "status_poll_s": Key("float", 1.0, lo=0.1, hi=2),
    },
    "alertmanager": {
        "severity_label": Key("str", "severity"),
        "levels": Key("any"),
        "default_level": Key("any"),
        "text_annotations": Key("strlist", ["summary", "description", "message"]),
        "rack_labels": Key("strlist", ["rack", "cluster_rack"]),
        "host_labels": Key("strlist", ["node_host", "node", "hostname", "Hostname", "host", "instance"]),
        "debounce": Key("bool", True),
        # at least Alertmanager's --cluster.peer-timeout (15 s) x peers + group_interval (5 m): docs/GATEWAY.md
        "resolved_hold_s": Key("float", 900.0, lo=0, hi=_DAY * 7),
    },
    # default: every terminal; a P0 nobody acknowledged for escalate_after_s escalates (docs/GATEWAY.md)
    "routing": {"default": Key("strlist"), "escalate_after_s": Key("float", 300.0, lo=1, hi=_DAY * 7)},
    "templates": {"zh": Key("any", {}), "en": Key("any", {})},
    "ingest": {"token_env": Key("any", []), "token_file": Key("any", [])},
    "terminals": None,
    "routes": None,
    # sentinel-remedy's incident feed (docs/REMEDY.md): signed like a terminal, fields instead of words
    "remedy": None,
}
TERMINAL_KEYS = {
    "url": Key("str"),
    "key_id": Key("str"),
    "secret_env": Key("str"),
    "secret_file": Key("str"),
    "heartbeat_s": Key("num", lo=1, hi=_DAY),
    "language": Key("str", choices=("zh", "en")),
    "queue_size": Key("int", lo=1, hi=1_000_000),
    "rate_burst": Key("int", lo=1, hi=1000),
    "rate_interval_s": Key("num", lo=0, hi=3600),
    "timeout_s": Key("num", lo=0.05, hi=600),
    "compat": Key("str", "sentinel", choices=COMPAT_MODES),
    "fallback": Key("any", []),
    "ack_group": Key("str"),
}
# Keys and values that were taken once: a configuration still naming one is refused with what to do instead.
_REMOVED = {
    "threads": "gateway.threads was removed with the WSGI front (issue 23): the gateway has one HTTP front; delete "
    "the key (gateway.io_loops sets its event loops)",
    "native_send": "gateway.native_send was removed with the C answer sender (issue 23): the event loop sends the "
    "answers; delete the key",
}
# Alertmanager severities and the level each means, unless [alertmanager] levels says otherwise
AM_LEVELS = {
    "critical": 2,
    "page": 2,
    "p0": 2,
    "fatal": 2,
    "emergency": 2,
    "error": 1,
    "warning": 1,
    "major": 1,
    "minor": 1,
    "p1": 1,
    "info": 1,
}
DEADLINES = {2: 3600.0, 1: 1800.0, 0: 600.0}  # seconds an alarm may wait for its terminal, by level


def _level(v, where):
    if v not in LEVEL_NAMES:
        raise ConfigError("%s must be one of P0, P1, NORMAL (got %r)" % (where, v))
    return LEVEL_NAMES.index(v)


class Config:
    """Validated configuration. Build with load_config(path) or Config.from_dict(dict, env); Config() holds the
    defaults (the tables above)."""

    def __init__(self):
        self._read({}, {}, ".")

    @classmethod
    def from_dict(cls, d: dict, env=None, base_dir: str = ".") -> Config:
        c = cls.__new__(cls)
        c._read(d, os.environ if env is None else env, base_dir)
        return c

    def _read(self, d, env, base_dir) -> None:
        self.source = "<dict>"
        self.persist_wait_s = 2.0
        schema.check_sections(d, KEYS)
        srv = d.get("gateway", {}).get("server")
        if srv in ("waitress", "wsgi"):
            raise ConfigError(
                'gateway.server = "%s" was removed with the WSGI front (issue 23): the gateway has one HTTP front; '
                "delete the key" % srv
            )
        g = schema.section(d, "gateway", _keys("gateway"), removed=_REMOVED)
        self.host = g["host"]
        self.port = g["port"]
        self.language = g["language"]
        self.accept_unknown = g["unknown_event_types"] == "accept"
        self.state_dir = os.path.join(base_dir, g["state_dir"]) if g["state_dir"] else None
        self.max_body = g["max_body"]
        self.log_format = g["log_format"]
        # the front was asyncio on uvloop until its own epoll loop replaced it
        self.server = "epoll" if g["server"] == "asyncio" else g["server"]
        self.io_loops = g["io_loops"]
        self.head_timeout_s = g["head_timeout_s"]
        self.body_timeout_s = g["body_timeout_s"]
        self.max_connections = g["max_connections"]
        partial = g["max_partial_body_bytes"]
        self.max_partial_body_bytes = (
            max(4 << 20, self.max_body)
            if partial is None
            else schema.check(partial, Key("int", lo=self.max_body), "gateway.max_partial_body_bytes")
        )
        self.instance = g["instance"]
        if not _NAME_RE.match(self.instance):
            raise ConfigError("gateway.instance must be letters, digits, '.', '_' or '-'")

        db = schema.section(d, "debounce", _keys("debounce"))
        self.debounce_window = db["window_s"]
        self.debounce_max_keys = db["max_keys"]

        gr = schema.section(d, "grouping", _keys("grouping"))
        self.grouping = gr["enabled"]
        self.group_by = gr["group_by"]
        self.group_window = gr["window_s"]
        self.cluster_threshold = gr["cluster_threshold"]

        dl = schema.section(d, "delivery", _keys("delivery"))
        self.queue_size = dl["queue_size"]
        self.timeout_s = dl["timeout_s"]
        self.backoff_initial_s = dl["backoff_initial_s"]
        self.backoff_max_s = dl["backoff_max_s"]
        if self.backoff_max_s < self.backoff_initial_s:
            raise ConfigError("delivery.backoff_max_s must be >= delivery.backoff_initial_s")
        self.rate_burst = dl["rate_burst"]
        self.rate_interval = dl["rate_interval_s"]
        self.max_tracked = dl["max_tracked"]
        self.track_s = dl["track_s"]
        self.status_poll_s = dl["status_poll_s"]  # while a P0 is open on a terminal, its status page is read this often
        self.deadlines = dict(DEADLINES)
        ddl = dl["deadline_s"]
        if not isinstance(ddl, dict):
            raise ConfigError("delivery.deadline_s must be a table like {P0 = 3600, P1 = 1800, NORMAL = 600}")
        for name, v in ddl.items():
            lvl = _level(name, "delivery.deadline_s key")
            self.deadlines[lvl] = schema.check(v, Key("float", lo=1, hi=_DAY * 30), "delivery.deadline_s.%s" % name)

        am = schema.section(d, "alertmanager", _keys("alertmanager"))
        self.am_severity_label = am["severity_label"]
        self.am_levels = dict(AM_LEVELS)
        if am["levels"] is not None:
            if not isinstance(am["levels"], dict):
                raise ConfigError('alertmanager.levels must be a table of severity = "P0"|"P1"|"NORMAL"')
            self.am_levels = {str(k).lower(): _level(v, "alertmanager.levels.%s" % k) for k, v in am["levels"].items()}
        self.am_default_level = 1
        if am["default_level"] is not None:
            self.am_default_level = _level(am["default_level"], "alertmanager.default_level")
        self.am_text_annotations = am["text_annotations"]
        self.am_rack_labels = am["rack_labels"]
        self.am_host_labels = am["host_labels"]
        self.am_debounce = am["debounce"]
        self.resolved_hold_s = am["resolved_hold_s"]

        self.templates = _templates(schema.section(d, "templates", _keys("templates")))

        terms = d.get("terminals", {})
        if not isinstance(terms, dict):
            raise ConfigError("[terminals.NAME] tables name the terminals")
        self.terminals = {name: _terminal(name, t, env, base_dir) for name, t in terms.items()}
        # bearer tokens the ingest endpoints require ([ingest] token_env / token_file); empty: ingest is open
        self.ingest_tokens = _ingest_tokens(schema.section(d, "ingest", _keys("ingest")), env, base_dir)
        # [remedy]: where incidents go for sentinel-remedy, or None
        self.remedy: Terminal | None = _remedy(d["remedy"], env, base_dir) if "remedy" in d else None

        self.routes = routing.parse_routes(d.get("routes", []))
        rt = schema.section(d, "routing", _keys("routing"))
        self.escalate_after_s = rt["escalate_after_s"]
        default = rt["default"]
        self.default_terminals = (
            default if default is not None else sorted(self.terminals) if "routing" in d or self.terminals else []
        )
        routing.check_names(self.routes, self.default_terminals, self.terminals)

    def route(self, labels: dict) -> list[str]:
        """The terminals an incident goes to (routing.route: the policy)."""
        return routing.route(self.routes, self.default_terminals, self.terminals, labels)

    def escalate_after(self, labels: dict) -> float:
        """Seconds a P0 with these labels may stay unacknowledged (routing.escalate_after)."""
        return routing.escalate_after(self.routes, self.escalate_after_s, labels)

    def ack_group_of(self, terminal: str) -> list[str]:
        """The terminals that acknowledge together with this one (itself included), or [] when it has no group."""
        t = self.terminals.get(terminal)
        if t is None or t.ack_group is None:
            return []
        return [n for n, o in self.terminals.items() if o.ack_group == t.ack_group]

    def describe(self) -> dict:
        """A printable summary for --check-config: no secret values."""
        return {
            "listen": "%s:%d" % (self.host, self.port),
            "language": self.language,
            "debounce_window_s": self.debounce_window,
            "grouping": self.grouping,
            "group_by": self.group_by,
            "group_window_s": self.group_window,
            "cluster_threshold": self.cluster_threshold,
            "state_dir": self.state_dir,
            "ingest_auth": (
                "bearer token required (%d token(s): %s)"
                % (len(self.ingest_tokens), ", ".join(t.source for t in self.ingest_tokens))
                if self.ingest_tokens
                else "off (ingest endpoints are unauthenticated)"
            ),
            "terminals": [t.describe() for t in self.terminals.values()],
            "routes": [{"racks": r.racks, "labels": r.labels, "terminals": r.terminals} for r in self.routes],
            "default": self.default_terminals,
        }


def _keys(section: str) -> dict[str, Key]:
    keys = KEYS[section]
    assert keys is not None  # a section of keys, not terminals or routes
    return keys


def _templates(tp) -> dict:
    out = {}
    for lang, table in tp.items():
        if not table:
            continue
        if not isinstance(table, dict):
            raise ConfigError("[templates.%s] must be a table" % lang)
        for t, s in table.items():
            if t not in EVENT_TYPES:
                raise ConfigError("templates.%s.%s: unknown event type" % (lang, t))
            if not isinstance(s, str):
                raise ConfigError("templates.%s.%s must be a string" % (lang, t))
            _check_template(lang, t, s)
        out[lang] = dict(table)
    return out


# A bearer token is RFC 6750's b64token; a shorter one than this is guessable
_TOKEN_RE = re.compile(rb"[A-Za-z0-9._~+/-]+=*\Z")
MIN_TOKEN = 16


def _names(d, key, where):
    v = d.get(key, [])
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise ConfigError("%s.%s must be a name or a list of names" % (where, key))
    return v


def _ingest_tokens(d, env, base_dir) -> list:
    """[ingest] token_env / token_file: the bearer tokens the ingest endpoints accept (any one of them: two during
    a rotation). Errors name the variable or file, never its content."""
    out = []
    for name in _names(d, "token_env", "ingest"):
        v = env.get(name)
        if not v:
            raise ConfigError("ingest.token_env: environment variable %s is not set or empty" % name)
        out.append(_token(v.encode("utf-8").strip(), "env %s" % name))
    for f in _names(d, "token_file", "ingest"):
        path = os.path.join(base_dir, f)
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
        except OSError as e:
            raise ConfigError(
                "ingest.token_file: cannot read %s: %s%s" % (path, e.strerror, unreadable_hint(e))
            ) from None
        raw = raw.strip()
        if not raw:
            raise ConfigError("ingest.token_file: %s is empty" % path)
        out.append(_token(raw, "file %s" % path))
    return out


def _token(raw: bytes, source: str) -> Secret:
    if len(raw) < MIN_TOKEN or not _TOKEN_RE.match(raw):
        raise ConfigError(
            "ingest token from %s must be at least %d characters of A-Z a-z 0-9 . _ ~ + / - (a bearer "
            "token; e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))')" % (source, MIN_TOKEN)
        )
    return Secret(raw, source)


REMEDY_KEYS = ("url", "key_id", "secret_env", "secret_file", "timeout_s")


def _remedy(t, env, base_dir) -> Terminal:
    """[remedy] is read as a terminal's table is (url, key_id, secret_env or secret_file, timeout_s)."""
    if isinstance(t, dict):
        schema.section({}, "remedy", {k: TERMINAL_KEYS[k] for k in REMEDY_KEYS}, table=t)  # its keys only
    try:
        return _terminal("remedy", t, env, base_dir)
    except ConfigError as e:
        raise ConfigError(str(e).replace("terminals.remedy", "remedy")) from None


def _terminal(name, t, env, base_dir) -> Terminal:
    where = "terminals.%s" % name
    if not _NAME_RE.match(name):
        raise ConfigError("%s: a terminal name is letters, digits, '.', '_' or '-'" % where)
    if not isinstance(t, dict):
        raise ConfigError("[%s] must be a table" % where)
    if "secret" in t:
        raise ConfigError(
            "%s: put the secret in an environment variable (secret_env) or a file (secret_file), "
            "never in the configuration" % where
        )
    v = schema.section({}, where, TERMINAL_KEYS, table=t)
    url = v["url"]
    if not url or not re.match(r"https?://[^/\s]+", url):
        raise ConfigError("%s.url must be an http:// or https:// URL" % where)
    check_url(url, "%s.url" % where)  # a host, and a port that parses: the client refuses it later otherwise
    key_id = v["key_id"]
    if not key_id:
        raise ConfigError("%s.key_id is required" % where)
    se, sf = v["secret_env"], v["secret_file"]
    if bool(se) == bool(sf):
        raise ConfigError("%s: set exactly one of secret_env or secret_file" % where)
    if se:
        value = env.get(se)
        if not value:
            raise ConfigError("%s: environment variable %s is not set or empty" % (where, se))
        secret = Secret(value.encode("utf-8"), "env %s" % se)
    else:
        assert sf  # exactly one of the two is set
        path = os.path.join(base_dir, sf)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise ConfigError(
                "%s: cannot read secret_file %s: %s%s" % (where, path, e.strerror, unreadable_hint(e))
            ) from None
        raw = raw.rstrip(b"\r\n")
        if not raw:
            raise ConfigError("%s: secret_file %s is empty" % (where, path))
        secret = Secret(raw, "file %s" % path)
    if v["ack_group"] is not None and not _NAME_RE.match(v["ack_group"]):
        raise ConfigError("%s.ack_group must be letters, digits, '.', '_' or '-'" % where)
    return Terminal(
        name,
        url.rstrip("/"),
        key_id,
        secret,
        heartbeat_s=v["heartbeat_s"],
        language=v["language"],
        queue_size=v["queue_size"],
        rate_burst=v["rate_burst"],
        rate_interval_s=v["rate_interval_s"],
        timeout_s=v["timeout_s"],
        compat=v["compat"],
        fallback=_names(t, "fallback", where),
        ack_group=v["ack_group"],
    )


def load_config(path: str, env=None) -> Config:
    data = schema.read_toml(path)
    c = Config.from_dict(data, env, os.path.dirname(os.path.abspath(path)))
    c.source = path
    return c


def check_type_name(name: str) -> bool:
    return bool(_TYPE_RE.match(name))


def _check_template(lang: str, etype: str, tpl: str) -> None:
    """A [templates] entry names only the fields an event has (vocabulary.FIELDS) and formats with them."""
    where = "templates.%s.%s" % (lang, etype)
    try:
        names = template_fields(tpl)
    except ValueError as e:
        raise ConfigError("%s is not a valid template (%s)" % (where, e)) from None
    unknown = sorted(names - set(FIELDS))
    if unknown:
        raise ConfigError(
            "%s names an unknown field {%s}; known: %s" % (where, unknown[0], ", ".join("{%s}" % f for f in FIELDS))
        )
    if not names and "%" in tpl:
        raise ConfigError("%s uses %% fields; name them instead: %s" % (where, ", ".join("{%s}" % f for f in FIELDS)))
    sample = {"rack": "A03", "host": "gpu-1", "gpu": 1, "util": 1.0, "xid": 79}
    sample.update(meaning="GPU fell off the bus", action="restart the node", pci="0000:3b:00.0", source="kernel log")
    sample["component"] = "mlx5_3/1"
    try:
        tpl.format(**sample)  # formatting a sample is the check of each field's format spec
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
        raise ConfigError("%s does not format: %s" % (where, e)) from None
