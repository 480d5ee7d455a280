"""Incident grouping, like Alertmanager's group_by but with no added wait for the first alarm.

- an incident whose group is quiet goes out alone, at once;
- what follows in the same group within `window` seconds of the group's last incident folds into one summary
  item whose text counts the group so far ("3 racks, 412 nodes: communication deadlock"); while that item is
  unsent each new incident replaces it by a newer summary (same queue position, new message id);
- with "rack" in group_by, once `cluster_threshold` racks of the same kind are open the kind goes cluster-wide:
  one summary for every rack, absorbing the racks' unsent summaries.

`Grouping.place(inc, now)` decides which of these applies (a `Placement`); the lane (lane.py) queues accordingly.
The summary wording (both languages) is `SUMMARY_TEXT` / `summary_text`.
"""

from __future__ import annotations

from collections import OrderedDict
from enum import Enum

from sentinel_core.alarm import NORMAL, RECOVERED_TEXT

SUMMARY_TEXT = {
    "zh": {
        "one": "告警汇总，机架 %s 共 %d 个节点：%s",
        "many": "告警汇总，%d 个机架 %d 个节点：%s",
        "recovered_one": "机架 %s 共 %d 个节点已恢复正常",
        "recovered_many": "%d 个机架 %d 个节点已恢复正常",
        "all_clear": RECOVERED_TEXT,
        "summary_recovered": "汇总告警的 %d 个节点已全部恢复正常",
        "sep": "、",
    },
    "en": {
        "one": "Rack %s, %d nodes: %s",
        "many": "%d racks, %d nodes: %s",
        "recovered_one": "Rack %s, %d nodes recovered",
        "recovered_many": "%d racks, %d nodes recovered",
        "all_clear": "Training cluster back to normal",
        "summary_recovered": "All %d nodes of the summary recovered",
        "sep": ", ",
    },
}


def texts(language: str) -> dict:
    return SUMMARY_TEXT.get(language, SUMMARY_TEXT["en"])


class Group:
    """The incidents of one group_by value seen within the window. pending: its unsent summary item, if any."""

    __slots__ = (
        "key",
        "base",
        "rack",
        "cluster",
        "first_at",
        "last",
        "racks",
        "hosts",
        "kinds",
        "level",
        "pending",
        "recovery",
    )

    def __init__(self, *, key, base, rack, cluster, now, recovery):
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

    def absorb(self, other: Group) -> None:
        self.racks |= other.racks
        self.hosts |= other.hosts
        for k, v in other.kinds.items():
            self.kinds.setdefault(k, v)
        self.level = max(self.level, other.level)

    def summary_key(self, n: int) -> str:
        """What the terminal shows when the text is not ASCII: "A03:*:NCCL_TIMEOUT#7", "*:*:NCCL_TIMEOUT#9"."""
        return "%s:*:%s#%s" % (
            "*" if self.cluster or len(self.racks) != 1 else next(iter(self.racks)),
            "+".join(self.kinds) if len(self.kinds) <= 2 else "MIXED",
            n,
        )


def summary_text(g: Group, language: str) -> str:
    t = texts(language)
    nodes = len(g.hosts)
    if g.recovery:
        if len(g.racks) == 1:
            return t["recovered_one"] % (next(iter(g.racks)), nodes)
        return t["recovered_many"] % (len(g.racks), nodes)
    idx = 0 if language == "zh" else 1
    phrases = [v[idx] for v in list(g.kinds.values())[:3]]
    what = t["sep"].join(phrases)
    if len(g.racks) == 1:
        return t["one"] % (next(iter(g.racks)), nodes, what)
    return t["many"] % (len(g.racks), nodes, what)


class Placement(str, Enum):
    ALONE = "alone"  # the group was quiet: this incident goes out alone (group: the new Group, or None)
    FOLD = "fold"  # fold into group's summary
    CLUSTER = "cluster"  # the kind just went cluster-wide: group is the new cluster Group, absorbed the racks'


# the members as module names for place(): a global is far cheaper to read than a member off its enum class
_ALONE, _FOLD, _CLUSTER = Placement.ALONE, Placement.FOLD, Placement.CLUSTER


class Grouping:
    def __init__(self, *, group_by=("event_type", "rack"), window: float = 60.0, cluster_threshold: int = 3):
        self.group_by = tuple(group_by)
        self.window = float(window)
        self.cluster_threshold = int(cluster_threshold)
        self.groups: dict = {}
        self.cluster_bases: dict = {}  # base -> cluster Group while that kind is cluster-wide
        self._next_prune = 0.0

    def key(self, inc):
        """(group key, base without the rack, rack or None). Recoveries never share a group with faults."""
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
        return (inc.recovery,) + tuple(vals), (inc.recovery,) + tuple(base), rack

    def place(self, inc, now: float):
        """Decide where an incident goes: returns (Placement, group, absorbed groups)."""
        self.prune(now)
        gkey, base, rack = self.key(inc)
        cluster = self.cluster_bases.get(base)
        if cluster is not None and cluster.last + self.window <= now:
            del self.cluster_bases[base]
            cluster = None
        if cluster is not None:
            return _FOLD, cluster, ()
        g = self.groups.get(gkey)
        if g is not None and g.last + self.window <= now:
            del self.groups[gkey]
            g = None
        if g is not None:
            return _FOLD, g, ()
        if rack is not None and self.cluster_threshold > 0:
            placed = self._cluster(inc, base, now)
            if placed is not None:
                return placed
        g = Group(key=gkey, base=base, rack=rack, cluster=False, now=now, recovery=inc.recovery)
        self.groups[gkey] = g
        g.count(inc)
        return _ALONE, g, ()

    def _cluster(self, inc, base, now):
        """(_CLUSTER, group, absorbed) when this incident's rack group makes cluster_threshold racks of one base,
        else None. (A method of its own: the comprehension's closure would make every place() build a cell.)"""
        same = [x for x in self.groups.values() if x.base == base and not x.cluster]
        if len(same) + 1 < self.cluster_threshold:
            return None
        cg = Group(key=base + ("*",), base=base, rack=None, cluster=True, now=now, recovery=inc.recovery)
        for x in same:
            cg.absorb(x)
            del self.groups[x.key]
        self.cluster_bases[base] = cg
        return _CLUSTER, cg, same

    def prune(self, now) -> None:
        """Closed groups go (with their host sets); a full scan at most once a second keeps ingest O(1)."""
        if now < self._next_prune:
            return
        self._next_prune = now + min(self.window, 1.0)
        self._prune_closed(now)

    def _prune_closed(self, now) -> None:
        # apart from prune(): the comprehension's closure would make every prune() call, most of them returning at
        # once, build cells for now and w
        w = self.window
        for table in (self.groups, self.cluster_bases):
            for k in [k for k, g in table.items() if g.last + w <= now]:
                g = table.pop(k)
                if g.pending is not None:
                    g.pending.settle()  # its summary keeps its words, not the group's host set
