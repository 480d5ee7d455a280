"""The host side's config files, declared: one TOML reader, and a table of keys per section that checks a parsed
file (type, default, range, choices, "did you mean" for an unknown key, a renamed key still taken) with one-line
ConfigErrors. The client's (host_client/config.py), the gateway's (gateway/config.py) and the probe's
(probes/config.py) loaders use it; so can any new one:

    from host_client import schema
    from host_client.schema import Key

    KEYS = {
        "lane": {
            "timeout_s": Key("float", 2.0, lo=0.05, hi=600),
            "mode": Key("str", "drain", choices=("drain", "watch")),
            "hosts": Key("strlist", []),
            "enabled": Key("bool", True),
        },
    }
    doc = schema.read_toml(path)             # ConfigError "cannot read ..." / "... is not valid TOML: ..."
    schema.check_sections(doc, KEYS)         # ConfigError "unknown section [lan] (known: lane)"
    lane = schema.section(doc, "lane", KEYS["lane"])   # {"timeout_s": 2.0, ...}: defaults filled, values checked
    # ConfigError "lane.timeout_s must be >= 0.05", "unknown key lane.mdoe: did you mean mode? (known: ...)"

Kinds: "bool"; "int" (not a bool); "float" (an int or a float, given back as a float); "num" (an int or a float, as
given); "str"; "list" (any list); "strlist" (a list of strings); "any" (the loader checks it: a table of its own
shape, a name or a list of names). A Key with default None is optional: absent, it
reads None. Cross-key rules (a file needed by a source, two keys that exclude each other) stay in the loader, which
words them itself.

How an error names its key is the loader's Style: DOTTED (`gateway.port must be an integer`, the gateway's and
the default), BRACKETED (`[gpu] confirm must be an integer, got 1.5`, the probe's) or one of the loader's own
(remedy's: `slurm.checkpoint_grace_s must be between 0 and 86400 (got -1)`); those texts are what the loaders said
before this module, and the tests pin them. Keys at the top of a file are read as section "" (named by the key).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

from host_client.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

__all__ = [
    "BRACKETED",
    "DOTTED",
    "Key",
    "Style",
    "TOMLDecodeError",
    "check",
    "check_sections",
    "deprecated",
    "did_you_mean",
    "parse_toml",
    "read_toml",
    "section",
]

TOMLDecodeError = tomllib.TOMLDecodeError
log = logging.getLogger("sentinel.config")
KINDS = ("bool", "int", "float", "num", "str", "list", "strlist", "any")


def parse_toml(text: str) -> dict:
    """TOML text -> dict (tomllib, or tomli on Python 3.10). Raises TOMLDecodeError."""
    return tomllib.loads(text)


def read_toml(path: str, *, unreadable: str = "cannot read %s: %s", invalid: str = "%s is not valid TOML: %s") -> dict:
    """A TOML file -> dict. ConfigError worded by unreadable % (path, reason) or invalid % (path, parser's error)."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(unreadable % (path, e.strerror or e)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(invalid % (path, e)) from None


class Key:
    """One key of a section: its kind (KINDS), its default (None: optional, read as None when absent), an
    inclusive range lo..hi for numbers, the values a string may take."""

    __slots__ = ("kind", "default", "lo", "hi", "choices")

    def __init__(self, kind: str, default: Any = None, *, lo=None, hi=None, choices: tuple | None = None):
        if kind not in KINDS:
            raise ValueError("schema kind must be one of %s, not %r" % (", ".join(KINDS), kind))
        self.kind = kind
        self.default = default
        self.lo = lo
        self.hi = hi
        self.choices = choices

    def __repr__(self):
        return "Key(%r, %r)" % (self.kind, self.default)


class Style:
    """How a loader names a key in its errors: where % (section, key) (the key alone at the top of the file); got:
    the errors end got_text % value (", got <value>"); sorted_known: an unknown key or section lists the known ones
    sorted (else in the table's order); between: a number out of a range with both ends says "must be between lo
    and hi" (else the end it passed)."""

    __slots__ = ("where", "got", "sorted_known", "got_text", "between")

    def __init__(self, where: str, *, got: bool, sorted_known: bool, got_text: str = ", got %r", between: bool = False):
        self.where = where
        self.got = got
        self.sorted_known = sorted_known
        self.got_text = got_text
        self.between = between

    def name(self, section: str, key: str) -> str:
        return self.where % (section, key) if section else key

    def error(self, where: str, text: str, value: Any) -> ConfigError:
        return ConfigError("%s %s%s" % (where, text, self.got_text % (value,) if self.got else ""))

    def known(self, names) -> str:
        return ", ".join(sorted(names) if self.sorted_known else names)


DOTTED = Style("%s.%s", got=False, sorted_known=True)
BRACKETED = Style("[%s] %s", got=True, sorted_known=False)


def did_you_mean(word: str, known) -> str:
    """': did you mean X?' for the closest known name to a mistyped one, else ''."""
    import difflib  # only a mistake needs it

    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.75)
    return ": did you mean %s?" % close[0] if close else ""


_said: set[str] = set()


def deprecated(old: str, new: str) -> None:
    """Say once per process that the setting old is now spelt new (it is still taken)."""
    if old not in _said:
        _said.add(old)
        log.warning("%s is deprecated: call it %s (the old name is still taken)", old, new)


def check(value: Any, key: Key, where: str, style: Style = DOTTED) -> Any:
    """value if it is what key declares (a "float" comes back as a float), else ConfigError naming where."""
    k = key.kind
    if k == "bool":
        if not isinstance(value, bool):
            raise style.error(where, "must be true or false", value)
        return value
    if k in ("int", "float", "num"):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or (k == "int" and not isinstance(value, int))
        ):
            raise style.error(where, "must be an integer" if k == "int" else "must be a number", value)
        given = value
        if k == "float":
            value = float(value)
        out_of_range = (key.lo is not None and value < key.lo) or (key.hi is not None and value > key.hi)
        if out_of_range and style.between and key.lo is not None and key.hi is not None:
            raise style.error(where, "must be between %s and %s" % (key.lo, key.hi), given)
        if key.lo is not None and value < key.lo:
            lo_text = "must not be negative" if key.lo == 0 and style.got else "must be >= %s" % (key.lo,)
            raise style.error(where, lo_text, value)
        if key.hi is not None and value > key.hi:
            raise style.error(where, "must be <= %s" % (key.hi,), value)
        return value
    if k == "str":
        if not isinstance(value, str):
            raise style.error(where, "must be a string", value)
        if key.choices and value not in key.choices:
            raise style.error(where, "must be one of %s" % ", ".join(key.choices), value)
        return value
    if k == "any":
        return value
    if k == "list":
        if not isinstance(value, list):
            raise style.error(where, "must be a list", value)
        return list(value)
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):  # strlist
        raise style.error(where, "must be a list of strings", value)
    return list(value)


def check_sections(doc: Any, known: Mapping[str, Any], style: Style = DOTTED) -> None:
    """ConfigError unless doc is a table whose every name is one of known's (the sections) and each present section
    whose known value is not None (a free-form one: terminals, routes) is a table."""
    if not isinstance(doc, dict):
        raise ConfigError("the configuration must be a table")
    for name in doc:
        if name not in known:
            raise ConfigError(
                "unknown section [%s]%s (known: %s)" % (name, did_you_mean(name, known), style.known(known))
            )
    for name, keys in known.items():
        if keys is not None and name in doc and not isinstance(doc[name], dict):
            raise ConfigError("[%s] must be a table" % name)


def section(
    doc: Mapping[str, Any],
    name: str,
    keys: Mapping[str, Key],
    style: Style = DOTTED,
    *,
    table: Mapping[str, Any] | None = None,
    renamed: Mapping[str, str] | None = None,
    removed: Mapping[str, str] | None = None,
    sort_known: bool | None = None,
) -> dict[str, Any]:
    """The section name of doc (or table, when given: a nested one such as terminals.NAME) checked against keys:
    {key: value} for every key, absent ones at their default. An unknown key is a ConfigError with the closest
    known name; renamed {old: new} keys are taken under their new name with a deprecation line (once); removed
    {key: message} keys are refused with their message. sort_known overrides the style's order of known names."""
    values = doc.get(name, {}) if table is None else table
    if not isinstance(values, dict):
        raise ConfigError("[%s] must be a table" % name)
    renamed = renamed or {}
    out = {k: key.default for k, key in keys.items()}
    for k, v in values.items():
        if removed and k in removed:
            raise ConfigError(removed[k])
        new = renamed.get(k)
        if new is not None:
            if new in values:
                raise ConfigError(
                    "%s and %s are the same setting: keep %s" % (style.name(name, k), style.name(name, new), new)
                )
            deprecated(style.name(name, k), style.name(name, new))
            k = new
        key = keys.get(k)
        if key is None:
            order = style.sorted_known if sort_known is None else sort_known
            raise ConfigError(
                "unknown key %s%s (known: %s)"
                % (style.name(name, k), did_you_mean(k, keys), ", ".join(sorted(keys) if order else keys))
            )
        if v is not None:  # None (no TOML value; a dict built in Python): absent
            out[k] = check(v, key, style.name(name, k), style)
    return out
