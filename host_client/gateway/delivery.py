"""Per-terminal delivery: a worker thread that drains its lane through host_client.AlarmClient.

P0 first; retry with exponential back-off (host_client.backoff) while the terminal is unreachable (the alarm keeps
its message id, so a retry the terminal already acted on is answered as a duplicate, never sounded twice); an alarm
past its deadline is logged and counted as undeliverable; a 4xx is the request's fault and is not retried; an alarm
that cannot even be built into a request (a failure retrying cannot fix) is dead-lettered: counted, logged, kept in
`dead-<terminal>.jsonl` (persist.PendingStore), and never retried at the head of the queue, so one bad item never
delays another. What goes on the wire is wire.py's; the queue on disk is persist.py's.
"""

from __future__ import annotations

import time

from host_client.backoff import backoff_delay
from host_client.errors import RefusedError, SentinelError
from host_client.logs import error_words
from sentinel_core.alarm import LEVEL_NAMES

from .lane_thread import LaneThread
from .wire import to_alarm


class Worker(LaneThread):
    """Owns one lane's sending. client: an object with send(Alarm) -> Ack and heartbeat(interval) (AlarmClient)."""

    _role = "deliver"

    def __init__(
        self,
        lane,
        client,
        *,
        backoff_initial_s=0.5,
        backoff_max_s=30.0,
        heartbeat_s=None,
        log=None,
        clock=time.time,
        mono=time.monotonic,
        on_delivered=None,
        store=None,
    ):
        self.lane = lane
        self.client = client
        self.store = store  # a PendingStore: dead letters are appended beside its file
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.heartbeat_s = heartbeat_s
        self.log = log or (lambda event, **kw: None)
        self.clock = clock
        self.mono = mono
        self.on_delivered = on_delivered
        self._stop = False
        self._thread = None
        self._failures = 0
        self._next_hb = None
        self.last_error = None
        self.last_dead = None

    def _backoff(self, seconds):
        """Sleep out a back-off; only stop ends it early (new work must not hammer a dead terminal)."""
        end = self.mono() + seconds
        with self.lane.cond:
            while not self._stop:
                left = end - self.mono()
                if left <= 0:
                    return
                self.lane.cond.wait(left)

    def _run(self):
        lane = self.lane
        if self.heartbeat_s:
            self._next_hb = self.mono()
        while True:
            item = None
            do_hb = False
            with lane.cond:
                while True:
                    if self._stop:
                        return
                    m = self.mono()
                    if self._next_hb is not None and m >= self._next_hb:
                        do_hb = True
                        break
                    item = lane.next_item(self.clock())
                    timeout = 1.0
                    if item is not None:
                        # a P0 draws on its own tokens: a P1 storm before it never holds it back
                        rw = lane.rate.wait(m, item.level)
                        if rw <= 0:
                            item.inflight = True
                            lane.rate.take(m, item.level)
                            break
                        item = None
                        timeout = rw
                    if self._next_hb is not None:
                        timeout = min(timeout, self._next_hb - m)
                    lane.cond.wait(max(0.001, timeout))
            try:
                if do_hb:
                    self._heartbeat()
                else:
                    self._send(item)
            except Exception as e:  # noqa: BLE001 - the worker must outlive any one failure
                self.log("worker_error", terminal=lane.name, error="%s: %s" % (type(e).__name__, e))
                with lane.cond:
                    if item is not None and item.inflight:
                        lane.failed(item)
                self._backoff(min(self.backoff_max_s, 1.0))

    def _dead_letter(self, item, err):
        """No retry can send this alarm: out of the queue at once (the next item goes now), counted, logged, kept."""
        lane = self.lane
        reason = "%s: %s" % (type(err).__name__, err)
        with lane.cond:
            lane.dead_lettered(item)
        rec = {
            "ts": round(self.clock(), 3),
            "terminal": lane.name,
            "id": item.id,
            "level": LEVEL_NAMES[item.level],
            "key": item.key,
            "text": item.text[:400],
            "incidents": item.ncarried,
            "reason": reason[:500],
        }
        self.last_dead = {k: rec[k] for k in ("ts", "id", "level", "reason")}
        self.log(
            "alarm_dead_letter",
            terminal=lane.name,
            id=item.id,
            level=LEVEL_NAMES[item.level],
            incidents=item.ncarried,
            reason=reason[:500],
            text=ascii(item.text[:200]),
        )
        if self.store is not None:
            try:
                self.store.dead_letter(rec)
            except Exception as e:  # noqa: BLE001 - the record is in the log already
                self.log("dead_letter_unsaved", terminal=lane.name, id=item.id, error=error_words(e))

    def _send(self, item):
        lane = self.lane
        try:
            alarm = to_alarm(item)
            alarm.to_wire()
            ack = self.client.send(alarm)
        except RefusedError as e:
            with lane.cond:
                lane.refused(item)
                lane.up = True
            self.last_error = "%s %s" % (e.status, e.code)
            self.log(
                "alarm_refused",
                terminal=lane.name,
                id=item.id,
                level=LEVEL_NAMES[item.level],
                status=e.status,
                code=e.code,
                message=e.message,
                incidents=len(item.carried),
            )
            return
        except SentinelError as e:
            with lane.cond:
                lane.failed(item)
                was_up = lane.up
                lane.up = False
                self._failures += 1
                delay = backoff_delay(self._failures, self.backoff_initial_s, self.backoff_max_s)
            self.last_error = type(e).__name__
            if was_up is not False:
                self.log("terminal_unreachable", terminal=lane.name, url=self.client.url, error=str(e))
            self.log(
                "delivery_retry", terminal=lane.name, id=item.id, attempts=item.attempts, retry_in_s=round(delay, 3)
            )
            self._backoff(delay)
            return
        except Exception as e:  # noqa: BLE001 - not the terminal's answer: the alarm itself cannot be sent
            self._dead_letter(item, e)
            return
        with lane.cond:
            lane.delivered(item, self.clock(), duplicate=bool(getattr(ack, "duplicate", False)))
            was_up = lane.up
            lane.up = True
            self._failures = 0
        if self.on_delivered is not None:
            self.on_delivered(lane.name, item, ack)
        if was_up is False:
            self.log("terminal_back", terminal=lane.name, url=self.client.url)
        self.log(
            "alarm_delivered",
            terminal=lane.name,
            id=item.id,
            level=LEVEL_NAMES[item.level],
            kind=item.kind.value,
            incidents=len(item.carried),
            attempts=item.attempts + 1,
            latency_s=round(self.clock() - item.created, 4),
            duplicate=bool(getattr(ack, "duplicate", False)),
        )

    def _heartbeat(self):
        lane = self.lane
        interval = self.heartbeat_s
        assert interval  # _run calls this only when heartbeats are on
        self._next_hb = self.mono() + interval
        try:
            self.client.heartbeat(int(min(3600, max(1, round(interval)))))
        except SentinelError as e:
            with lane.cond:
                lane.stats.heartbeats_failed += 1
                lane.up = False
            self.log("heartbeat_failed", terminal=lane.name, error=str(e))
            return
        with lane.cond:
            lane.stats.heartbeats_ok += 1
            lane.up = True
