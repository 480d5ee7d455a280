"""Per-terminal delivery: a worker thread that drains its lane through host_client.AlarmClient.

P0 first; retry with exponential back-off while the terminal is unreachable (the alarm keeps its message id, so a
retry the terminal already acted on is answered as a duplicate, never sounded twice); an alarm past its deadline
is logged and counted as undeliverable; a 4xx is the request's fault and is not retried; an alarm that cannot even
be built into a request (a failure retrying cannot fix) is dead-lettered: counted, logged, kept in
`dead-<terminal>.jsonl`, and never retried at the head of the queue, so one bad item never delays another.
The pending queue is saved atomically to a JSON file by a Persister thread after every change, and the ingest path
waits for that write before it answers the sender, so a restart loses no alarm that was acknowledged to its source.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time

from host_client.backoff import backoff_delay
from host_client.errors import RefusedError, SentinelError
from host_client.transport import HTTPTransport, Response
from sentinel_core.alarm import LEVEL_NAMES, preset
from sentinel_core.validate import KEY_MAX_BYTES, TEXT_MAX_BYTES

_PRESET = ("normal", "p1", "p0")


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def wire_key(key):
    """Incident keys are rack:host:type and may exceed the wire's 64 bytes: keep a readable head, add a hash."""
    if key is None:
        return None
    key = _CONTROL.sub("?", key) or "?"
    b = key.encode("utf-8")
    if len(b) <= KEY_MAX_BYTES:
        return key
    h = hashlib.sha256(b).hexdigest()[:12]
    head = b[: KEY_MAX_BYTES - 13].decode("utf-8", "ignore")
    return head + "~" + h


def wire_text(text):
    """What the terminal's schema accepts: no control characters, not blank, at most 400 bytes of UTF-8."""
    text = _CONTROL.sub(" ", text)
    if not text.strip():
        text = "alarm"
    b = text.encode("utf-8")
    if len(b) <= TEXT_MAX_BYTES:
        return text
    return b[: TEXT_MAX_BYTES - 3].decode("utf-8", "ignore") + "..."


def to_alarm(item):
    return preset(_PRESET[item.level], wire_text(item.text), key=wire_key(item.key), id=item.id)


class RfcCompatTransport:
    """For a terminal configured `compat = "rfc"`: the RFC's gateway counts any 200 as delivered and a minimal
    RFC-compatible terminal answers a bare 2xx with no JSON body. Such an answer is passed on as our `{"ok": true}`;
    a JSON answer of ours, when the terminal sends one, is used as it is (its duplicate flag, its error code)."""

    _OK = b'{"ok":true,"duplicate":false}'

    def __init__(self, inner=None):
        self.inner = inner or HTTPTransport()

    def post(self, url, headers, body, timeout):
        r = self.inner.post(url, headers, body, timeout)
        if 200 <= r.status < 300:
            try:
                answer = json.loads(r.body.decode("utf-8"))
            except (ValueError, UnicodeDecodeError, AttributeError):
                answer = None
            if not (isinstance(answer, dict) and "ok" in answer):
                return Response(200, r.headers, self._OK)
            if r.status != 200:
                return Response(200, r.headers, r.body)
        return r


class PendingStore:
    """One JSON file per terminal, replaced atomically (write, fsync, rename)."""

    def __init__(self, path):
        self.path = path
        self._lock = threading.Lock()

    def load(self):
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            # Keep the unreadable file for a human; start empty rather than not at all.
            bad = self.path + ".corrupt"
            try:
                os.replace(self.path, bad)
            except OSError:
                pass
            raise ValueError("pending queue %s unreadable (%s); moved to %s" % (self.path, e, bad)) from None
        if not isinstance(data, dict) or not isinstance(data.get("items"), list):
            raise ValueError("pending queue %s has no items list" % self.path)
        return data

    def save(self, data, *, fsync=True):
        """fsync=False still survives a crash of this process (the rename is atomic, the page cache keeps the
        data); fsync=True also survives the machine's."""
        try:
            raw = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError:
            # text no UTF-8 can hold (a lone surrogate that got past ingest): escaped, so the queue is still saved
            raw = json.dumps(data, ensure_ascii=True, separators=(",", ":")).encode("ascii")
        with self._lock:
            tmp = "%s.tmp.%d" % (self.path, os.getpid())
            with open(tmp, "wb") as f:
                f.write(raw)
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, self.path)

    def dead_letter(self, record):
        """Append one dead-lettered alarm to dead-<terminal>.jsonl beside the queue (for a human to look at)."""
        path = os.path.join(os.path.dirname(self.path), os.path.basename(self.path).replace("pending-", "dead-", 1))
        if path == self.path:
            path = self.path + ".dead"
        if not path.endswith(".jsonl"):
            path = path.rsplit(".", 1)[0] + ".jsonl"
        with self._lock, open(path, "a", encoding="ascii") as f:
            f.write(json.dumps(record, ensure_ascii=True, default=str) + "\n")


class _LaneThread:
    """A lane's own thread (the persister's, the delivery worker's): started, watched, stopped alike."""

    _role = "lane"

    def start(self):
        self._thread = threading.Thread(target=self._run, name="%s-%s" % (self._role, self.lane.name), daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is None or self._thread.is_alive() or self._stop

    def stop(self, timeout=5.0):
        with self.lane.cond:
            self._stop = True
            self.lane.cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)


class Persister(_LaneThread):
    """Saves a lane's queue whenever it changes, in its own thread (group commit: one write covers every change
    made while the previous one was written). A new alarm is written (and fsynced) at once and the ingest path
    waits for that write before it answers, so an event that created an alarm is on disk when it gets its 200. An
    incident folded into a summary that is already on disk is written within coalesce_s, without a wait."""

    _role = "persist"

    def __init__(self, lane, store, log=None, coalesce_s=0.05):
        self.lane = lane
        self.store = store
        self.coalesce_s = coalesce_s
        self.log = log or (lambda event, **kw: None)
        self.saved = lane.gen
        self.synced = -1
        self._stop = False
        self._thread = None
        self.writes = 0
        self.failed = 0
        self.broken = False  # the last save failed: the gateway answers 503 until one succeeds
        self.last_error = None
        self._waiters = []  # (gen, callback(ok)) of answers waiting for their alarm to be on disk

    def add_waiter(self, gen, callback) -> None:
        """callback(True) once the queue as of gen is on disk, callback(False) if a save fails first. Called from
        the persister's thread (or at once): the epoll front hands it to its loop."""
        with self.lane.cond:
            if self.saved >= gen:
                ok = True
            elif self.broken or self._stop:
                ok = False
            else:
                self._waiters.append((gen, callback))
                return
        callback(ok)

    def _wake_waiters(self, *, ok):
        """Under lane.cond."""
        if not self._waiters:
            return
        if ok:
            done = [w for w in self._waiters if w[0] <= self.saved]
            self._waiters = [w for w in self._waiters if w[0] > self.saved]
        else:
            done, self._waiters = self._waiters, []
        for _gen, cb in done:
            cb(ok)

    def stop(self, timeout=5.0):
        super().stop(timeout)
        self.save()

    def save(self):
        # Any failure (disk full, permissions, a bug) is logged, counted and shown in /healthz; never raised, so
        # the thread cannot die of it.
        try:
            snap = self.lane.snapshot()
            # A new alarm is fsynced (it must survive even a power cut); a summary that only grew is written
            # without, so a storm of folds costs a page-cache write each, not a disk flush each.
            fsync = snap["sync_gen"] > self.synced
            self.store.save(snap, fsync=fsync)
            if fsync:
                self.synced = snap["sync_gen"]
        except Exception as e:  # noqa: BLE001 - the persister must outlive any one failure
            self.failed += 1
            err = "%s: %s" % (type(e).__name__, e)
            if not self.broken or err != self.last_error:
                self.log("persist_failed", terminal=self.lane.name, path=self.store.path, error=err)
            with self.lane.cond:
                self.broken = True
                self.last_error = err
                self._wake_waiters(ok=False)
                self.lane.cond.notify_all()
            return False
        with self.lane.cond:
            if self.broken:
                self.log("persist_recovered", terminal=self.lane.name, path=self.store.path, failures=self.failed)
            self.broken = False
            self.writes += 1
            if snap["gen"] > self.saved:
                self.saved = snap["gen"]
            self._wake_waiters(ok=True)
            self.lane.cond.notify_all()
        return True

    def wait(self, gen, timeout=2.0):
        """Block until the queue as of `gen` is on disk (or timeout). True when it is."""
        end = time.monotonic() + timeout
        with self.lane.cond:
            while self.saved < gen and not self._stop and not self.broken:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.lane.cond.wait(left)
            return self.saved >= gen

    def _run(self):
        while True:
            try:
                if self._once():
                    return
            except Exception as e:  # noqa: BLE001 - never die; a failing save is retried
                self.failed += 1
                self.broken = True
                self.last_error = "%s: %s" % (type(e).__name__, e)
                self.log("persist_failed", terminal=self.lane.name, path=self.store.path, error=self.last_error)
                time.sleep(0.5)

    def _once(self):
        """One round: wait for a change, save it. True when stopped."""
        lane = self.lane
        with lane.cond:
            while lane.gen <= self.saved and not self._stop:
                lane.wake_on_change = True
                lane.cond.wait(1.0)
            if self._stop:
                return True
            # Only summaries grew since the last write: let more folds join this write (a storm folds
            # thousands a second), unless a new alarm arrives, which is written at once.
            end = time.monotonic() + self.coalesce_s
            while lane.sync_gen <= self.synced and not self._stop:
                left = end - time.monotonic()
                if left <= 0:
                    break
                lane.cond.wait(left)
        if not self.save():
            time.sleep(0.5)
        return False


class Worker(_LaneThread):
    """Owns one lane's sending. client: an object with send(Alarm) -> Ack and heartbeat(interval) (AlarmClient)."""

    _role = "deliver"

    def __init__(
        self,
        lane,
        client,
        *,
        backoff_initial=0.5,
        backoff_max=30.0,
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
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
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
                        rw = lane.rate.wait(m)
                        if rw <= 0:
                            item.inflight = True
                            lane.rate.take(m)
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
                self._backoff(min(self.backoff_max, 1.0))

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
                self.log("dead_letter_unsaved", terminal=lane.name, id=item.id, error=str(e))

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
                delay = backoff_delay(self._failures, self.backoff_initial, self.backoff_max)
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
        self._next_hb = self.mono() + self.heartbeat_s
        try:
            self.client.heartbeat(int(min(3600, max(1, round(self.heartbeat_s)))))
        except SentinelError as e:
            with lane.cond:
                lane.stats.heartbeats_failed += 1
                lane.up = False
            self.log("heartbeat_failed", terminal=lane.name, error=str(e))
            return
        with lane.cond:
            lane.stats.heartbeats_ok += 1
            lane.up = True
