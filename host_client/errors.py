"""The exception tree of host_client.

    SentinelError                 anything this library raises
    ├── ConfigError               missing or malformed configuration (URL, key id, secret)
    ├── TransportError            no answer: connection refused, reset, timed out (retried)
    ├── ServerError               5xx or 429 still failing after the retries
    └── RefusedError              the terminal answered 4xx: never retried, the request itself is wrong
        └── AuthError             401: unknown key, bad signature, stale timestamp (check clock and secret)
"""


class SentinelError(Exception):
    """Base of every error host_client raises."""


class ConfigError(SentinelError):
    pass


class TransportError(SentinelError):
    def __init__(self, url, reason):
        super().__init__("%s: %s" % (url, reason))
        self.url = url
        self.reason = reason


class _Answered(SentinelError):
    def __init__(self, url, status, code, message):
        super().__init__("%s answered %d %s: %s" % (url, status, code, message))
        self.url = url
        self.status = status
        self.code = code
        self.message = message


class ServerError(_Answered):
    pass


class RefusedError(_Answered):
    pass


class AuthError(RefusedError):
    pass
