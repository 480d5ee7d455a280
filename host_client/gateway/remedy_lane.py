"""The lane to sentinel-remedy: every incident the gateway takes from a probe, as fields (host, GPU, event type,
XID, firing or resolved), posted to the remedy daemon over signed HTTP ([remedy] in gateway.toml; docs/REMEDY.md).

Beside the terminals' lanes, never in front of them: offer() only appends to a bounded queue under its own lock
(the ingest path never waits on the remedy daemon), and one thread of its own sends, oldest first, retrying with
the project's back-off while the daemon is unreachable. A full queue drops the oldest non-P0 entry (counted).
"""

from __future__ import annotations

import collections
import logging
import threading
import uuid

from host_client.backoff import backoff_delay
from host_client.errors import RefusedError, SentinelError
from sentinel_core.alarm import LEVEL_NAMES

from .logs import log_event

MAX_QUEUE = 4096


class RemedyLane:
    def __init__(self, target, *, gateway_url="", backoff_initial_s=0.5, backoff_max_s=30.0, client=None):
        from host_client.remedy.feed import IncidentClient

        self.target = target
        self.gateway_url = gateway_url  # where sentinel-remedy posts what it did (this gateway's ingest)
        self.client = client or IncidentClient(
            target.url, target.key_id, target.secret.reveal(), timeout=target.timeout_s or 5.0, retries=0
        )
        self.backoff_initial = backoff_initial_s
        self.backoff_max = backoff_max_s
        self.cond = threading.Condition()
        self.queue: collections.deque = collections.deque()
        self.sent = 0
        self.failed = 0  # attempts that did not reach the daemon
        self.dropped = 0
        self.refused = 0
        self.last_error = None
        self._stop = False
        self._thread = None

    def offer(self, ev, ident, level):
        """One probe event as the remedy daemon's incident; returns at once."""
        from host_client.remedy.feed import wire

        body = wire(
            msg_id=uuid.uuid4().hex[:16],
            incident=ident,
            firing=ev.recovers is None,
            level=LEVEL_NAMES[level],
            rack=ev.rack,
            host=ev.host,
            event_type=ev.fault_type,
            gpu=ev.gpu_index,
            xid=ev.xid,
            gateway=self.gateway_url,
        )
        with self.cond:
            if len(self.queue) >= MAX_QUEUE:
                drop = next((i for i, b in enumerate(self.queue) if b["level"] != "P0"), 0)
                del self.queue[drop]
                self.dropped += 1
            self.queue.append(body)
            self.cond.notify()

    def start(self):
        self._thread = threading.Thread(target=self._run, name="deliver-remedy", daemon=True)
        self._thread.start()

    def stop(self, timeout=5.0):
        with self.cond:
            self._stop = True
            self.cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def alive(self):
        return self._thread is None or self._thread.is_alive() or self._stop

    def pending(self):
        with self.cond:
            return len(self.queue)

    def _run(self):
        attempt = 0
        while True:
            with self.cond:
                while not self.queue and not self._stop:
                    self.cond.wait()
                if self._stop:
                    return
                body = self.queue[0]
            try:
                self.client.incident(body)
                ok = True
            except RefusedError as e:  # a 4xx: this body's fault, retrying cannot fix it
                ok = True
                self.refused += 1
                log_event("remedy_refused", logging.ERROR, incident=body["incident"], error=str(e))
            except SentinelError as e:
                ok = False
                self.failed += 1
                self.last_error = str(e)
            if ok:
                with self.cond:
                    if self.queue and self.queue[0] is body:
                        self.queue.popleft()
                self.sent += 1
                attempt = 0
                continue
            attempt += 1
            log_event("remedy_unreachable", logging.WARNING, error=self.last_error, attempt=attempt)
            with self.cond:
                if not self._stop:
                    self.cond.wait(backoff_delay(attempt, self.backoff_initial, self.backoff_max))

    def metrics_lines(self):
        with self.cond:
            q = len(self.queue)
        return [
            "# HELP sentinel_gateway_remedy_incidents_total Incidents sent to sentinel-remedy, by result.",
            "# TYPE sentinel_gateway_remedy_incidents_total counter",
            'sentinel_gateway_remedy_incidents_total{result="sent"} %d' % self.sent,
            'sentinel_gateway_remedy_incidents_total{result="refused"} %d' % self.refused,
            'sentinel_gateway_remedy_incidents_total{result="dropped"} %d' % self.dropped,
            "# HELP sentinel_gateway_remedy_queue Incidents waiting for sentinel-remedy.",
            "# TYPE sentinel_gateway_remedy_queue gauge",
            "sentinel_gateway_remedy_queue %d" % q,
        ]


def gateway_url(host, port):
    """This gateway's ingest URL as a local daemon reaches it ("" while the port is the kernel's pick)."""
    if not port:
        return ""
    h = "127.0.0.1" if host in ("", "0.0.0.0") else "[::1]" if host == "::" else host
    return "http://%s:%d" % ("[%s]" % h if ":" in h and not h.startswith("[") else h, port)
