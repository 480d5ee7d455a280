"""Deliver events to the gateway in order, riding out an unreachable gateway.

One worker thread POSTs the head of the queue: when it wakes, everything queued at that moment (up to ``batch_max``
events and ``batch_bytes``) goes as one request, a JSON array the gateway answers per event; a lone event goes at
once as a plain object, so batching adds no wait before the first alarm. In a storm a node's simultaneous findings
(its 8 GPUs in one sampling round) travel together, which is what lets the gateway ingest a 1,000-node storm in
well under 2 s. On a connection error, a timeout or a 5xx/429 it waits (exponential back-off with jitter,
``backoff_initial_s`` .. ``backoff_max_s``) and tries the same head again, so events arrive in the order they happened.
A 4xx other than 429 means the gateway will never take that body:
retrying cannot help, but the probe only sends events it believes valid, so a refusal is a bug or a version skew
that loses an alarm: it is logged at ERROR with the gateway's reason and counted per type (``rejected_by_type``,
``sentinel_probe_sender_rejected_total``), never dropped silently.
The queue is bounded: when full, the oldest non-critical event goes first (the
critical ones, NCCL_TIMEOUT / XID_FATAL / PROGRESS_STALL, only when nothing else is left to drop).
"""

import json
import logging
import threading
import time
from collections import deque

from host_client.backoff import backoff_delay
from host_client.errors import TransportError
from host_client.logs import error_words, log_event
from host_client.transport import HTTPTransport, Transport

from . import events

log = logging.getLogger("sentinel.probe")


def _http_post(transport: Transport, url, data, timeout, token=None):
    """Returns (status, body bytes): the body carries the gateway's reason for a refusal. token: the gateway's
    ingest bearer token (its [ingest] section), sent as Authorization: Bearer. Through the client's transport (the one
    place host_client touches the network): TransportError when no answer arrives."""
    headers = {"Content-Type": "application/json", "User-Agent": "sentinel-probe/1"}
    if token:
        headers["Authorization"] = "Bearer " + token
    r = transport.post(url, headers, data, timeout)
    return r.status, r.body


def _reason(body):
    """The gateway's error code and message from a refusal's JSON body, for the log line."""
    try:
        d = json.loads(body.decode("utf-8"))
        return "%s: %s" % (d.get("error"), d.get("message"))
    except Exception:  # noqa: BLE001 - a body that is not our JSON is shown as it came
        return (body or b"")[:200].decode("utf-8", "replace") or "no reason given"


class Sender:
    def __init__(
        self,
        url,
        *,
        capacity=1000,
        timeout_s=2.0,
        backoff_initial_s=0.2,
        backoff_max_s=30.0,
        post=None,
        batch_max=100,
        batch_bytes=60000,
        token=None,
        transport: Transport | None = None,
    ):
        if not url.startswith(("http://", "https://")):
            raise ValueError("gateway URL must start with http:// or https://")
        if int(capacity) < 1:
            raise ValueError("sender queue capacity must be >= 1")
        if int(batch_max) < 1 or int(batch_max) > 1000:
            raise ValueError("sender batch_max must be 1..1000 (the gateway takes arrays of up to 1,000)")
        self.url = url
        self.capacity = int(capacity)
        self.timeout_s = float(timeout_s)
        self.backoff_initial_s = float(backoff_initial_s)
        self.backoff_max_s = float(backoff_max_s)
        self.batch_max = int(batch_max)
        self.batch_bytes = int(batch_bytes)
        if post is None:
            through = transport or HTTPTransport()

            def http_post(url, data, timeout, _token=token):
                return _http_post(through, url, data, timeout, _token)

            post = http_post
        self._post = post
        self._q = deque()  # (queued_at, event, encoded body or None)
        self._cv = threading.Condition()
        self._stop = False
        self._thread = None
        self._solo = 0  # events to send one per request after the gateway refused them as a whole array
        self.sent = 0
        self.requests = 0
        self.batches = 0  # requests that carried more than one event
        self.dropped = 0
        self.rejected = 0
        self.rejected_by_type = {}
        self.failures = 0
        self.last_error = None
        self.last_latency_s = None
        self.delivered_hook = None  # tests and the bench observe deliveries through this

    def start(self):
        self._thread = threading.Thread(target=self._run, name="sender", daemon=True)
        self._thread.start()
        return self

    def submit(self, event):
        with self._cv:
            if len(self._q) >= self.capacity:
                self._drop_one()
            self._q.append([time.monotonic(), event, None])
            self._cv.notify()

    def _drop_one(self):
        for i, (_, ev, _b) in enumerate(self._q):
            if ev.get("event_type") not in events.CRITICAL_TYPES:
                del self._q[i]
                break
        else:
            ev = self._q.popleft()[1]
        self.dropped += 1
        log_event(
            log,
            "event_dropped",
            logging.WARNING,
            reason="the send queue is full (%d events)" % self.capacity,
            type=ev.get("event_type"),
            key=ev.get("key"),
        )

    def _refused(self, ev, status, reason):
        t = str(ev.get("event_type"))
        self.rejected += 1
        self.rejected_by_type[t] = self.rejected_by_type.get(t, 0) + 1
        log_event(
            log,
            "event_refused",
            logging.ERROR,
            type=t,
            key=ev.get("key"),
            status=status,
            reason=reason,
            effect="this alarm is lost: the probe and the gateway disagree on the event format",
        )

    def pending(self):
        with self._cv:
            return len(self._q)

    def _take(self):
        """The head of the queue as one request: everything queued right now, in order, up to batch_max events and
        batch_bytes of body. Nothing waits for company: a lone event goes out alone, at once, as an object (what an
        RFC-era gateway takes too); several go as a JSON array. Called with the lock held."""
        limit = 1 if self._solo else self.batch_max
        batch = []
        size = 2
        for entry in self._q:
            if entry[2] is None:
                entry[2] = json.dumps(entry[1], separators=(",", ":"), ensure_ascii=False).encode("utf-8")
            size += len(entry[2]) + 1
            if batch and size > self.batch_bytes:
                break
            batch.append(entry)
            if len(batch) >= limit:
                break
        return batch

    def _run(self):
        failures = 0  # in a row, since the gateway last answered for good
        while True:
            with self._cv:
                while not self._q and not self._stop:
                    self._cv.wait()
                if self._stop and not self._q:
                    return
                batch = self._take()
            if len(batch) == 1:
                data = batch[0][2]
            else:
                data = b"[" + b",".join(e[2] for e in batch) + b"]"
            body = b""
            try:
                status = self._post(self.url, data, self.timeout_s)
                if isinstance(status, tuple):
                    status, body = status
                err = None if 200 <= status < 300 else "HTTP %d" % status
                if status in (401, 403):
                    # the gateway refuses our ingest token ([sender] token_env/token_file vs its [ingest]): a
                    # configuration to fix, not an event to drop; kept queued and retried like an outage
                    err = "HTTP %d (%s)" % (status, _reason(body))
            except TransportError as e:  # refused, timed out, reset: the gateway is unreachable
                status, err = None, e.reason
            except Exception as e:  # noqa: BLE001 - a test's post, or anything else: retried like an outage
                status, err = None, error_words(e)
            self.requests += 1
            if err is None or (status is not None and 400 <= status < 500 and status not in (401, 403, 429)):
                if err is not None and len(batch) > 1:
                    # The gateway refused the array as a whole (too large for it, or it takes single events
                    # only): say so once, then send these one per request so each is judged on its own.
                    log_event(
                        log,
                        "batch_refused",
                        logging.WARNING,
                        events=len(batch),
                        status=status,
                        reason=_reason(body),
                        effect="sending them one by one",
                    )
                    self._solo = len(batch)
                    continue
                self._done(batch, status, err, body)
                failures = 0
                continue
            self.failures += 1
            failures += 1
            if self.last_error != err:
                log_event(log, "gateway_unreachable", logging.WARNING, url=self.url, error=err, queued=self.pending())
            self.last_error = err
            with self._cv:
                if self._stop:
                    return
                self._cv.wait(backoff_delay(failures, self.backoff_initial_s, self.backoff_max_s))

    def _done(self, batch, status, err, body):
        """The gateway answered this request for good (2xx, or a 4xx that retrying cannot change)."""
        with self._cv:
            for entry in batch:
                # the entry may have been dropped meanwhile by a full queue; it is the head otherwise
                if self._q and self._q[0] is entry:
                    self._q.popleft()
                else:
                    try:
                        self._q.remove(entry)
                    except ValueError:
                        pass
            if self._solo:
                self._solo -= 1
        if len(batch) > 1:
            self.batches += 1
        results = None
        if err is None and len(batch) > 1:
            try:
                results = json.loads(body.decode("utf-8")).get("results")
            except Exception:  # noqa: BLE001 - an answer that is not our JSON counts as no per-event results
                results = None
            if not isinstance(results, list) or len(results) != len(batch):
                results = None  # no per-event answer to read: the 2xx covers them all
        now = time.monotonic()
        for i, (queued_at, ev, _b) in enumerate(batch):
            if err is not None:
                self._refused(ev, status, _reason(body))
                continue
            r = results[i] if results is not None else None
            if isinstance(r, dict) and r.get("ok") is False:
                self._refused(ev, status, "%s: %s" % (r.get("error"), r.get("message")))
                continue
            self.sent += 1
            self.last_latency_s = now - queued_at
            if self.delivered_hook is not None:
                self.delivered_hook(ev)

    def flush(self, timeout_s):
        """Wait until the queue is empty (or the timeout passes). True when everything went out."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.pending() == 0:
                return True
            time.sleep(0.01)
        return self.pending() == 0

    def close(self):
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 1)
