"""One terminal's lane: the incidents routed to one terminal, turned into the alarms it is sent.

The lane ties together, under one lock (`lane.cond`):
- grouping.py: which incidents fold into one summary (Grouping, Group, the summary wording);
- delivery_queue.py: the bounded priority queue of alarms waiting for the terminal (AlarmQueue, Item, ItemKind);
- recovery.py: which alarm stands for each open incident, so a recovery clears the right one (RecoveryTracker);
- ratelimit.py: the terminal's token buckets, P0 apart from the rest (TerminalRate);
- stats.py: the counters /metrics publishes (LaneStats).

Pure state: no threads, no I/O, every time passed in (`now`: wall-clock seconds, persisted; `mono`: monotonic
seconds, for the rate limit). The delivery worker (delivery.py) drives it. Each incident is carried by exactly one
queued alarm; that alarm's key is what the terminal knows, so a recovery clears the alarm once every incident it
carried has recovered.
"""

from __future__ import annotations

import hashlib
import threading
from enum import Enum

from sentinel_core.alarm import LEVEL_NAMES, NORMAL

from .delivery_queue import DEFAULT_DEADLINES, AlarmQueue, Item, ItemKind, alarm_id
from .grouping import Grouping, Placement, summary_text, texts
from .ratelimit import RateLimit, TerminalRate
from .recovery import RecoveryTracker
from .stats import LATENCY_BUCKETS, LaneStats

__all__ = [
    "DEFAULT_DEADLINES",
    "LATENCY_BUCKETS",
    "Item",
    "ItemKind",
    "Lane",
    "Outcome",
    "RateLimit",
    "TerminalRate",
    "alarm_id",
]


class Outcome(str, Enum):
    """What Lane.submit did with an incident (also the per-terminal value in an ingest answer)."""

    ALONE = "alone"  # queued as its own alarm
    FOLDED = "folded"  # folded into a summary
    ATTACHED = "attached"  # a debounced GPU, added to the alarm standing for its node
    RECOVERY = "recovery"  # a recovery alarm was queued
    RECOVERY_PENDING = "recovery_pending"  # recovered, but its alarm still stands for other incidents
    DROPPED = "dropped"  # the queue was full of alarms at least as urgent


# Enum members as module names, for the ingest path: a global is far cheaper to read than a member off its enum
# class (docs/PERFORMANCE.md), and each incident names one to three.
_ALONE, _FOLDED, _ATTACHED = Outcome.ALONE, Outcome.FOLDED, Outcome.ATTACHED
_RECOVERY, _RECOVERY_PENDING, _DROPPED = Outcome.RECOVERY, Outcome.RECOVERY_PENDING, Outcome.DROPPED
_PLACE_ALONE, _PLACE_CLUSTER = Placement.ALONE, Placement.CLUSTER
_KIND_ALONE, _KIND_SUMMARY, _KIND_RECOVERY = ItemKind.ALONE, ItemKind.SUMMARY, ItemKind.RECOVERY


class Lane:
    def __init__(
        self,
        name: str,
        *,
        language: str = "zh",
        group_by=("event_type", "rack"),
        window: float = 60.0,
        cluster_threshold: int = 3,
        grouping: bool = True,
        queue_size: int = 256,
        deadlines=None,
        rate_burst: int = 3,
        rate_interval: float = 5.0,
        max_tracked: int = 100_000,
        track_s: float = 6 * 3600.0,
        id_window: float = 120.0,
        log=None,
    ):
        self.name = name
        self.language = language
        self.grouping_on = grouping
        self.grouping = Grouping(group_by=group_by, window=window, cluster_threshold=cluster_threshold)
        self.queue = AlarmQueue(queue_size, deadlines)
        self.tracker = RecoveryTracker(max_tracked=max_tracked, track_s=track_s)
        self.rate = TerminalRate(rate_burst, rate_interval)
        self.stats = LaneStats()
        self.id_window = max(1.0, float(id_window))  # an incident without an ident: its key and this window
        self.log = log or (lambda event, **kw: None)
        # cond's lock, taken directly by the ingest path: `with cond` enters it through two Python calls
        # (Condition.__enter__/__exit__)
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.seq = 0
        self.gen = 0  # bumped on every change the persisted queue must see
        self.wake_on_change = False  # set by an idle persister: wake me on the next change
        self.sync_gen = 0  # bumped when an alarm is added: that write is fsynced
        self.up: bool | None = None  # None: never tried

    # views used by the service, the tests and the bench
    @property
    def items(self) -> list:
        return self.queue.items

    @property
    def groups(self) -> dict:
        return self.grouping.groups

    @property
    def carrier_of(self):
        return self.tracker.carrier_of

    @property
    def open(self) -> dict:
        return self.tracker.open

    def depth(self) -> int:
        return len(self.queue)

    def tidy(self, now: float) -> int:
        """Forget what has outlived its use though no incident came to prune it: groups closed for
        grouping.window_s, incidents tracked for track_s. Returns how many tracked incidents went."""
        lock = self.lock
        lock.acquire()
        try:
            self.grouping.prune(now)
            before = len(self.tracker)
            self.tracker.prune(now)
            return before - len(self.tracker)
        finally:
            lock.release()

    # ---- ingest -------------------------------------------------------------------------------------------

    def submit(self, inc, now: float) -> Outcome:
        """Take one incident; returns what happened to it."""
        # acquire/release rather than `with`: cheaper on the ingest path, and the same on every path out
        lock = self.lock
        lock.acquire()
        try:
            if inc.attach:
                carrier = self.tracker.standing_for(inc.scope)
                if carrier is not None:
                    self.tracker.track(inc.key, carrier, now, count=False)
                    self.stats.incidents.attached += 1
                    return _ATTACHED
                # this terminal no longer shows the fault it was debounced against (delivered and recovered,
                # expired, dropped, forgotten): then it is news here, and goes out like any incident
                self.log("debounced_gpu_sent", terminal=self.name, key=inc.key, scope=inc.scope)
            if inc.recovery:
                self.tracker.prune(now)
                carrier, cleared, size = self.tracker.recovered(inc.key)
                if carrier is not None:
                    if not cleared:
                        return _RECOVERY_PENDING
                    return self._recover(inc, carrier, size, now)
            if not self.grouping_on:
                return self._alone(inc, now)
            placement, g, absorbed = self.grouping.place(inc, now)
            if placement is _PLACE_ALONE:
                return self._alone(inc, now)
            if placement is _PLACE_CLUSTER:
                return self._go_cluster(g, absorbed, inc, now)
            return self._fold(g, inc, now)
        finally:
            lock.release()

    def _ident(self, inc, now) -> str:
        return inc.ident or "%s@%d" % (inc.key, now // self.id_window)

    def _new_item(self, *, id, level, text, key, carried, now, kind) -> Item:
        self.seq += 1
        return Item(
            id=id,
            seq=self.seq,
            level=level,
            text=text,
            key=key,
            carried=carried,
            created=now,
            deadline=self.queue.deadline(level, now),
            kind=kind,
        )

    def _alone(self, inc, now) -> Outcome:
        status = "resolved" if inc.recovery else "firing"
        it = self._new_item(
            id=alarm_id(self._ident(inc, now), status),
            level=inc.level,
            text=inc.text_for(self.language),
            key=inc.key,
            carried=[inc.key],
            now=now,
            kind=_KIND_RECOVERY if inc.recovery else _KIND_ALONE,
        )
        if not self._enqueue(it):
            return _DROPPED
        if not inc.recovery:
            self.tracker.track(inc.key, inc.key, now)
            self.tracker.head(inc)
        self.stats.incidents.alone += 1
        return _ALONE

    def _fold(self, g, inc, now) -> Outcome:
        g.count(inc)
        g.last = now
        it = g.pending
        if it is not None and (it.inflight or not it.queued):
            it = None
        if it is None:
            # named after its first incident, so gateways that saw the same incidents name it alike
            first = hashlib.sha256(self._ident(inc, now).encode("utf-8", "surrogatepass")).hexdigest()[:6]
            key = g.summary_key(first)
            it = self._new_item(
                id=alarm_id(key, "1"), level=g.level, text="", key=key, carried=[], now=now, kind=_KIND_SUMMARY
            )
            it.group = g
            g.pending = it
            it.text = summary_text(g, self.language)
            it.carried.append(inc.key)
            if not self._enqueue(it):
                g.pending = None
                return _DROPPED
        else:
            it.carried.append(inc.key)
            upgraded = g.level > it.level
            if upgraded:
                it.level = g.level
                it.deadline = self.queue.deadline(it.level, it.created)
            it.grew(self.language)  # new content, new words and message id (retries keep theirs)
            self.stats.alarms.replaced += 1
            self._touch(quiet=not upgraded)
        if not inc.recovery:
            self.tracker.track(inc.key, it.key, now)
            self.tracker.head(inc)
        self.stats.incidents.folded += 1
        return _FOLDED

    def _go_cluster(self, cg, same, inc, now) -> Outcome:
        """The kind spans enough racks: one cluster-wide summary, absorbing the racks' unsent summaries."""
        absorbed = [g.pending for g in same if g.pending is not None and g.pending.queued and not g.pending.inflight]
        result = self._fold(cg, inc, now)
        it = cg.pending
        if it is not None and absorbed:
            for old in absorbed:
                self.queue.remove(old)
                it.carried[0:0] = old.carried
                listed = set(old.carried)
                # everything the old summary stood for, GPUs attached to its nodes included
                for k in list(self.tracker.open.get(old.key, ())):
                    if k in self.tracker.carrier_of:
                        self.tracker.track(k, it.key, now, count=k in listed)
                self.stats.alarms.replaced += 1
                if old.level > it.level:
                    it.level = old.level
                if old.seq < it.seq:
                    it.seq = old.seq  # keep the earliest queue position: order of incidents holds
            it.grew(self.language)
            self._touch()
        return result

    def _recover(self, inc, carrier: str, size: int, now) -> Outcome:
        t = texts(self.language)
        if not self.tracker.open:
            text = t["all_clear"]
        elif carrier == inc.key or ":*:" not in carrier:
            # an alarm for one node (perhaps first raised by another of its GPUs): that node's recovery words
            text = inc.text_for(self.language)
        else:
            text = t["summary_recovered"] % size
        ident = self._ident(inc, now)
        # a single incident's recovery has the id any gateway gives it, tracked or not (then it goes out alone)
        rid = alarm_id(ident, "resolved") if carrier == inc.key else alarm_id(carrier, ident, "resolved")
        it = self._new_item(
            id=rid, level=NORMAL, text=text, key=carrier, carried=[inc.key], now=now, kind=_KIND_RECOVERY
        )
        if not self._enqueue(it):
            return _DROPPED
        return _RECOVERY

    # ---- queue --------------------------------------------------------------------------------------------

    def _enqueue(self, it: Item) -> bool:
        """Add an item; a full queue drops its lowest level first (the newest of that level), maybe this one."""
        accepted, victim = self.queue.push(it)
        if not accepted:
            self._dropped(it, "queue full; this alarm is the lowest level")
            return False
        if victim is not None:
            self._dropped(victim, "queue full; dropped for a higher-level alarm")
        self.sync_gen += 1
        self._touch()
        return True

    def _dropped(self, it: Item, why: str) -> None:
        self.stats.alarms.dropped_full += 1
        self.stats.incidents.dropped += it.ncarried
        self._untrack(it)
        self.log(
            "alarm_dropped",
            terminal=self.name,
            id=it.id,
            level=LEVEL_NAMES[it.level],
            reason=why,
            incidents=it.ncarried,
            text=it.text,
        )

    def _untrack(self, it: Item) -> None:
        if it.kind is not _KIND_RECOVERY:
            self.tracker.untrack(it.key)

    def next_item(self, now: float):
        """The item to send next (P0 first, then oldest), after expiring those past their deadline."""
        self.expire(now)
        it = self.queue.next()
        if it is not None and it.dirty:
            it.id  # brought up to date under the lock: ingest may be counting its group right now  # noqa: B018
        return it

    def expire(self, now: float) -> list:
        gone = self.queue.take_expired(now)
        for x in gone:
            self.stats.alarms.expired += 1
            self.stats.incidents.expired += x.ncarried
            self._untrack(x)
            self._touch()
            self.log(
                "alarm_undeliverable",
                terminal=self.name,
                id=x.id,
                level=LEVEL_NAMES[x.level],
                attempts=x.attempts,
                incidents=x.ncarried,
                text=x.text,
            )
        return gone

    def delivered(self, it: Item, now: float, *, duplicate: bool = False) -> None:
        self.queue.remove(it)
        it.inflight = False
        self.stats.alarms.delivered += 1
        if duplicate:
            self.stats.alarms.duplicate += 1
        self.stats.incidents.delivered += it.ncarried
        self.stats.latency.observe(max(0.0, now - it.created))
        self._touch()

    def refused(self, it: Item) -> None:
        self.queue.remove(it)
        it.inflight = False
        self.stats.alarms.refused += 1
        self.stats.incidents.refused += it.ncarried
        self._untrack(it)
        self._touch()

    def dead_lettered(self, it: Item) -> None:
        """A failure no retry can fix (the alarm cannot be built into a request): out of the queue, counted."""
        self.queue.remove(it)
        it.inflight = False
        self.stats.alarms.dead_letter += 1
        self.stats.incidents.dead += it.ncarried
        self._untrack(it)
        self._touch()

    def failed(self, it: Item) -> None:
        it.inflight = False
        it.attempts += 1
        self.stats.alarms.retries += 1
        self._touch()

    def _touch(self, quiet=False) -> None:
        """quiet: a summary only grew. Nobody but an idle persister needs waking for that, and waking the worker
        and the coalescing persister on each of a storm's thousands of folds costs more than the folds."""
        lock = self.lock  # re-entrant: callers usually hold it already (acquire/release: see submit)
        lock.acquire()
        try:
            self.gen += 1
            if not quiet or self.wake_on_change:
                self.wake_on_change = False
                self.cond.notify_all()
        finally:
            lock.release()

    # ---- persistence --------------------------------------------------------------------------------------

    def snapshot(self) -> dict:
        with self.cond:
            return {
                "version": 1,
                "terminal": self.name,
                "seq": self.seq,
                "gen": self.gen,
                "sync_gen": self.sync_gen,
                "items": [x.to_json() for x in sorted(self.queue.items, key=lambda x: x.seq)],
            }

    def restore(self, data: dict) -> int:
        """Load a persisted queue (after a restart). Returns how many alarms were restored."""
        with self.cond:
            items = [Item.from_json(d) for d in data.get("items", [])]
            self.seq = max([int(data.get("seq", 0)), self.seq] + [x.seq for x in items])
            for it in items:
                self.queue.items.append(it)
                if it.kind is not _KIND_RECOVERY:
                    for k in it.carried:
                        self.tracker.track(k, it.key, it.created)
            self.cond.notify_all()
            return len(items)
