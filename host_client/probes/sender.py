"""Deliver events to the gateway in order, riding out an unreachable gateway.

One worker thread POSTs the oldest queued event; on a connection error, a timeout or a 5xx/429 it waits
(exponential back-off with jitter, ``backoff_min_s`` .. ``backoff_max_s``) and tries the same event again, so
events arrive in the order they happened. A 4xx other than 429 means the gateway will never take that body:
retrying cannot help, but the probe only sends events it believes valid, so a refusal is a bug or a version skew
that loses an alarm: it is logged at ERROR with the gateway's reason and counted per type (``rejected_by_type``,
``sentinel_probe_sender_rejected_total``), never dropped silently.
The queue is bounded: when full, the oldest non-critical event goes first (the
critical ones, NCCL_TIMEOUT / XID_FATAL / PROGRESS_STALL, only when nothing else is left to drop).
"""

import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from collections import deque

from . import events

log = logging.getLogger("sentinel.probe")


def _http_post(url, data, timeout):
    """Returns (status, body bytes): the body carries the gateway's reason for a refusal."""
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json",
                                                                        "User-Agent": "sentinel-probe/1"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read(65536)
    except urllib.error.HTTPError as e:
        try:
            body = e.read(4096)
        except Exception:
            body = b""
        return e.code, body


def _reason(body):
    """The gateway's error code and message from a refusal's JSON body, for the log line."""
    try:
        d = json.loads(body.decode("utf-8"))
        return "%s: %s" % (d.get("error"), d.get("message"))
    except Exception:
        return (body or b"")[:200].decode("utf-8", "replace") or "no reason given"


class Sender:
    def __init__(self, url, capacity=1000, timeout_s=2.0, backoff_min_s=0.2, backoff_max_s=30.0, post=None):
        if not url.startswith(("http://", "https://")):
            raise ValueError("gateway URL must start with http:// or https://")
        if int(capacity) < 1:
            raise ValueError("sender queue capacity must be >= 1")
        self.url = url
        self.capacity = int(capacity)
        self.timeout_s = float(timeout_s)
        self.backoff_min_s = float(backoff_min_s)
        self.backoff_max_s = float(backoff_max_s)
        self._post = post or _http_post
        self._q = deque()
        self._cv = threading.Condition()
        self._stop = False
        self._thread = None
        self.sent = 0
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
            self._q.append((time.monotonic(), event))
            self._cv.notify()

    def _drop_one(self):
        for i, (_, ev) in enumerate(self._q):
            if ev.get("event_type") not in events.CRITICAL_TYPES:
                del self._q[i]
                break
        else:
            ev = self._q.popleft()[1]
        self.dropped += 1
        log.warning("event queue full (%d): dropped %s %s", self.capacity, ev.get("event_type"), ev.get("key"))

    def _refused(self, ev, status, reason):
        t = str(ev.get("event_type"))
        self.rejected += 1
        self.rejected_by_type[t] = self.rejected_by_type.get(t, 0) + 1
        log.error("gateway REFUSED %s %s (HTTP %s, %s): this alarm is lost; the probe and gateway disagree on the "
                  "event format", t, ev.get("key"), status, reason)

    def pending(self):
        with self._cv:
            return len(self._q)

    def _run(self):
        delay = self.backoff_min_s
        while True:
            with self._cv:
                while not self._q and not self._stop:
                    self._cv.wait()
                if self._stop and not self._q:
                    return
                queued_at, ev = self._q[0]
            data = json.dumps(ev, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
            body = b""
            try:
                status = self._post(self.url, data, self.timeout_s)
                if isinstance(status, tuple):
                    status, body = status
                err = None if 200 <= status < 300 else "HTTP %d" % status
            except Exception as e:  # URLError, timeout, connection reset: the gateway is unreachable
                status, err = None, "%s: %s" % (type(e).__name__, e)
            if err is None or (status is not None and 400 <= status < 500 and status != 429):
                with self._cv:
                    if self._q and self._q[0][1] is ev:
                        self._q.popleft()
                if err is None:
                    self.sent += 1
                    self.last_latency_s = time.monotonic() - queued_at
                    if self.delivered_hook is not None:
                        self.delivered_hook(ev)
                else:
                    self._refused(ev, status, _reason(body))
                delay = self.backoff_min_s
                continue
            self.failures += 1
            if self.last_error != err:
                log.warning("gateway unreachable (%s); %d event(s) queued, retrying", err, self.pending())
            self.last_error = err
            with self._cv:
                if self._stop:
                    return
                self._cv.wait(delay * (0.5 + random.random() / 2))
            delay = min(delay * 2, self.backoff_max_s)

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
