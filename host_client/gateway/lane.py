"""One terminal's lane: incident grouping, the bounded priority queue, rate limit and recovery tracking.

Pure state: no threads, no I/O, every time passed in (`now`: wall-clock seconds, persisted; `mono`: monotonic
seconds, for the rate limit). The delivery worker (delivery.py) drives it under `lane.cond`.

Grouping, like Alertmanager's group_by but with no added wait for the first alarm:
- an incident whose group is quiet goes out alone, at once;
- what follows in the same group within `window` seconds of the group's last incident folds into one summary
  item whose text counts the group so far ("3 racks, 412 nodes: communication deadlock"); while that item is
  unsent each new incident replaces it by a newer summary (same queue position, new message id);
- with "rack" in group_by, once `cluster_threshold` racks of the same kind are open the kind goes cluster-wide:
  one summary for every rack, absorbing the racks' unsent summaries.
Each incident is carried by exactly one queued alarm; that alarm's key is what the terminal knows, so a recovery
clears the alarm once every incident it carried has recovered.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from sentinel_core.alarm import LEVEL_NAMES, NORMAL, P0, P1, RECOVERED_TEXT

DEFAULT_DEADLINES = {P0: 3600.0, P1: 1800.0, NORMAL: 600.0}
# A summary can stand for thousands of incidents; the persisted queue lists the first few (recovery tracking after a
# restart) and the count, so saving stays cheap enough to do before every answer.
PERSIST_CARRIED = 64
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

SUMMARY_TEXT = {
    "zh": {"one": "告警汇总，机架 %s 共 %d 个节点：%s", "many": "告警汇总，%d 个机架 %d 个节点：%s",
           "recovered_one": "机架 %s 共 %d 个节点已恢复正常", "recovered_many": "%d 个机架 %d 个节点已恢复正常",
           "all_clear": RECOVERED_TEXT, "summary_recovered": "汇总告警的 %d 个节点已全部恢复正常", "sep": "、"},
    "en": {"one": "Rack %s, %d nodes: %s", "many": "%d racks, %d nodes: %s",
           "recovered_one": "Rack %s, %d nodes recovered", "recovered_many": "%d racks, %d nodes recovered",
           "all_clear": "Training cluster back to normal", "summary_recovered": "All %d nodes of the summary recovered",
           "sep": ", "},
}


class Item:
    """One alarm waiting for its terminal. carried: the incident keys it stands for (accounting, recovery)."""

    __slots__ = ("id", "seq", "level", "text", "key", "carried", "created", "deadline", "attempts", "inflight",
                 "kind", "group", "queued", "extra")

    def __init__(self, id, seq, level, text, key, carried, created, deadline, kind="alone"):
        self.id = id
        self.seq = seq
        self.level = level
        self.text = text
        self.key = key
        self.carried = carried
        self.created = created
        self.deadline = deadline
        self.attempts = 0
        self.inflight = False
        self.kind = kind
        self.group = None
        self.queued = True
        self.extra = 0          # incidents carried but not listed (a restored summary lists its first few)

    @property
    def ncarried(self) -> int:
        return len(self.carried) + self.extra

    def to_json(self) -> dict:
        return {"id": self.id, "seq": self.seq, "level": LEVEL_NAMES[self.level], "text": self.text,
                "key": self.key, "carried": self.carried[:PERSIST_CARRIED], "n": self.ncarried,
                "created": self.created,
                "deadline": self.deadline, "attempts": self.attempts, "kind": self.kind}

    @classmethod
    def from_json(cls, d: dict) -> Item:
        level = LEVEL_NAMES.index(d["level"])
        it = cls(str(d["id"]), int(d["seq"]), level, str(d["text"]), d.get("key"), list(d.get("carried", [])),
                 float(d["created"]), float(d["deadline"]), str(d.get("kind", "alone")))
        it.attempts = int(d.get("attempts", 0))
        it.extra = max(0, int(d.get("n", len(it.carried))) - len(it.carried))
        return it

    def __repr__(self):
        return "Item(#%d %s %s %r n=%d)" % (self.seq, LEVEL_NAMES[self.level], self.kind, self.text,
                                          len(self.carried))


class Group:
    __slots__ = ("key", "base", "rack", "cluster", "first_at", "last", "racks", "hosts", "kinds", "level",
                 "pending", "recovery")

    def __init__(self, key, base, rack, cluster, now, recovery):
        self.key = key
        self.base = base
        self.rack = rack
        self.cluster = cluster
        self.first_at = now
        self.last = now
        self.racks = set()
        self.hosts = set()
        self.kinds = OrderedDict()
        self.level = NORMAL
        self.pending = None
        self.recovery = recovery

    def count(self, inc) -> None:
        self.racks.add(inc.rack)
        self.hosts.add((inc.rack, inc.host))
        if inc.kind not in self.kinds:
            self.kinds[inc.kind] = (inc.phrase_zh, inc.phrase_en)
        if inc.level > self.level:
            self.level = inc.level


class RateLimit:
    """Token bucket: `burst` alarms at once, then one per `interval` seconds."""

    def __init__(self, burst: int = 3, interval: float = 5.0):
        self.burst = max(1, int(burst))
        self.interval = max(0.0, float(interval))
        self.tokens = float(self.burst)
        self.t = None

    def wait(self, mono: float) -> float:
        """Seconds until a send is allowed (0: now)."""
        self._refill(mono)
        if self.tokens >= 1.0 or self.interval == 0.0:
            return 0.0
        return (1.0 - self.tokens) * self.interval

    def take(self, mono: float) -> None:
        self._refill(mono)
        if self.interval:
            self.tokens = max(0.0, self.tokens - 1.0)

    def _refill(self, mono: float) -> None:
        if self.t is not None and self.interval:
            self.tokens = min(float(self.burst), self.tokens + (mono - self.t) / self.interval)
        self.t = mono


class Lane:
    def __init__(self, name: str, *, language: str = "zh", group_by=("event_type", "rack"), window: float = 60.0,
                 cluster_threshold: int = 3, grouping: bool = True, queue_size: int = 256, deadlines=None,
                 rate_burst: int = 3, rate_interval: float = 5.0, max_tracked: int = 100_000,
                 track_s: float = 6 * 3600.0,
                 id_prefix: str = "gw", log=None):
        if queue_size < 1:
            raise ValueError("queue_size must be >= 1")
        self.name = name
        self.language = language
        self.group_by = tuple(group_by)
        self.window = float(window)
        self.cluster_threshold = int(cluster_threshold)
        self.grouping = grouping
        self.queue_size = int(queue_size)
        self.deadlines = dict(DEFAULT_DEADLINES)
        if deadlines:
            self.deadlines.update(deadlines)
        self.rate = RateLimit(rate_burst, rate_interval)
        self.max_tracked = int(max_tracked)
        self.track_s = float(track_s)
        self._next_group_prune = 0.0
        self._tracked_high = 0
        self.id_prefix = id_prefix
        self.log = log or (lambda event, **kw: None)
        self.cond = threading.Condition()
        self.items: list[Item] = []
        self.seq = 0
        self.groups: dict = {}
        self.cluster_bases: dict = {}           # base -> cluster Group while that kind is cluster-wide
        self.carrier_of: OrderedDict = OrderedDict()   # incident key -> alarm key that told the terminal
        self.open: dict = {}                     # alarm key -> set of incident keys not yet recovered
        self.carried_size: dict = {}             # alarm key -> how many incidents it stood for
        self.scope_head: dict = {}               # scope (rack:host:type) -> incident key that fired for it
        self.gen = 0                             # bumped on every change the persisted queue must see
        self.wake_on_change = False              # set by an idle persister: wake me on the next change
        self.sync_gen = 0                        # bumped when an alarm is added: that write is fsynced
        self.up = None                           # None: never tried
        self.stats = {"incidents_alone": 0, "incidents_folded": 0, "incidents_dropped": 0,
                      "incidents_expired": 0, "incidents_delivered": 0, "incidents_refused": 0,
                      "incidents_attached": 0,
                      "delivered": 0, "duplicate": 0, "expired": 0, "dropped_full": 0, "refused": 0,
                      "retries": 0, "replaced": 0, "heartbeats_ok": 0, "heartbeats_failed": 0}
        self.latency_buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0
        self.latency_count = 0

    # ---- ingest -------------------------------------------------------------------------------------------

    def submit(self, inc, now: float) -> str:
        """Take one incident. Returns what happened: 'alone', 'folded', 'attached', 'recovery',
        'recovery_pending' (the alarm still stands for other incidents), 'dropped'."""
        with self.cond:
            self._prune_groups(now)
            if inc.attach:
                e = self.carrier_of.get(self.scope_head.get(inc.scope))
                if e is not None and e[0] in self.open:
                    self._track(inc.key, e[0], now, count=False)
                    self.stats["incidents_attached"] += 1
                    return "attached"
                # this terminal no longer shows the fault it was debounced against (delivered and recovered,
                # expired, dropped, forgotten): then it is news here, and goes out like any incident
                self.log("debounced_gpu_sent", terminal=self.name, key=inc.key, scope=inc.scope)
            if inc.recovery:
                self._prune_tracked(now)
                e = self.carrier_of.pop(inc.key, None)
                if e is not None:
                    return self._recover(inc, e[0], now)
            if not self.grouping:
                return self._alone(inc, now)
            gkey, base, rack = self._group_key(inc)
            cluster = self.cluster_bases.get(base)
            if cluster is not None and cluster.last + self.window <= now:
                del self.cluster_bases[base]
                cluster = None
            if cluster is not None:
                return self._fold(cluster, inc, now)
            g = self.groups.get(gkey)
            if g is not None and g.last + self.window <= now:
                del self.groups[gkey]
                g = None
            if g is None:
                if rack is not None and self.cluster_threshold > 0:
                    same = [x for x in self.groups.values() if x.base == base and not x.cluster]
                    if len(same) + 1 >= self.cluster_threshold:
                        return self._go_cluster(base, same, inc, now)
                g = Group(gkey, base, rack, False, now, inc.recovery)
                self.groups[gkey] = g
                g.count(inc)
                return self._alone(inc, now)
            return self._fold(g, inc, now)

    def _group_key(self, inc):
        vals = []
        base = []
        rack = None
        for name in self.group_by:
            if name == "rack":
                rack = inc.rack
                vals.append(inc.rack)
                continue
            if name == "event_type":
                v = inc.kind
            elif name == "level":
                v = inc.level
            else:
                v = inc.labels.get(name, "")
            vals.append(v)
            base.append(v)
        # recoveries never share a group with faults
        return (inc.recovery,) + tuple(vals), (inc.recovery,) + tuple(base), rack

    def _new_item(self, level, text, key, carried, now, kind) -> Item:
        self.seq += 1
        it = Item("%s-%d" % (self.id_prefix, self.seq), self.seq, level, text, key, carried, now,
                  now + self.deadlines[level], kind)
        return it

    def _alone(self, inc, now) -> str:
        it = self._new_item(inc.level, inc.text_for(self.language), inc.key, [inc.key], now,
                            "recovery" if inc.recovery else "alone")
        if not self._enqueue(it, now):
            return "dropped"
        if not inc.recovery:
            self._track(inc.key, inc.key, now)
            self._head(inc)
        self.stats["incidents_alone"] += 1
        return "alone"

    def _fold(self, g: Group, inc, now) -> str:
        g.count(inc)
        g.last = now
        it = g.pending
        if it is not None and (it.inflight or not it.queued):
            it = None
        if it is None:
            # What the terminal shows when the text is not ASCII: "A03:*:NCCL_TIMEOUT#7", "*:*:NCCL_TIMEOUT#9".
            key = "%s:*:%s#%d" % ("*" if g.cluster or len(g.racks) != 1 else next(iter(g.racks)),
                                  "+".join(g.kinds) if len(g.kinds) <= 2 else "MIXED", self.seq + 1)
            it = self._new_item(g.level, "", key, [], now, "summary")
            it.group = g
            g.pending = it
            it.text = self._summary_text(g)
            it.carried.append(inc.key)
            if not self._enqueue(it, now):
                g.pending = None
                return "dropped"
        else:
            it.carried.append(inc.key)
            upgraded = g.level > it.level
            if upgraded:
                it.level = g.level
                it.deadline = it.created + self.deadlines[it.level]
            it.text = self._summary_text(g)
            self.seq += 1
            it.id = "%s-%d" % (self.id_prefix, self.seq)   # new content, new message id (retries keep theirs)
            self.stats["replaced"] += 1
            self._touch(quiet=not upgraded)
        if not inc.recovery:
            self._track(inc.key, it.key, now)
            self._head(inc)
        self.stats["incidents_folded"] += 1
        return "folded"

    def _go_cluster(self, base, same, inc, now) -> str:
        """The kind spans enough racks: one cluster-wide summary, absorbing the racks' unsent summaries."""
        cg = Group(base + ("*",), base, None, True, now, inc.recovery)
        for g in same:
            cg.racks |= g.racks
            cg.hosts |= g.hosts
            for k, v in g.kinds.items():
                cg.kinds.setdefault(k, v)
            cg.level = max(cg.level, g.level)
            del self.groups[g.key]
        self.cluster_bases[base] = cg
        absorbed = []
        for g in same:
            it = g.pending
            if it is not None and it.queued and not it.inflight:
                absorbed.append(it)
        result = self._fold(cg, inc, now)
        it = cg.pending
        if it is not None and absorbed:
            for old in absorbed:
                self.items.remove(old)
                old.queued = False
                it.carried[0:0] = old.carried
                listed = set(old.carried)
                # everything the old summary stood for, GPUs attached to its nodes included
                for k in list(self.open.get(old.key, ())):
                    if k in self.carrier_of:
                        self._track(k, it.key, now, count=k in listed)
                self.stats["replaced"] += 1
                if old.level > it.level:
                    it.level = old.level
                if old.seq < it.seq:
                    it.seq = old.seq          # keep the earliest queue position: order of incidents holds
            it.text = self._summary_text(cg)
            self._touch()
        return result

    def _summary_text(self, g: Group) -> str:
        t = SUMMARY_TEXT.get(self.language, SUMMARY_TEXT["en"])
        nodes = len(g.hosts)
        if g.recovery:
            if len(g.racks) == 1:
                return t["recovered_one"] % (next(iter(g.racks)), nodes)
            return t["recovered_many"] % (len(g.racks), nodes)
        idx = 0 if self.language == "zh" else 1
        phrases = [v[idx] for v in list(g.kinds.values())[:3]]
        what = t["sep"].join(phrases)
        if len(g.racks) == 1:
            return t["one"] % (next(iter(g.racks)), nodes, what)
        return t["many"] % (len(g.racks), nodes, what)

    def _recover(self, inc, carrier: str, now) -> str:
        keys = self.open.get(carrier)
        if keys is not None:
            keys.discard(inc.key)
            if keys:
                return "recovery_pending"   # the alarm still stands for other incidents
            del self.open[carrier]
        t = SUMMARY_TEXT.get(self.language, SUMMARY_TEXT["en"])
        size = self.carried_size.pop(carrier, 1)
        if not self.open:
            text = t["all_clear"]
        elif carrier == inc.key or ":*:" not in carrier:
            # an alarm for one node (perhaps first raised by another of its GPUs): that node's recovery words
            text = inc.text_for(self.language)
        else:
            text = t["summary_recovered"] % size
        it = self._new_item(NORMAL, text, carrier, [inc.key], now, "recovery")
        if not self._enqueue(it, now):
            return "dropped"
        return "recovery"

    def _head(self, inc) -> None:
        """Remember which incident's alarm stands for its scope: later GPUs of that scope attach to it."""
        if inc.scope is None:
            return
        self.scope_head[inc.scope] = inc.key
        if len(self.scope_head) > 2 * len(self.carrier_of) + 1024:
            self.scope_head = {s: k for s, k in self.scope_head.items() if k in self.carrier_of}

    def _track(self, incident_key: str, alarm_key: str, now: float, count: bool = True) -> None:
        """count=False: an attached GPU adds no node to the alarm's recovery wording."""
        old = self.carrier_of.pop(incident_key, None)
        if old is not None and old[0] != alarm_key:
            self._release(incident_key, old[0])
        self.carrier_of[incident_key] = (alarm_key, now)
        s = self.open.setdefault(alarm_key, set())
        if incident_key not in s:
            s.add(incident_key)
            if count:
                self.carried_size[alarm_key] = self.carried_size.get(alarm_key, 0) + 1
        if len(self.carrier_of) > self._tracked_high:
            self._tracked_high = len(self.carrier_of)
        while len(self.carrier_of) > self.max_tracked:
            k, e = self.carrier_of.popitem(last=False)
            self._release(k, e[0])
        self._prune_tracked(now)

    def _release(self, incident_key, alarm_key) -> None:
        s = self.open.get(alarm_key)
        if s is not None:
            s.discard(incident_key)
            if not s:
                del self.open[alarm_key]
                self.carried_size.pop(alarm_key, None)

    def _prune_tracked(self, now) -> None:
        """Forget incidents older than track_s: a recovery after that is sent under the incident's own key."""
        d = self.carrier_of
        limit = now - self.track_s
        n = 0
        while d:
            k = next(iter(d))
            e = d[k]
            if e[1] > limit:
                break
            del d[k]
            self._release(k, e[0])
            n += 1
        if n and self._tracked_high > 1024 and len(d) < self._tracked_high // 4:
            # dicts keep their table after deletions: rebuild so the memory really returns
            self.carrier_of = OrderedDict(d)
            self.open = {k: set(v) for k, v in self.open.items()}
            self.scope_head = {s: k for s, k in self.scope_head.items() if k in d}
            self._tracked_high = len(d)

    def _prune_groups(self, now) -> None:
        """Closed groups go (with their host sets); a full scan at most once a second keeps ingest O(1)."""
        if now < self._next_group_prune:
            return
        self._next_group_prune = now + min(self.window, 1.0)
        w = self.window
        for k in [k for k, g in self.groups.items() if g.last + w <= now]:
            del self.groups[k]
        for k in [k for k, g in self.cluster_bases.items() if g.last + w <= now]:
            del self.cluster_bases[k]

    # ---- queue --------------------------------------------------------------------------------------------

    def _enqueue(self, it: Item, now) -> bool:
        """Add an item; a full queue drops its lowest level first (the newest of that level), maybe this one."""
        if len(self.items) >= self.queue_size:
            victims = [x for x in self.items if not x.inflight]
            victim = None
            if victims:
                low = min(x.level for x in victims)
                if low < it.level:
                    victim = max((x for x in victims if x.level == low), key=lambda x: x.seq)
            if victim is None:
                self._dropped(it, "queue full; this alarm is the lowest level")
                return False
            self.items.remove(victim)
            victim.queued = False
            self._dropped(victim, "queue full; dropped for a higher-level alarm")
        self.items.append(it)
        it.queued = True
        self.sync_gen += 1
        self._touch()
        return True

    def _dropped(self, it: Item, why: str) -> None:
        it.queued = False
        self.stats["dropped_full"] += 1
        self.stats["incidents_dropped"] += it.ncarried
        self._untrack(it)
        self.log("alarm_dropped", terminal=self.name, id=it.id, level=LEVEL_NAMES[it.level], reason=why,
                 incidents=it.ncarried, text=it.text)

    def _untrack(self, it: Item) -> None:
        if it.kind == "recovery":
            return
        s = self.open.pop(it.key, None)
        self.carried_size.pop(it.key, None)
        if s:
            for k in s:
                e = self.carrier_of.get(k)
                if e is not None and e[0] == it.key:
                    del self.carrier_of[k]

    def next_item(self, now: float):
        """The item to send next (P0 first, then oldest), after expiring those past their deadline."""
        self.expire(now)
        best = None
        for x in self.items:
            if x.inflight:
                continue
            if best is None or x.level > best.level or (x.level == best.level and x.seq < best.seq):
                best = x
        return best

    def expire(self, now: float) -> list:
        gone = [x for x in self.items if not x.inflight and x.deadline <= now]
        for x in gone:
            self.items.remove(x)
            x.queued = False
            self.stats["expired"] += 1
            self.stats["incidents_expired"] += x.ncarried
            self._untrack(x)
            self._touch()
            self.log("alarm_undeliverable", terminal=self.name, id=x.id, level=LEVEL_NAMES[x.level],
                     attempts=x.attempts, incidents=x.ncarried, text=x.text)
        return gone

    def delivered(self, it: Item, now: float, duplicate: bool = False) -> None:
        if it.queued:
            self.items.remove(it)
        it.queued = False
        it.inflight = False
        self.stats["delivered"] += 1
        if duplicate:
            self.stats["duplicate"] += 1
        self.stats["incidents_delivered"] += it.ncarried
        lat = max(0.0, now - it.created)
        self.latency_sum += lat
        self.latency_count += 1
        i = 0
        while i < len(LATENCY_BUCKETS) and lat > LATENCY_BUCKETS[i]:
            i += 1
        self.latency_buckets[i] += 1
        self._touch()

    def refused(self, it: Item) -> None:
        if it.queued:
            self.items.remove(it)
        it.queued = False
        it.inflight = False
        self.stats["refused"] += 1
        self.stats["incidents_refused"] += it.ncarried
        self._untrack(it)
        self._touch()

    def failed(self, it: Item) -> None:
        it.inflight = False
        it.attempts += 1
        self.stats["retries"] += 1
        self._touch()

    def _touch(self, quiet=False) -> None:
        """quiet: a summary only grew. Nobody but an idle persister needs waking for that, and waking the worker
        and the coalescing persister on each of a storm's thousands of folds costs more than the folds."""
        with self.cond:   # re-entrant: callers usually hold it already
            self.gen += 1
            if not quiet or self.wake_on_change:
                self.wake_on_change = False
                self.cond.notify_all()

    def depth(self) -> int:
        return len(self.items)

    # ---- persistence --------------------------------------------------------------------------------------

    def snapshot(self) -> dict:
        with self.cond:
            return {"version": 1, "terminal": self.name, "seq": self.seq, "gen": self.gen, "sync_gen": self.sync_gen,
                    "items": [x.to_json() for x in sorted(self.items, key=lambda x: x.seq)]}

    def restore(self, data: dict) -> int:
        """Load a persisted queue (after a restart). Returns how many alarms were restored."""
        with self.cond:
            items = [Item.from_json(d) for d in data.get("items", [])]
            self.seq = max([int(data.get("seq", 0)), self.seq] + [x.seq for x in items])
            for it in items:
                self.items.append(it)
                if it.kind != "recovery":
                    for k in it.carried:
                        self._track(k, it.key, it.created)
            self.cond.notify_all()
            return len(items)
