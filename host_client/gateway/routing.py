"""Routing policy: which terminals an incident goes to, when its P0 escalates, where an alert about a terminal goes.

The gateway's configuration ([[routes]], [routing], terminals' fallback) is read and checked in config.py; the
rules that use it are here, over plain values, so they read (and are tested) without a file.
"""

from __future__ import annotations

import fnmatch

from host_client import schema
from host_client.errors import ConfigError
from host_client.schema import Key

# The label the shipped Prometheus rules and scrape configs put on an alert about one terminal
# (deploy/prometheus): such an alert is never delivered to the terminal it names.
ABOUT_TERMINAL_LABEL = "terminal"
# A [[routes]] table's keys, in the order its errors list them
ROUTE_KEYS = {
    "racks": Key("strlist", []),
    "labels": Key("any", {}),
    "terminals": Key("strlist"),
    "escalate_after_s": Key("num", lo=1, hi=86400 * 7),
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


def parse_routes(routes) -> list[Route]:
    """[[routes]] (a list of tables) -> Routes; ConfigError naming routes[i] and the key at fault."""
    if not isinstance(routes, list):
        raise ConfigError("[[routes]] must be an array of tables")
    out = []
    for i, r in enumerate(routes):
        where = "routes[%d]" % i
        if not isinstance(r, dict):
            raise ConfigError("%s must be a table" % where)
        v = schema.section({}, where, ROUTE_KEYS, table=r, sort_known=False)
        if not v["terminals"]:
            raise ConfigError("%s.terminals must name at least one terminal" % where)
        labels = v["labels"]
        if not isinstance(labels, dict) or not all(isinstance(x, str) for x in labels.values()):
            raise ConfigError('%s.labels must be a table of label = "glob"' % where)
        out.append(Route(v["terminals"], v["racks"], labels, v["escalate_after_s"]))
    return out


def route(routes, default, terminals, labels: dict) -> list[str]:
    """The terminals an incident goes to: every matching route's, else the default. An alert about a terminal
    (its `terminal` label names one of terminals, {name: Terminal}) never goes to that terminal: to the others
    routed, else to its fallback, else to every other terminal (docs/GATEWAY.md, "Alerts about the alarm path")."""
    out = []
    for r in routes:
        if r.matches(labels):
            for n in r.terminals:
                if n not in out:
                    out.append(n)
    out = out or list(default)
    about = terminals.get(labels.get(ABOUT_TERMINAL_LABEL) or "")
    if about is None:
        return out
    return _around(out, about, terminals)


def _around(out, about, terminals) -> list[str]:
    # apart from route(): these comprehensions' closure would make every route() call build a cell for about
    out = [n for n in out if n != about.name]
    return out or list(about.fallback) or [n for n in terminals if n != about.name]


def escalate_after(routes, default_s: float, labels: dict) -> float:
    """Seconds a P0 with these labels may stay unacknowledged: the shortest of its matching routes' values, else
    default_s ([routing].escalate_after_s)."""
    own = [r.escalate_after_s for r in routes if r.escalate_after_s is not None and r.matches(labels)]
    return float(min(own)) if own else default_s


def check_names(routes, default, terminals) -> None:
    """ConfigError unless every terminal a route, the default or a fallback names is defined, and no terminal falls
    back to itself."""
    for name in list(default) + [n for r in routes for n in r.terminals]:
        if name not in terminals:
            raise ConfigError("route names terminal %r, which no [terminals.%s] defines" % (name, name))
    for t in terminals.values():
        where = "terminals.%s.fallback" % t.name
        for name in t.fallback:
            if name == t.name:
                raise ConfigError(
                    "%s names %s itself: an alert that %s is down must reach another terminal; name a different "
                    "one (or remove the key and give Alertmanager a pager receiver, docs/DEPLOY.md)"
                    % (where, t.name, t.name)
                )
            if name not in terminals:
                raise ConfigError("%s names terminal %r, which no [terminals.%s] defines" % (where, name, name))
