"""Where a sender finds its terminal: explicit arguments, then environment, then a file.

Environment: SENTINEL_URL, SENTINEL_KEY_ID, SENTINEL_SECRET (or SENTINEL_SECRET_FILE), SENTINEL_CONFIG (a file).
Files: JSON or TOML with the keys url, key_id, and secret or secret_file. With nothing given, the local emulator's
own file ($XDG_CONFIG_HOME/gpu-sentinel/emulator.json, written at its first start) is used, so
`sentinel-send` talks to a local emulator with no setup.
"""

from __future__ import annotations

import errno
import json
import os
import urllib.parse
from collections.abc import Mapping

from host_client import schema
from host_client.errors import ConfigError

# The keys a sender reads from a file (other keys are left alone: the emulator's own file holds its settings too)
FILE_KEYS = {
    "url": schema.Key("str"),
    "key_id": schema.Key("str"),
    "secret": schema.Key("str"),
    "secret_file": schema.Key("str"),
}


def emulator_config_path() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "gpu-sentinel", "emulator.json")


class Target:
    """One terminal: where it is and how to sign for it. repr never shows the secret."""

    __slots__ = ("url", "key_id", "secret")

    def __init__(self, url: str, key_id: str, secret: str | bytes):
        if not url or not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError("terminal URL must start with http:// or https:// (got %r)" % (url,))
        check_url(url, "terminal URL")
        if not key_id or not isinstance(key_id, str):
            raise ConfigError("key id is missing")
        if isinstance(secret, str):
            secret = secret.encode()
        if not secret:
            raise ConfigError("secret is missing or empty")
        self.url = url.rstrip("/")
        self.key_id = key_id
        self.secret = secret

    def __repr__(self):
        return "Target(url=%r, key_id=%r, secret=<hidden>)" % (self.url, self.key_id)


def unreadable_hint(e: OSError) -> str:
    """The fix for a file this user may not read, to follow its error; else nothing."""
    if e.errno in (errno.EACCES, errno.EPERM):
        return " (this user, uid %d, may not read it: chown or chmod it, or run as its owner)" % os.getuid()
    return ""


def check_url(url: str, what: str = "URL") -> None:
    """Raise ConfigError unless url is http(s)://host[:port][/path] with a host and a port that parses."""
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https"):
        raise ConfigError("%s must start with http:// or https:// (got %r)" % (what, url))
    try:
        port = u.port
    except ValueError:
        raise ConfigError("%s %r: the port is not a number in 0..65535" % (what, url)) from None
    if not u.hostname:
        raise ConfigError("%s %r has no host name" % (what, url))
    if port == 0:
        raise ConfigError("%s %r: port 0 is not a port one can connect to" % (what, url))


def read_file(path: str) -> dict:
    """A JSON or TOML config file -> dict. ConfigError names the file and the fault (never a secret's value)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError("cannot read config file %s: %s" % (path, e.strerror or e)) from None
    try:
        if path.endswith(".toml"):
            data = schema.parse_toml(raw.decode("utf-8"))
        else:
            data = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:  # TOMLDecodeError is a ValueError
        raise ConfigError("config file %s is malformed: %s" % (path, e)) from None
    if not isinstance(data, dict):
        raise ConfigError("config file %s must hold an object/table" % path)
    for k, key in FILE_KEYS.items():
        if data.get(k) is not None:
            schema.check(data[k], key, "config file %s: %s" % (path, k))
    return data


def _secret_from_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            s = f.read().strip()
    except OSError as e:
        raise ConfigError("cannot read secret file %s: %s%s" % (path, e.strerror or e, unreadable_hint(e))) from None
    if not s:
        raise ConfigError("secret file %s is empty" % path)
    return s


def resolve(
    *,
    url: str | None = None,
    key_id: str | None = None,
    secret: str | bytes | None = None,
    secret_file: str | None = None,
    config: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Target:
    """Merge arguments > environment > config file > the local emulator's file into a Target (keywords only)."""
    env = os.environ if env is None else env
    url = url or env.get("SENTINEL_URL")
    key_id = key_id or env.get("SENTINEL_KEY_ID")
    secret = secret or env.get("SENTINEL_SECRET")
    secret_file = secret_file or env.get("SENTINEL_SECRET_FILE")
    path = config or env.get("SENTINEL_CONFIG")
    if path is None and not (url and key_id and (secret or secret_file)):
        default = emulator_config_path()
        if os.path.exists(default):
            path = default
    if path:
        data = read_file(path)
        if (
            not config
            and not env.get("SENTINEL_CONFIG")
            and key_id
            and not (secret or secret_file)
            and key_id != data.get("key_id")
        ):
            # the local emulator's secret belongs to its own key id: signing another's with it is a sure 401
            raise ConfigError(
                "key id %r (--key-id or SENTINEL_KEY_ID) has no secret: set SENTINEL_SECRET or SENTINEL_SECRET_FILE "
                "(or --secret-file); the local emulator's %s holds the secret of key id %r only"
                % (key_id, path, data.get("key_id"))
            )
        url = url or data.get("url")
        key_id = key_id or data.get("key_id")
        if not secret and not secret_file:
            secret = data.get("secret")
            secret_file = data.get("secret_file")
    if not secret and secret_file:
        secret = _secret_from_file(secret_file)
    missing = [n for n, v in (("url", url), ("key id", key_id), ("secret", secret)) if not v]
    if missing:
        raise ConfigError(
            "no terminal configured: missing %s (give arguments, set SENTINEL_URL, SENTINEL_KEY_ID and "
            "SENTINEL_SECRET, or start the emulator once to create %s)" % (", ".join(missing), emulator_config_path())
        )
    assert url and key_id and secret  # missing is empty
    return Target(url, key_id, secret)
