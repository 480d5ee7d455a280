"""AlarmClient: sign an alarm with the shared core and deliver it to one terminal, retrying only what is safe."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from host_client.backoff import backoff_delay
from host_client.config import Target, resolve
from host_client.errors import AuthError, ConfigError, RefusedError, SentinelError, ServerError, TransportError
from host_client.schema import deprecated
from host_client.transport import HTTPTransport, Transport
from sentinel_core.alarm import Alarm
from sentinel_core.errors import ProtocolError
from sentinel_core.receiver import PATH_ACK, PATH_ALARM, PATH_HEARTBEAT, PATH_UNMUTE
from sentinel_core.signing import Signer, scope
from sentinel_core.validate import parse_alarm

PATH_STATUS = "/api/v1/status"  # the terminal's state, an unsigned GET on both shells (docs/PROTOCOL.md)

RETRY_STATUSES = (429, 500, 502, 503, 504)


@dataclass(frozen=True)
class Ack:
    """The terminal's acknowledgement of one request.

    url is the endpoint that answered, status its HTTP status (200), duplicate whether the terminal had already
    acted on this message id (a retry), attempts how many were needed, elapsed_s the time they took, and answer
    the terminal's JSON answer as it came.
    """

    url: str
    status: int
    duplicate: bool
    attempts: int
    elapsed_s: float
    answer: dict = field(default_factory=dict)

    @property
    def level(self) -> str | None:
        """The level the terminal took the alarm at ("P0", "P1", "NORMAL"); None for an ACK, heartbeat or duplicate."""
        return self.answer.get("level")


@dataclass(frozen=True)
class SignedRequest:
    """A request ready to send: the full URL, its headers (signature included) and the exact body bytes."""

    url: str
    headers: dict
    body: bytes


def encode_body(obj: dict) -> bytes:
    # Raw UTF-8 rather than \\u escapes: shorter on the wire, and what every terminal decodes the same way.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


class AlarmClient:
    """Sends signed requests to one terminal.

    timeout is per attempt (the RFC's gateway uses 3 s). retries counts extra attempts after connection errors,
    5xx and 429; a 4xx is never retried. on_retry(attempt, tries, delay, error), when given, is called before each
    retry: attempt is the one about to be made (2..tries), delay the pause before it, error what failed. The
    pause grows from backoff_initial_s to backoff_max_s (host_client.backoff; backoff= and backoff_max=, their names
    before, are still taken).
    The error raised after the last attempt carries attempts (how many were made).
    Every attempt is signed afresh, and an alarm without an id gets one, so a
    retry the terminal already acted on is answered as a duplicate instead of sounding twice.
    Everything after the secret is keyword-only.
    """

    def __init__(
        self,
        url: str,
        key_id: str,
        secret: str | bytes,
        *,
        timeout: float = 3.0,
        retries: int = 3,
        backoff_initial_s: float = 0.2,
        backoff_max_s: float = 2.0,
        transport: Transport | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        on_retry: Callable[[int, int, float, SentinelError], None] | None = None,
        backoff: float | None = None,
        backoff_max: float | None = None,
    ):
        self.target = Target(url, key_id, secret)
        if not timeout > 0:  # 0 would make the socket non-blocking: "Operation now in progress"
            raise ConfigError("timeout must be more than 0 seconds (got %r)" % (timeout,))
        if retries < 0:
            raise ConfigError("retries must be 0 or more (got %r)" % (retries,))
        self.on_retry = on_retry
        self.timeout = timeout
        self.retries = retries
        if backoff is not None:  # the names before issue 38: still taken, said once
            deprecated("AlarmClient(backoff=)", "backoff_initial_s")
            backoff_initial_s = backoff
        if backoff_max is not None:
            deprecated("AlarmClient(backoff_max=)", "backoff_max_s")
            backoff_max_s = backoff_max
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.transport = transport or HTTPTransport()
        self._signer = Signer(self.target.secret)
        self._clock = clock
        self._sleep = sleep

    @classmethod
    def from_config(cls, path: str | None = None, **kwargs) -> AlarmClient:
        """From a config file, the environment, or the local emulator's file (see host_client.config)."""
        t = resolve(config=path)
        return cls(t.url, t.key_id, t.secret, **kwargs)

    @property
    def url(self) -> str:
        return self.target.url

    def __repr__(self):
        return "AlarmClient(%r, key_id=%r)" % (self.target.url, self.target.key_id)

    def sign(self, path: str, obj: dict, *, now: float | None = None) -> SignedRequest:
        """The exact request that would be sent: for --dry-run, and for tests of other senders."""
        body = encode_body(obj)
        ts = str(int(self._clock() if now is None else now))
        headers = {
            "Content-Type": "application/json",
            "X-API-Key": self.target.key_id,
            "X-Timestamp": ts,
            "X-Signature": self._signer.sign(ts, body, scope("POST", path)),
        }
        return SignedRequest(url=self.target.url + path, headers=headers, body=body)

    def send(self, alarm: Alarm) -> Ack:
        """Deliver an Alarm; returns an Ack or raises a SentinelError."""
        if not isinstance(alarm, Alarm):
            raise TypeError("send() takes a sentinel_core Alarm; build one with host_client.preset()")
        wire = alarm.to_wire()
        if "id" not in wire:
            wire["id"] = uuid.uuid4().hex[:16]
        try:
            parse_alarm(wire)  # the terminal's own schema: refuse here, with its words, before the network
        except ProtocolError as e:
            raise RefusedError(self.target.url, e.status, e.code, e.message) from None
        return self._deliver(PATH_ALARM, wire)

    def ack(self, key: str | None = None, *, long: bool = False, id: str | None = None, by: str | None = None) -> Ack:
        """Remote ACK: mute (long=False) or clear (long=True), for one incident key or all. id: the message id
        (default random); two senders of one ACK that give it the same id have it applied once (the terminal's
        replay memory answers the second a duplicate). by: who acknowledged ("cli", "group:<member>"; at most 32
        bytes), which the terminal shows beside the alarm."""
        body = {"long": bool(long), "id": id or uuid.uuid4().hex[:16]}
        if key is not None:
            body["key"] = key
        if by:
            body["by"] = by
        return self._deliver(PATH_ACK, body)

    def unmute(self, key: str | None = None) -> Ack:
        """The way out of an ACK: end the mute and every acknowledgement (with key: that incident's only)."""
        body = {"id": uuid.uuid4().hex[:16]}
        if key is not None:
            body["key"] = key
        return self._deliver(PATH_UNMUTE, body)

    def heartbeat(self, interval: int | None = None) -> Ack:
        """Tell the terminal the alarm path is alive; with interval, it alarms if the next one is late; interval 0
        disarms the terminal's dead-man's switch (a gateway that is being retired)."""
        body: dict[str, str | int] = {"id": uuid.uuid4().hex[:16]}
        if interval is not None:
            body["interval"] = int(interval)
        return self._deliver(PATH_HEARTBEAT, body)

    def status_page(self, limit: int = 65536) -> bytes:
        """The terminal's /api/v1/status page as bytes (at most limit + 1: a longer page is not a terminal's);
        TransportError when it does not answer, ServerError on a status other than 200. One attempt."""
        url = self.target.url + PATH_STATUS
        r = self.transport.get(url, self.timeout, limit=limit)
        if r.status != 200:
            raise ServerError(url, r.status, "http_%d" % r.status, "the status page did not answer 200")
        return r.body

    def _deliver(self, path: str, obj: dict) -> Ack:
        start = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            req = self.sign(path, obj)
            try:
                r = self.transport.post(req.url, req.headers, req.body, self.timeout)
            except TransportError as e:
                if attempt > self.retries:
                    e.attempts = attempt
                    raise
                self._pause(attempt, None, e)
                continue
            answer = _parse_answer(r.body)
            if r.status == 200 and answer.get("ok") is True:
                return Ack(
                    url=req.url,
                    status=r.status,
                    duplicate=bool(answer.get("duplicate")),
                    attempts=attempt,
                    elapsed_s=time.monotonic() - start,
                    answer=answer,
                )
            code = answer.get("error", "http_%d" % r.status)
            message = answer.get("message", "unexpected answer")
            if r.status in RETRY_STATUSES:
                err = ServerError(req.url, r.status, code, message)
                if attempt > self.retries:
                    err.attempts = attempt
                    raise err
                self._pause(attempt, r.headers.get("retry-after"), err)
                continue
            if r.status == 401:
                raise AuthError(req.url, r.status, code, message)
            raise RefusedError(req.url, r.status, code, message)

    def _pause(self, attempt, retry_after, error):
        delay = backoff_delay(attempt, self.backoff_initial_s, self.backoff_max_s)
        if retry_after:
            try:
                delay = max(delay, min(float(retry_after), self.backoff_max_s))
            except ValueError:
                pass
        if self.on_retry is not None:
            self.on_retry(attempt + 1, self.retries + 1, delay, error)
        self._sleep(delay)


def _parse_answer(body):
    try:
        v = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, AttributeError):
        return {}
    return v if isinstance(v, dict) else {}


@dataclass(frozen=True)
class Delivery:
    """One terminal's outcome in a fan-out: ack on success, error otherwise."""

    url: str
    ack: Ack | None = None
    error: SentinelError | None = None

    @property
    def ok(self) -> bool:
        return self.ack is not None


def send_many(clients: Iterable[AlarmClient], alarm: Alarm, *, max_workers: int = 8) -> list[Delivery]:
    """Send one alarm to several terminals at once; one Delivery per client, in the clients' order."""

    def one(c):
        try:
            return Delivery(c.url, ack=c.send(alarm))
        except SentinelError as e:
            return Delivery(c.url, error=e)

    clients = list(clients)
    if not clients:
        return []
    # One message id for every terminal, so a retried fan-out is idempotent on each of them.
    if alarm.id is None:
        alarm = copy_alarm(alarm, id=uuid.uuid4().hex[:16])
    # imported here: concurrent.futures is 1.1 MB of a process's memory that only a fan-out uses (the gateway's
    # peak RSS is one of its measured targets, bench/bench_gateway_rfc.py)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(max_workers, len(clients))) as pool:
        return list(pool.map(one, clients))


def copy_alarm(alarm: Alarm, **changes) -> Alarm:
    """A copy of alarm with some of its fields changed (by name: text, color, light_mode, audio_mode, repeat_times,
    level, key, id, duration). The copy is built through Alarm's constructor, so its normalisation applies."""
    fields = {
        "text": alarm.text,
        "color": alarm.color,
        "light_mode": alarm.light_mode,
        "audio_mode": alarm.audio_mode,
        "repeat_times": alarm.repeat_times,
        "level": alarm.level,
        "key": alarm.key,
        "id": alarm.id,
        "duration": alarm.duration,
    }
    unknown = set(changes) - set(fields)
    if unknown:
        raise TypeError("copy_alarm() got unknown field(s): %s" % ", ".join(sorted(unknown)))
    fields.update(changes)
    return Alarm(**fields)
