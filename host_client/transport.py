"""The one place host_client touches the network. Tests pass their own Transport to AlarmClient."""

from __future__ import annotations

import errno
import http.client
import socket
import urllib.parse

from host_client.errors import ConfigError, TransportError


class Response:
    """One HTTP answer: status, headers (names in lower case) and the body's bytes."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status = status
        self.headers = headers
        self.body = body


class Transport:
    """POSTs bytes and returns a Response; raises TransportError when no HTTP answer arrives."""

    def post(self, url: str, headers: dict[str, str], body: bytes, timeout: float) -> Response:
        raise NotImplementedError


class HTTPTransport(Transport):
    """Plain http.client: one short-lived connection per request, which is what a terminal on a LAN wants."""

    def post(self, url: str, headers: dict[str, str], body: bytes, timeout: float) -> Response:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ConfigError("not an http(s) URL: %r" % url)
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        conn = cls(u.hostname, u.port, timeout=timeout)
        path = u.path or "/"
        try:
            conn.request("POST", path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read(65536)
            return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
        except (TimeoutError, OSError, http.client.HTTPException) as e:
            raise TransportError(url, describe(e)) from None
        finally:
            conn.close()


def describe(e: BaseException) -> str:
    """A network error in a few words an operator reads at a glance ("connection refused", "timed out")."""
    if isinstance(e, TimeoutError):  # socket.timeout is TimeoutError since Python 3.10
        return "timed out"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, socket.gaierror):
        return "host name not found (%s)" % (e.strerror or e)
    if isinstance(e, http.client.RemoteDisconnected):
        return "connection closed without an answer"
    if isinstance(e, ConnectionResetError):
        return "connection reset"
    if isinstance(e, OSError) and e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL):
        return "%s" % (e.strerror or e).lower()
    return "%s: %s" % (type(e).__name__, e)
