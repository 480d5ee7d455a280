"""The gateway's TOML configuration: terminals, routes, debounce, grouping, delivery, Alertmanager mapping.

Secrets never appear in the file: each terminal names an environment variable or a file that holds its secret
(the RFC's gateway had its secret in the source). Errors name the section and key at fault, never a secret value.
Unknown keys are errors, so a typo does not silently fall back to a default.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from typing import Any, overload

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from host_client.config import check_url, unreadable_hint
from host_client.errors import ConfigError  # the host side's one ConfigError, re-exported here
from host_client.vocabulary import FIELDS
from sentinel_core.alarm import LEVEL_NAMES

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


class Route:
    def __init__(self, terminals, racks=None, labels=None, escalate_after_s=None):
        self.terminals = list(terminals)
        self.racks = list(racks or [])
        self.labels = dict(labels or {})
        self.escalate_after_s = escalate_after_s  # None: [routing].escalate_after_s

    def matches(self, labels: dict) -> bool:
        if self.racks:
            rack = labels.get("rack", "")
            if not any(fnmatch.fnmatchcase(rack, p) for p in self.racks):
                return False
        for name, pattern in self.labels.items():
            v = labels.get(name)
            if v is None or not fnmatch.fnmatchcase(str(v), pattern):
                return False
        return True


_SECTIONS = {
    "gateway": {
        "host",
        "port",
        "language",
        "unknown_event_types",
        "state_dir",
        "max_body",
        "log_format",
        "instance",
        "server",
        "io_loops",
        "head_timeout_s",
        "body_timeout_s",
        "max_connections",
        "max_partial_body_bytes",
    },
    "debounce": {"window_s", "max_keys"},
    "grouping": {"enabled", "group_by", "window_s", "cluster_threshold"},
    "delivery": {
        "queue_size",
        "timeout_s",
        "backoff_initial_s",
        "backoff_max_s",
        "rate_burst",
        "rate_interval_s",
        "deadline_s",
        "max_tracked",
        "track_s",
        "status_poll_s",
    },
    "alertmanager": {
        "severity_label",
        "levels",
        "default_level",
        "text_annotations",
        "rack_labels",
        "host_labels",
        "debounce",
        "resolved_hold_s",
    },
    "routing": {"default", "escalate_after_s"},
    "templates": {"zh", "en"},
    "ingest": {"token_env", "token_file"},
    "terminals": None,
    "routes": None,
}
_TERMINAL_KEYS = {
    "url",
    "key_id",
    "secret_env",
    "secret_file",
    "heartbeat_s",
    "language",
    "queue_size",
    "rate_burst",
    "rate_interval_s",
    "timeout_s",
    "compat",
    "fallback",
    "ack_group",
}
# The label the shipped Prometheus rules and scrape configs put on an alert about one terminal
# (deploy/prometheus): such an alert is never delivered to the terminal it names.
ABOUT_TERMINAL_LABEL = "terminal"
# compat = "rfc": the terminal answers as the RFC's does (a 2xx, maybe without a body): a 2xx counts as delivered
COMPAT_MODES = ("sentinel", "rfc")
# Keys and values that were taken once: a configuration still naming one is refused with what to do instead.
_REMOVED = {
    "threads": "gateway.threads was removed with the WSGI front (issue 23): the gateway has one HTTP front; delete "
    "the key (gateway.io_loops sets its event loops)",
    "native_send": "gateway.native_send was removed with the C answer sender (issue 23): the event loop sends the "
    "answers; delete the key",
}
SERVERS = ("epoll", "asyncio")  # "asyncio": the old name of the epoll front (server.py), still taken
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")


# With a default the value is never None (an int or a float, as the default is): the overloads say so, for pyright.
@overload
def _num(d, key, where, *, default: float, lo=None, hi=None, integer=False) -> Any: ...
@overload
def _num(d, key, where, *, default: None = None, lo=None, hi=None, integer=False) -> Any | None: ...
def _num(d, key, where, *, default=None, lo=None, hi=None, integer=False):
    v = d.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise ConfigError("%s.%s must be %s" % (where, key, "an integer" if integer else "a number"))
    if lo is not None and v < lo:
        raise ConfigError("%s.%s must be >= %s" % (where, key, lo))
    if hi is not None and v > hi:
        raise ConfigError("%s.%s must be <= %s" % (where, key, hi))
    return v


@overload
def _str(d, key, where, *, default: str, choices=None) -> str: ...
@overload
def _str(d, key, where, *, default: None = None, choices=None) -> str | None: ...
def _str(d, key, where, *, default=None, choices=None):
    v = d.get(key, default)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ConfigError("%s.%s must be a string" % (where, key))
    if choices and v not in choices:
        raise ConfigError("%s.%s must be one of %s" % (where, key, ", ".join(choices)))
    return v


def _strlist(d, key, where, default):
    v = d.get(key, default)
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ConfigError("%s.%s must be a list of strings" % (where, key))
    return list(v)


def _level(v, where):
    if v not in LEVEL_NAMES:
        raise ConfigError("%s must be one of P0, P1, NORMAL (got %r)" % (where, v))
    return LEVEL_NAMES.index(v)


class Config:
    """Validated configuration. Build with load_config(path) or Config.from_dict(dict, env)."""

    def __init__(self):
        self.host = "127.0.0.1"
        self.port = 8080
        self.language = "zh"
        self.accept_unknown = True
        self.state_dir = None
        self.max_body = 65536
        self.log_format = "json"
        self.instance = "gw"
        self.server = "epoll"  # the HTTP front (server.py), the only one
        # event loops (threads): one, since two contend for the GIL (docs/GATEWAY.md has the figures)
        self.io_loops = 1
        # slow and greedy clients (docs/GATEWAY.md, "Limits"): first byte of a request to the end of its head, head to
        # the end of its body; connections held (None: below RLIMIT_NOFILE, server.descriptor_room); the body bytes
        # all incomplete requests may hold together
        self.head_timeout_s = 10.0
        self.body_timeout_s = 30.0
        self.max_connections = None
        self.max_partial_body_bytes = 4 << 20
        self.debounce_window = 120.0
        self.debounce_max_keys = 200_000
        self.grouping = True
        self.group_by = ["event_type", "rack"]
        self.group_window = 60.0
        self.cluster_threshold = 3
        self.queue_size = 256
        self.timeout_s = 3.0
        self.backoff_initial = 0.5
        self.backoff_max = 30.0
        self.rate_burst = 3
        self.rate_interval = 5.0
        self.deadlines = {2: 3600.0, 1: 1800.0, 0: 600.0}
        self.max_tracked = 100_000
        self.track_s = 6 * 3600.0
        self.persist_wait_s = 2.0
        self.am_severity_label = "severity"
        self.am_levels = {
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
        self.am_default_level = 1
        self.am_text_annotations = ["summary", "description", "message"]
        self.am_rack_labels = ["rack", "cluster_rack"]
        self.am_host_labels = ["node_host", "node", "hostname", "Hostname", "host", "instance"]
        self.am_debounce = True
        # at least Alertmanager's --cluster.peer-timeout (15 s) x peers + group_interval (5 m): docs/GATEWAY.md
        self.resolved_hold_s = 900.0
        self.templates = {}
        # bearer tokens the ingest endpoints require ([ingest] token_env / token_file); empty: ingest is open
        self.ingest_tokens: list[Secret] = []
        self.terminals: dict[str, Terminal] = {}
        self.routes: list[Route] = []
        self.default_terminals: list[str] = []
        self.escalate_after_s = 300.0  # a P0 nobody acknowledged for this long escalates (docs/GATEWAY.md)
        self.status_poll_s = 1.0  # while a P0 is open on a terminal, its status page is read this often
        self.source = "<dict>"

    @classmethod
    def from_dict(cls, d: dict, env=None, base_dir: str = ".") -> Config:
        env = os.environ if env is None else env
        c = cls()
        if not isinstance(d, dict):
            raise ConfigError("the configuration must be a table")
        for k in d:
            if k not in _SECTIONS:
                raise ConfigError("unknown section [%s] (known: %s)" % (k, ", ".join(sorted(_SECTIONS))))
        for sec, keys in _SECTIONS.items():
            if keys is None or sec not in d:
                continue
            if not isinstance(d[sec], dict):
                raise ConfigError("[%s] must be a table" % sec)
            for k in d[sec]:
                if sec == "gateway" and k in _REMOVED:
                    raise ConfigError(_REMOVED[k])
                if k not in keys:
                    raise ConfigError("unknown key %s.%s (known: %s)" % (sec, k, ", ".join(sorted(keys))))

        g = d.get("gateway", {})
        c.host = _str(g, "host", "gateway", default=c.host)
        c.port = _num(g, "port", "gateway", default=c.port, lo=0, hi=65535, integer=True)
        c.language = _str(g, "language", "gateway", default=c.language, choices=("zh", "en"))
        c.accept_unknown = (
            _str(g, "unknown_event_types", "gateway", default="accept", choices=("accept", "reject")) == "accept"
        )
        sd = _str(g, "state_dir", "gateway", default=None)
        c.state_dir = os.path.join(base_dir, sd) if sd else None
        c.max_body = _num(g, "max_body", "gateway", default=c.max_body, lo=256, hi=16 << 20, integer=True)
        c.log_format = _str(g, "log_format", "gateway", default=c.log_format, choices=("json", "text"))
        srv = g.get("server", c.server)
        if srv in ("waitress", "wsgi"):
            raise ConfigError(
                'gateway.server = "%s" was removed with the WSGI front (issue 23): the gateway has one HTTP front; '
                "delete the key" % srv
            )
        c.server = _str(g, "server", "gateway", default=c.server, choices=SERVERS)
        if c.server == "asyncio":  # the front was asyncio on uvloop until its own epoll loop replaced it
            c.server = "epoll"
        c.io_loops = _num(g, "io_loops", "gateway", default=c.io_loops, lo=1, hi=64, integer=True)
        c.head_timeout_s = float(_num(g, "head_timeout_s", "gateway", default=c.head_timeout_s, lo=0.1, hi=3600))
        c.body_timeout_s = float(_num(g, "body_timeout_s", "gateway", default=c.body_timeout_s, lo=0.1, hi=3600))
        c.max_connections = _num(
            g, "max_connections", "gateway", default=c.max_connections, lo=16, hi=1_000_000, integer=True
        )
        c.max_partial_body_bytes = _num(
            g,
            "max_partial_body_bytes",
            "gateway",
            default=max(c.max_partial_body_bytes, c.max_body),
            lo=c.max_body,
            hi=1 << 32,
            integer=True,
        )
        c.instance = _str(g, "instance", "gateway", default=c.instance)
        if not _NAME_RE.match(c.instance):
            raise ConfigError("gateway.instance must be letters, digits, '.', '_' or '-'")

        db = d.get("debounce", {})
        c.debounce_window = float(_num(db, "window_s", "debounce", default=c.debounce_window, lo=0, hi=86400 * 7))
        c.debounce_max_keys = _num(
            db, "max_keys", "debounce", default=c.debounce_max_keys, lo=1, hi=10_000_000, integer=True
        )

        gr = d.get("grouping", {})
        en = gr.get("enabled", True)
        if not isinstance(en, bool):
            raise ConfigError("grouping.enabled must be true or false")
        c.grouping = en
        c.group_by = _strlist(gr, "group_by", "grouping", c.group_by)
        c.group_window = float(_num(gr, "window_s", "grouping", default=c.group_window, lo=0, hi=86400))
        c.cluster_threshold = _num(
            gr, "cluster_threshold", "grouping", default=c.cluster_threshold, lo=0, hi=100000, integer=True
        )

        dl = d.get("delivery", {})
        c.queue_size = _num(dl, "queue_size", "delivery", default=c.queue_size, lo=1, hi=1_000_000, integer=True)
        c.timeout_s = float(_num(dl, "timeout_s", "delivery", default=c.timeout_s, lo=0.05, hi=600))
        c.backoff_initial = float(
            _num(dl, "backoff_initial_s", "delivery", default=c.backoff_initial, lo=0.01, hi=3600)
        )
        c.backoff_max = float(_num(dl, "backoff_max_s", "delivery", default=c.backoff_max, lo=0.01, hi=86400))
        if c.backoff_max < c.backoff_initial:
            raise ConfigError("delivery.backoff_max_s must be >= delivery.backoff_initial_s")
        c.rate_burst = _num(dl, "rate_burst", "delivery", default=c.rate_burst, lo=1, hi=1000, integer=True)
        c.rate_interval = float(_num(dl, "rate_interval_s", "delivery", default=c.rate_interval, lo=0, hi=3600))
        c.max_tracked = _num(dl, "max_tracked", "delivery", default=c.max_tracked, lo=1, hi=10_000_000, integer=True)
        c.track_s = float(_num(dl, "track_s", "delivery", default=c.track_s, lo=1, hi=86400 * 30))
        # at most 2 s between reads: an ACK group's members must hear an ACK within 2 s of the press
        c.status_poll_s = float(_num(dl, "status_poll_s", "delivery", default=c.status_poll_s, lo=0.1, hi=2))
        ddl = dl.get("deadline_s", {})
        if not isinstance(ddl, dict):
            raise ConfigError("delivery.deadline_s must be a table like {P0 = 3600, P1 = 1800, NORMAL = 600}")
        for name in ddl:
            lvl = _level(name, "delivery.deadline_s key")
            v = _num(ddl, name, "delivery.deadline_s", lo=1, hi=86400 * 30)
            assert v is not None  # name is one of ddl's keys
            c.deadlines[lvl] = float(v)

        am = d.get("alertmanager", {})
        c.am_severity_label = _str(am, "severity_label", "alertmanager", default=c.am_severity_label)
        if "levels" in am:
            if not isinstance(am["levels"], dict):
                raise ConfigError('alertmanager.levels must be a table of severity = "P0"|"P1"|"NORMAL"')
            c.am_levels = {str(k).lower(): _level(v, "alertmanager.levels.%s" % k) for k, v in am["levels"].items()}
        if "default_level" in am:
            c.am_default_level = _level(am["default_level"], "alertmanager.default_level")
        c.am_text_annotations = _strlist(am, "text_annotations", "alertmanager", c.am_text_annotations)
        c.am_rack_labels = _strlist(am, "rack_labels", "alertmanager", c.am_rack_labels)
        c.am_host_labels = _strlist(am, "host_labels", "alertmanager", c.am_host_labels)
        amd = am.get("debounce", True)
        if not isinstance(amd, bool):
            raise ConfigError("alertmanager.debounce must be true or false")
        c.am_debounce = amd
        c.resolved_hold_s = float(
            _num(am, "resolved_hold_s", "alertmanager", default=c.resolved_hold_s, lo=0, hi=86400 * 7)
        )

        tp = d.get("templates", {})
        for lang, table in tp.items():
            if not isinstance(table, dict):
                raise ConfigError("[templates.%s] must be a table" % lang)
            for t, s in table.items():
                if t not in EVENT_TYPES:
                    raise ConfigError("templates.%s.%s: unknown event type" % (lang, t))
                if not isinstance(s, str):
                    raise ConfigError("templates.%s.%s must be a string" % (lang, t))
                _check_template(lang, t, s)
            c.templates[lang] = dict(table)

        terms = d.get("terminals", {})
        if not isinstance(terms, dict):
            raise ConfigError("[terminals.NAME] tables name the terminals")
        for name, t in terms.items():
            c.terminals[name] = _terminal(name, t, env, base_dir)
        c.ingest_tokens = _ingest_tokens(d.get("ingest", {}), env, base_dir)

        routes = d.get("routes", [])
        if not isinstance(routes, list):
            raise ConfigError("[[routes]] must be an array of tables")
        for i, r in enumerate(routes):
            where = "routes[%d]" % i
            if not isinstance(r, dict):
                raise ConfigError("%s must be a table" % where)
            for k in r:
                if k not in ("racks", "labels", "terminals", "escalate_after_s"):
                    raise ConfigError(
                        "unknown key %s.%s (known: racks, labels, terminals, escalate_after_s)" % (where, k)
                    )
            tl = _strlist(r, "terminals", where, None) if "terminals" in r else None
            if not tl:
                raise ConfigError("%s.terminals must name at least one terminal" % where)
            labels = r.get("labels", {})
            if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
                raise ConfigError('%s.labels must be a table of label = "glob"' % where)
            esc = _num(r, "escalate_after_s", where, default=None, lo=1, hi=86400 * 7)
            c.routes.append(Route(tl, _strlist(r, "racks", where, []), labels, esc))
        rt = d.get("routing", {})
        c.escalate_after_s = float(
            _num(rt, "escalate_after_s", "routing", default=c.escalate_after_s, lo=1, hi=86400 * 7)
        )
        c.default_terminals = _strlist(rt, "default", "routing", sorted(c.terminals)) if rt or c.terminals else []
        for name in c.default_terminals + [n for r in c.routes for n in r.terminals]:
            if name not in c.terminals:
                raise ConfigError("route names terminal %r, which no [terminals.%s] defines" % (name, name))
        for t in c.terminals.values():
            _check_fallback(t, c.terminals)
        return c

    def route(self, labels: dict) -> list[str]:
        """The terminals an incident goes to: every matching route's, else the default. An alert about a terminal
        (its `terminal` label names one) never goes to that terminal: to the others routed, else to its fallback,
        else to every other terminal (docs/GATEWAY.md, "Alerts about the alarm path")."""
        out = []
        for r in self.routes:
            if r.matches(labels):
                for n in r.terminals:
                    if n not in out:
                        out.append(n)
        out = out or list(self.default_terminals)
        about = self.terminals.get(labels.get(ABOUT_TERMINAL_LABEL) or "")
        if about is None:
            return out
        out = [n for n in out if n != about.name]
        return out or list(about.fallback) or [n for n in self.terminals if n != about.name]

    def escalate_after(self, labels: dict) -> float:
        """Seconds a P0 with these labels may stay unacknowledged: the shortest of its matching routes' values,
        else [routing].escalate_after_s."""
        own = [r.escalate_after_s for r in self.routes if r.escalate_after_s is not None and r.matches(labels)]
        return float(min(own)) if own else self.escalate_after_s

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
    for k in t:
        if k not in _TERMINAL_KEYS:
            raise ConfigError("unknown key %s.%s (known: %s)" % (where, k, ", ".join(sorted(_TERMINAL_KEYS))))
    url = _str(t, "url", where)
    if not url or not re.match(r"https?://[^/\s]+", url):
        raise ConfigError("%s.url must be an http:// or https:// URL" % where)
    check_url(url, "%s.url" % where)  # a host, and a port that parses: the client refuses it later otherwise
    key_id = _str(t, "key_id", where)
    if not key_id:
        raise ConfigError("%s.key_id is required" % where)
    se, sf = _str(t, "secret_env", where), _str(t, "secret_file", where)
    if bool(se) == bool(sf):
        raise ConfigError("%s: set exactly one of secret_env or secret_file" % where)
    if se:
        v = env.get(se)
        if not v:
            raise ConfigError("%s: environment variable %s is not set or empty" % (where, se))
        secret = Secret(v.encode("utf-8"), "env %s" % se)
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
    return Terminal(
        name,
        url.rstrip("/"),
        key_id,
        secret,
        heartbeat_s=_num(t, "heartbeat_s", where, lo=1, hi=86400),
        language=_str(t, "language", where, choices=("zh", "en")),
        queue_size=_num(t, "queue_size", where, lo=1, hi=1_000_000, integer=True),
        rate_burst=_num(t, "rate_burst", where, lo=1, hi=1000, integer=True),
        rate_interval_s=_num(t, "rate_interval_s", where, lo=0, hi=3600),
        timeout_s=_num(t, "timeout_s", where, lo=0.05, hi=600),
        compat=_str(t, "compat", where, default="sentinel", choices=COMPAT_MODES),
        fallback=_names(t, "fallback", where),
        ack_group=_group_name(t, where),
    )


def _group_name(t, where):
    v = _str(t, "ack_group", where)
    if v is not None and not _NAME_RE.match(v):
        raise ConfigError("%s.ack_group must be letters, digits, '.', '_' or '-'" % where)
    return v


def _check_fallback(t, terminals):
    where = "terminals.%s.fallback" % t.name
    for name in t.fallback:
        if name == t.name:
            raise ConfigError(
                "%s names %s itself: an alert that %s is down must reach another terminal; name a different one "
                "(or remove the key and give Alertmanager a pager receiver, docs/DEPLOY.md)" % (where, t.name, t.name)
            )
        if name not in terminals:
            raise ConfigError("%s names terminal %r, which no [terminals.%s] defines" % (where, name, name))


def load_config(path: str, env=None) -> Config:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigError("cannot read %s: %s" % (path, e.strerror)) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("%s is not valid TOML: %s" % (path, e)) from None
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
