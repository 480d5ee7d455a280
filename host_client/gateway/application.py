"""The gateway's HTTP application: routes, ingest auth, body decoding, the service's outcomes mapped to HTTP
statuses, and the wait for the disk. It takes a complete request (method, path, body, close, Authorization) and
gives back the answer's bytes, or a Deferred answer; it knows nothing of sockets, parsers or loops.

Endpoints: POST /api/v1/gpu_event, /api/v1/alertmanager, /api/v1/grafana; GET /healthz, /metrics.

Durability: an event that created an alarm is answered only once that alarm is on disk. The service collects the
(persister, gen) the answer must wait for; the Deferred is answered when every persister's thread reports the write
(Persister.add_waiter, handed to the loop's thread by the connection's scheduler), or 503 if one fails or takes
longer than persist_wait_s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from .answers import ALLOW_GET, ALLOW_POST, JSON, WWW_AUTH, encode
from .front_status import FrontStatus
from .history import PATHS as INCIDENT_PATHS
from .history import answer as incidents_answer
from .ingest import BodyError, decode_body
from .service import INVALID, MALFORMED, TAKEN, UNAUTHORIZED, UNAVAILABLE, Gateway

log = logging.getLogger("sentinel.gateway")

# the service's outcomes as HTTP statuses
HTTP_STATUS = {TAKEN: 200, MALFORMED: 400, UNAUTHORIZED: 401, INVALID: 422, UNAVAILABLE: 503}
_METRICS_TYPE = b"text/plain; version=0.0.4"
_INTERNAL = {"ok": False, "error": "internal", "message": "internal error"}
_USE_POST = {"ok": False, "error": "method_not_allowed", "message": "use POST"}
_USE_GET = {"ok": False, "error": "method_not_allowed", "message": "use GET"}
_NOT_FOUND = {"ok": False, "error": "not_found", "message": "no such endpoint"}
TIDY_S = 1.0  # how often the service is asked to forget what is worth nothing (Gateway.tidy)
TIDY_MANY = 4096  # entries forgotten at once that make the memory worth handing back to the system


class Deferred:
    """An answer that waits for the disk: ready once every (persister, gen) is written, late (503) if one fails or
    the wait passes persist_wait_s. The connection holds its place in the answers' order and starts it."""

    __slots__ = ("_waits", "_wait_s", "_ready", "_late", "_left", "_done", "_fill")

    def __init__(self, waits, wait_s: float, ready: bytes, late: Callable[[], bytes]):
        self._waits = waits
        self._wait_s = wait_s
        self._ready = ready
        self._late = late
        self._left = len(waits)
        self._done = False
        self._fill = None

    def start(self, fill: Callable[[bytes], None], call_soon_threadsafe, call_later) -> None:
        """fill(answer bytes) is called once, in the loop's thread: call_soon_threadsafe hands a persister's report
        over, call_later sets the deadline (no cancel: a deadline after the answer finds it done)."""
        self._fill = fill
        call_later(self._wait_s, self._timed_out)
        waits, self._waits = self._waits, ()
        for p, gen in waits:
            p.add_waiter(gen, lambda ok: call_soon_threadsafe(lambda: self._finish(ok)))

    def _timed_out(self):
        self._finish(False)

    def _finish(self, ok):
        if self._done:
            return
        fill = self._fill
        assert fill is not None
        if not ok:
            self._done = True
            fill(self._late())
            return
        self._left -= 1
        if self._left == 0:
            self._done = True
            fill(self._ready)


class Application:
    """Serves one Gateway. front_status: () -> FrontStatus of the front this application is behind (/healthz and
    /metrics), or None."""

    def __init__(self, gw: Gateway, *, persist_wait_s: float, front_status: Callable[[], FrontStatus] | None = None):
        self.gw = gw
        self.persist_wait_s = persist_wait_s
        self.front_status = front_status
        self.auth = gw.auth_required  # the ingest endpoints require a bearer token ([ingest], config.py)
        self._next_tidy = 0.0
        self.ingest = {
            "/api/v1/gpu_event": ("gpu_event", gw.gpu_event),
            "/api/v1/alertmanager": ("alertmanager", lambda b, w, p: gw.alertmanager(b, "alertmanager", w, p)),
            "/api/v1/grafana": ("grafana", lambda b, w, p: gw.alertmanager(b, "grafana", w, p)),
        }

    def handle(self, method: str, path: str, body: bytes, close: bool, auth: str | None, peer=None):
        """The answer to one complete request: its bytes, or a Deferred. close: the answer ends the connection.
        peer: a callable that names the client, asked only when a refusal is logged."""
        h = self.ingest.get(path)
        if h is not None:
            if method != "POST":
                return encode(405, _USE_POST, close, JSON, ALLOW_POST)
            source, fn = h
            if self.auth:
                denied = self.gw.check_auth(source, auth, peer)
                if denied is not None:
                    return encode(401, denied, close, JSON, WWW_AUTH)
            try:
                obj = decode_body(body)
            except BodyError as e:
                return encode(e.status, self.gw.refuse(source, e.code, str(e), peer), close)
            waits = []
            try:
                verdict, answer = fn(obj, waits, peer)  # (body, waits, peer): positional, the storm's path
            except Exception as e:  # one bad request must not take the server down
                log.exception("ingest_error", extra={"fields": {"source": source, "error": str(e)}})
                return encode(500, _INTERNAL, close)
            data = encode(HTTP_STATUS[verdict], answer, close)
            if not waits:
                return data
            # partial, not a lambda: a closure would make every call build cells for self, source and close
            return Deferred(waits, self.persist_wait_s, data, partial(self._not_durable, source, close))
        if path in INCIDENT_PATHS:
            return self._incidents(method, path, body, close, auth)
        if path == "/healthz" and method == "GET":
            return encode(200, self.gw.health(self._front()), close)
        if path == "/metrics" and method == "GET":
            return encode(200, self.gw.metrics_text(self._front()).encode(), close, _METRICS_TYPE)
        if path in ("/healthz", "/metrics"):
            return encode(405, _USE_GET, close, JSON, ALLOW_GET)
        return encode(404, _NOT_FOUND, close)

    def tick(self, now: float) -> bool:
        """Called by the loop now and then (monotonic now): about once a second the service forgets what has
        outlived its use, though no request came to prune it. True: it forgot many entries (a flood has passed;
        the process may hand memory back)."""
        if now < self._next_tidy:
            return False
        self._next_tidy = now + TIDY_S
        try:
            return self.gw.tidy() >= TIDY_MANY
        except Exception as e:  # housekeeping must not stop the loop
            log.exception("tidy_failed", extra={"fields": {"error": str(e)}})
            return False

    def too_large(self, path: str | None, auth: str | None, max_body: int, peer=None) -> bytes:
        """The answer to a body over max_body, which ends the connection: 401 for an ingest endpoint without its
        token (so a client learns of the token before it learns of the size), else 413, counted."""
        h = self.ingest.get(path) if path is not None else None
        source = h[0] if h is not None else None
        message = "body must be 0..%d bytes" % max_body
        if source is None:
            return encode(413, {"ok": False, "error": "too_large", "message": message}, True)
        if self.auth:
            denied = self.gw.check_auth(source, auth, peer)
            if denied is not None:
                return encode(401, denied, True, JSON, WWW_AUTH)
        return encode(413, self.gw.refuse(source, "too_large", message, peer), True)

    def _incidents(self, method, path, body, close, auth) -> bytes:
        """GET /api/v1/incidents, POST /api/v1/incidents/ack: the ingest token guards them (a 401 is counted as
        ingest's are); a body that is not JSON is a 400."""
        denied = self.gw.check_auth("incidents", auth)
        if denied is not None:
            return encode(401, denied, close, JSON, WWW_AUTH)
        obj = None
        if method == "POST" and path != "/api/v1/incidents":
            try:
                obj = decode_body(body or b"")
            except BodyError as e:
                return encode(e.status, {"ok": False, "error": e.code, "message": str(e)}, close)
        status, answer = incidents_answer(self.gw, method, path, obj, now=self.gw.clock())
        if status == 405:
            return encode(status, answer, close, JSON, ALLOW_GET if path == "/api/v1/incidents" else ALLOW_POST)
        return encode(status, answer, close)

    def _front(self) -> FrontStatus | None:
        return self.front_status() if self.front_status is not None else None

    def _not_durable(self, source, close) -> bytes:
        verdict, answer = self.gw.not_durable_answer(source)
        return encode(HTTP_STATUS[verdict], answer, close)
