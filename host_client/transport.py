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
    """POSTs bytes (and GETs a page) and returns a Response; raises TransportError when no HTTP answer arrives."""

    def post(self, url: str, headers: dict[str, str], body: bytes, timeout: float) -> Response:
        raise NotImplementedError

    def get(self, url: str, timeout: float, *, limit: int = 65536) -> Response:
        """The page's first limit + 1 bytes at most (so a caller can tell a page over limit)."""
        raise NotImplementedError


class HTTPTransport(Transport):
    """Plain http.client: one short-lived connection per request, which is what a terminal on a LAN wants."""

    def post(self, url: str, headers: dict[str, str], body: bytes, timeout: float) -> Response:
        return self._request("POST", url, headers, body, timeout, 65536)

    def get(self, url: str, timeout: float, *, limit: int = 65536) -> Response:
        # timeout bounds the whole answer, not each recv: a page dripped a byte a second is cut at it
        return self._request("GET", url, {}, None, timeout, limit + 1, total=timeout)

    def _request(self, method, url, headers, body, timeout, limit, total=None):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ConfigError("not an http(s) URL: %r" % url)
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        conn = cls(u.hostname, u.port, timeout=timeout)
        path = u.path or "/"
        cut = _Cutoff(conn, total) if total is not None else None
        try:
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read(limit)
            if cut is not None and cut.fired:
                raise TimeoutError("the whole answer took over %g s" % total)
            return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
        except (TimeoutError, OSError, http.client.HTTPException) as e:
            if cut is not None and cut.fired:
                raise TransportError(url, "timed out (the whole answer took over %g s)" % total) from None
            raise TransportError(url, describe(e)) from None
        finally:
            if cut is not None:
                cut.cancel()
            conn.close()


class _Cutoff:
    """Shuts a connection's socket down once `total` seconds have passed (a timer thread), so a read that gets a
    byte just often enough to beat the per-recv timeout still ends on time."""

    def __init__(self, conn, total):
        import threading

        self.conn = conn
        self.fired = False
        self._timer = threading.Timer(total, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self):
        self.fired = True
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self):
        self._timer.cancel()


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
        return (e.strerror or str(e)).lower()
    return "%s: %s" % (type(e).__name__, e)


def listen_error(host: str, port: int, e: OSError, setting: str) -> str:
    """One line for an OSError from bind(): what is wrong and the fix; setting names where the address is set."""
    where = "%s:%d" % ("[%s]" % host if ":" in host else host, port)
    if isinstance(e, socket.gaierror):
        return "cannot listen on %s: %s is not an address of this host (%s)" % (where, host, setting)
    if e.errno == errno.EADDRINUSE:
        return (
            "cannot listen on %s: the port is in use (is it already running? `ss -ltnp` shows which program); "
            "stop that one or choose another port (%s)" % (where, setting)
        )
    if e.errno == errno.EADDRNOTAVAIL:
        return (
            "cannot listen on %s: address not available (it is not one of this host's addresses); use one of them, "
            "0.0.0.0 for all, or 127.0.0.1 (%s)" % (where, setting)
        )
    if e.errno in (errno.EACCES, errno.EPERM):
        return (
            "cannot listen on %s: permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE); use a "
            "port above 1023 (%s)" % (where, setting)
        )
    return "cannot listen on %s: %s (%s)" % (where, e.strerror or e, setting)
