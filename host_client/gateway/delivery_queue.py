"""A terminal's delivery queue: the alarms waiting for it, bounded, P0 first, each with a deadline.

`Item` is one alarm as the gateway holds it (what it says, which incidents it carries, how often it was tried);
`AlarmQueue` is the bounded priority queue (a full queue drops its lowest level first, the newest of that level).
Pure state, time passed in; the lane (lane.py) owns one and does the accounting around it.
"""

from __future__ import annotations

import hashlib
from enum import Enum

from sentinel_core.alarm import LEVEL_NAMES, NORMAL, P0, P1

from .grouping import summary_text

DEFAULT_DEADLINES = {P0: 3600.0, P1: 1800.0, NORMAL: 600.0}
# A summary can stand for thousands of incidents; the persisted queue lists the first few (recovery tracking after a
# restart) and the count, so saving stays cheap enough to do before every answer.
PERSIST_CARRIED = 64


def alarm_id(*parts) -> str:
    """The message id of an alarm, from what it says about which incident: the same on every gateway that sends it,
    so a terminal that already has it answers a copy as a duplicate (its replay memory) and shows it once."""
    return "s" + hashlib.sha256("|".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:31]


class ItemKind(str, Enum):
    """What an alarm is: one incident, a summary of a group, or a recovery. The value is what the persisted queue
    and the logs say."""

    ALONE = "alone"
    SUMMARY = "summary"
    RECOVERY = "recovery"


class Item:
    """One alarm waiting for its terminal. carried: the incident keys it stands for (accounting, recovery)."""

    __slots__ = (
        "_id",
        "seq",
        "level",
        "_text",
        "key",
        "carried",
        "created",
        "deadline",
        "attempts",
        "inflight",
        "kind",
        "group",
        "queued",
        "extra",
        "dirty",
        "lang",
    )

    def __init__(self, *, id, seq, level, text, key, carried, created, deadline, kind=ItemKind.ALONE):
        self._id = id
        self.seq = seq
        self.level = level
        self._text = text
        self.dirty = False  # a summary that grew: its text and id are brought up to date when next read
        self.lang = "en"  # the summary's language, set by grew()
        self.key = key
        self.carried = carried
        self.created = created
        self.deadline = deadline
        self.attempts = 0
        self.inflight = False
        self.kind = kind
        self.group = None
        self.queued = True
        self.extra = 0  # incidents carried but not listed (a restored summary lists its first few)

    def grew(self, language: str) -> None:
        """A summary took one more incident. Its words and id (they follow its content) are rebuilt when read, not
        on each of a storm's thousands of folds."""
        self.dirty = True
        self.lang = language

    def settle(self) -> None:
        """Its summary's group has closed (nothing folds into it any more): its words are made final and the group
        let go, with the set of every node a storm's group saw."""
        if self.dirty:
            self._refresh()
        self.group = None

    def _refresh(self) -> None:
        self.dirty = False
        if self.group is not None:
            self._text = summary_text(self.group, self.lang)
        self._id = alarm_id(self.key, str(self.ncarried))

    @property
    def id(self) -> str:
        if self.dirty:
            self._refresh()
        return self._id

    @id.setter
    def id(self, v):
        self._id = v

    @property
    def text(self) -> str:
        if self.dirty:
            self._refresh()
        return self._text

    @text.setter
    def text(self, v):
        self._text = v

    @property
    def ncarried(self) -> int:
        return len(self.carried) + self.extra

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "seq": self.seq,
            "level": LEVEL_NAMES[self.level],
            "text": self.text,
            "key": self.key,
            "carried": self.carried[:PERSIST_CARRIED],
            "n": self.ncarried,
            "created": self.created,
            "deadline": self.deadline,
            "attempts": self.attempts,
            "kind": self.kind.value,
        }

    @classmethod
    def from_json(cls, d: dict) -> Item:
        it = cls(
            id=str(d["id"]),
            seq=int(d["seq"]),
            level=LEVEL_NAMES.index(d["level"]),
            text=str(d["text"]),
            key=d.get("key"),
            carried=list(d.get("carried", [])),
            created=float(d["created"]),
            deadline=float(d["deadline"]),
            kind=ItemKind(d.get("kind", "alone")),
        )
        it.attempts = int(d.get("attempts", 0))
        it.extra = max(0, int(d.get("n", len(it.carried))) - len(it.carried))
        return it

    def __repr__(self):
        return "Item(#%d %s %s %r n=%d)" % (
            self.seq,
            LEVEL_NAMES[self.level],
            self.kind.value,
            self.text,
            len(self.carried),
        )


class AlarmQueue:
    """The bounded priority queue of one terminal. `items` is in arrival order; `next` picks P0 first, then the
    lowest seq (a summary absorbed into a cluster-wide one keeps the earliest position)."""

    def __init__(self, size: int, deadlines=None):
        if size < 1:
            raise ValueError("queue_size must be >= 1")
        self.size = int(size)
        self.deadlines = dict(DEFAULT_DEADLINES)
        if deadlines:
            self.deadlines.update(deadlines)
        self.items: list[Item] = []

    def __len__(self) -> int:
        return len(self.items)

    def deadline(self, level: int, created: float) -> float:
        return created + self.deadlines[level]

    def push(self, it: Item):
        """Add an item. Returns (accepted, victim): a full queue evicts its lowest level below it.level (the newest
        of that level) as victim; if nothing is lower, the new item itself is refused (accepted False)."""
        victim = None
        if len(self.items) >= self.size:
            victims = [x for x in self.items if not x.inflight]
            if victims:
                low = min(x.level for x in victims)
                if low < it.level:
                    victim = max((x for x in victims if x.level == low), key=lambda x: x.seq)
            if victim is None:
                it.queued = False
                return False, None
            self.remove(victim)
        self.items.append(it)
        it.queued = True
        return True, victim

    def remove(self, it: Item) -> None:
        if it.queued:
            self.items.remove(it)
        it.queued = False

    def next(self):
        """The item to send next (P0 first, then oldest), not counting those in flight."""
        best = None
        for x in self.items:
            if x.inflight:
                continue
            if best is None or x.level > best.level or (x.level == best.level and x.seq < best.seq):
                best = x
        return best

    def take_expired(self, now: float) -> list:
        """Remove and return the items past their deadline (not those in flight)."""
        gone = [x for x in self.items if not x.inflight and x.deadline <= now]
        for x in gone:
            self.remove(x)
        return gone
