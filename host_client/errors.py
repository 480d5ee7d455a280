"""The one exception tree of GPU Sentinel's host side (client, sentinel-send, gateway, probes, emulator).

    SentinelError                 anything host_client raises on purpose
    ├── ConfigError               missing or malformed configuration: the client's URL, key id or secret, and the
    │                             gateway's, the probe's and the emulator's config files (also a ValueError)
    ├── TransportError            no answer: connection refused, reset, timed out (retried)
    ├── ServerError               5xx or 429 still failing after the retries
    ├── RefusedError              the terminal answered 4xx: never retried, the request itself is wrong
    │   └── AuthError             401: unknown key, bad signature, stale timestamp (check clock and secret)
    ├── EventError                the gateway: a GPU event or Alertmanager body it refuses (code, status; also a
    │                             ValueError): host_client.gateway.events
    ├── BodyError                 the gateway: an ingest body that is not strict JSON, too deep or not encodable
    │                             (also a ValueError): host_client.gateway.ingest
    ├── SourceError               the probe: no GPU source usable at all (no NVML, no nvidia-smi, unreadable replay
    │                             file): host_client.probes.gpu_source
    └── CannotStart               sentinel-gateway: the host refuses what the configuration asks (port in use,
                                  address not this host's, state_dir unwritable or held by another gateway):
                                  host_client.gateway.cli

host_client.gateway.config.ConfigError, host_client.probes.config.ConfigError and emulator.config.ConfigError are
this ConfigError, so `except host_client.ConfigError` catches a bad configuration wherever it was read. EventError,
BodyError, SourceError and CannotStart are defined where they are raised (the client does not import the gateway or
the probes); tests/test_client.py walks every host_client module and checks that each public exception class is in
this tree. (The board's firmware has its own small ConfigError: it runs on MicroPython, without host_client.)
"""

__all__ = ["SentinelError", "ConfigError", "TransportError", "ServerError", "RefusedError", "AuthError"]


class SentinelError(Exception):
    """Base of every error host_client raises."""


class ConfigError(SentinelError, ValueError):
    """A configuration that cannot be used. The message names the file, section or key at fault, never a secret."""


class TransportError(SentinelError):
    """No HTTP answer arrived (the request may or may not have reached the terminal). attempts: how many were made."""

    attempts = 1

    def __init__(self, url: str, reason: str):
        super().__init__("%s: %s" % (url, reason))
        self.url = url
        self.reason = reason


class _Answered(SentinelError):
    attempts = 1  # how many attempts were made (a ServerError after retries: all of them)

    def __init__(self, url: str, status: int, code: str, message: str):
        super().__init__("%s answered %d %s: %s" % (url, status, code, message))
        self.url = url
        self.status = status
        self.code = code
        self.message = message


class ServerError(_Answered):
    """The terminal answered 5xx or 429 on every attempt."""


class RefusedError(_Answered):
    """The terminal answered 4xx: the request itself is wrong; sending it again will not help."""


class AuthError(RefusedError):
    """401: unknown key id, bad signature or a timestamp outside the window."""
