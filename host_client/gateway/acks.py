"""Acknowledgements outside the box: which P0 each terminal has been shown and not yet acknowledged, what its status
page says was acknowledged, how long that took, when an unacknowledged P0 is due to escalate, and which other
terminals of an ACK group must be told (docs/GATEWAY.md, "Acknowledgement and escalation").

AckBook is the core: it takes values and `now` and returns what happened; AckPoller is the thread that reads each
terminal's /api/v1/status while a P0 it was sent is open there, and sends the group's ACKs.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict

from sentinel_core.alarm import P0
from sentinel_core.validate import ACK_BY_MAX_BYTES

from .delivery_queue import ItemKind, alarm_id
from .wire import wire_key

log = logging.getLogger("sentinel.gateway")

# Time-to-acknowledge histogram buckets, seconds: a person walking to the box takes tens of seconds to minutes.
ACK_BUCKETS = (5, 15, 30, 60, 120, 300, 600, 1800, 3600)
STATUS_MAX = 65536  # a status page larger than this is not a terminal's: refused unread past it
CLOCK_SKEW_S = 300  # a terminal whose clock is further off than this is said to be off (its ACKs still count)
MAX_OPEN = 4096  # open P0s remembered per gateway: a storm of distinct P0s forgets the oldest first
MAX_NOTED = 4096  # labels of P0 incidents queued as their own alarm, not yet delivered
KEEP_KNOWN = 512  # the newest labels and sent keys the ledger keeps (the open P0s carry their own)
REJECTS = ("garbage", "too_large", "unknown_incident", "clock_off", "unreachable")


class OpenP0:
    """One P0 alarm meant for a terminal and not acknowledged there: shown (the terminal answered 200), or not yet
    (taken for that terminal, not delivered: it escalates all the same, nobody has seen it)."""

    __slots__ = (
        "terminal",
        "key",
        "carried",
        "since",
        "rack",
        "node",
        "kind",
        "escalate_after",
        "escalated",
        "shown",
        "deadline",
        "esc_shown",
    )

    def __init__(self, terminal, key, carried, since, *, rack, node, kind, escalate_after, shown=True, deadline=None):
        self.terminal = terminal
        self.key = key  # the key as the terminal knows it (wire_key)
        self.carried = set(carried)  # the incidents it stands for: it closes when they have all resolved
        self.since = since  # shown: the terminal's 200; not shown: when the gateway took the incident
        self.rack = rack
        self.node = node
        self.kind = kind
        self.escalate_after = escalate_after
        self.escalated = False
        self.shown = shown
        # the deadline is kept through delivery and restarts: a P0 escalates escalate_after_s after it was taken
        self.deadline = since + escalate_after if deadline is None else deadline
        self.esc_shown = None  # its `shown` label when it escalated: the page's labels do not change under it

    def labels_shown(self, seen_elsewhere=False):
        """The `shown` label of its deadline and escalation series: "true" (this terminal showed it), "false" (not
        this one, another did), "none" (no terminal showed it: nobody has seen it). Frozen when it escalated, so
        it pages once."""
        if self.esc_shown is not None:
            return self.esc_shown
        return "true" if self.shown else "false" if seen_elsewhere else "none"

    def to_json(self):
        return {
            "terminal": self.terminal,
            "key": self.key,
            "carried": sorted(self.carried)[:64],
            "since": self.since,
            "rack": self.rack,
            "node": self.node,
            "kind": self.kind,
            "escalate_after": self.escalate_after,
            "escalated": self.escalated,
            "shown": self.shown,
            "deadline": self.deadline,
            "esc_shown": self.esc_shown,
        }

    @classmethod
    def from_json(cls, d):
        o = cls(
            str(d["terminal"]),
            str(d["key"]),
            [str(c) for c in d["carried"]],
            float(d["since"]),
            rack=str(d["rack"]),
            node=str(d["node"]),
            kind=str(d["kind"]),
            escalate_after=float(d["escalate_after"]),
            shown=bool(d["shown"]),
            deadline=float(d["deadline"]),
        )
        o.escalated = bool(d["escalated"])
        esc = d.get("esc_shown")
        o.esc_shown = esc if esc in ("true", "false", "none") else None
        return o


def _from_key(key, cfg):
    """An alarm whose incidents were not noted (a summary, or the memory was full): a GPU incident's key is
    rack:host:type, an Alertmanager one says nothing of where."""
    parts = key.split(":") if not key.startswith("am:") else ()
    if len(parts) == 3:
        rack, node, kind = parts
        return rack, node, kind, cfg.escalate_after({"rack": rack, "host": node, "event_type": kind})
    return "", "", "", cfg.escalate_after({})


def group_by(member):
    """The "by" of a group ACK: the member whose button was pressed, or just "group" where that is too long for
    the terminal's field (ACK_BY_MAX_BYTES)."""
    by = "group:" + member
    return by if len(by.encode("utf-8")) <= ACK_BY_MAX_BYTES else "group"


class Acked:
    """What the book learnt: terminal acknowledged key after after_s seconds (via "button": on that terminal;
    "group": sent by this gateway from another terminal of its ack_group)."""

    __slots__ = ("terminal", "key", "after_s", "level", "via", "open")

    def __init__(self, terminal, key, after_s, level, via, open_):
        self.terminal = terminal
        self.key = key
        self.after_s = after_s
        self.level = level
        self.via = via
        self.open = open_


class Reading:
    """One status read's result: new ACKs, the group ACKs to send as (terminal, key), and a refusal reason (or None)."""

    __slots__ = ("acked", "to_send", "rejected")

    def __init__(self, acked=(), to_send=(), rejected=None):
        self.acked = list(acked)
        self.to_send = list(to_send)
        self.rejected = rejected


class AckBook:
    """The gateway's record of open P0s and ACKs. Thread-safe; every method takes `now` (wall-clock seconds).

    `gen` counts its changes: the ledger (ledger.py) saves it under state_dir whenever it moves, and an ingest
    answer that opened a P0 waits for that save, like the pending queue's. `history` (history.py), when set, is
    told what happened to each incident."""

    def __init__(self, config, history=None):
        self.cfg = config
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.gen = 0  # bumped under the lock on every change the ledger keeps
        self.history = history
        self.open: OrderedDict = OrderedDict()  # (terminal, key) -> OpenP0
        self.noted: OrderedDict = OrderedDict()  # incident key -> (rack, node, kind, escalate_after)
        self.hist = {}  # (terminal, level) -> [bucket counts..., +Inf count, sum]
        self.acks = {}  # (terminal, via) -> count
        self.rejected = {}  # (terminal, reason) -> count
        self.failing = {}  # terminal -> the reason its last read was refused (logged once per episode)
        self.unknown = {}  # terminal -> acknowledged keys this gateway never sent there (counted once each)
        self.known: OrderedDict = OrderedDict()  # (terminal, key) this gateway sent a P0 or a group ACK for
        self.sent = {}  # (terminal, key) -> "group" | "cli": ACKs sent or due by us (not a new ACK when read back)
        self.to_send: OrderedDict = OrderedDict()  # (terminal, key) -> first try: ACKs not yet taken
        self.by = {}  # (terminal, key) -> who acknowledged, as the ACK due there tells the terminal ("by")

    def _changed(self):
        """Under the lock: the ledger has something new to save."""
        self.gen += 1
        self.cond.notify_all()

    # ---- what the gateway did -------------------------------------------------------------------------------

    def note_incident(self, inc):
        """A P0 incident dispatched: its labels, for the escalation of the alarm that will carry it."""
        if inc.level != P0 or inc.recovery:
            return
        with self.lock:
            self.noted[inc.key] = (inc.rack or "", inc.host or "", inc.kind or "", self.cfg.escalate_after(inc.labels))
            self.noted.move_to_end(inc.key)
            while len(self.noted) > MAX_NOTED:
                self.noted.popitem(last=False)
            self._changed()

    def taken(self, inc, terminals, now):
        """A P0 incident queued as its own alarm for these terminals: open (not shown) from now, so its deadline
        runs even if no terminal ever answers. Returns the ledger generation to wait for (None: nothing new)."""
        if inc.level != P0 or inc.recovery or not terminals:
            return None
        key = wire_key(inc.key)
        after = self.cfg.escalate_after(inc.labels)
        with self.lock:
            for t in terminals:
                if (t, key) in self.open:
                    continue
                self._know(t, key)
                self.open[(t, key)] = OpenP0(
                    t,
                    key,
                    [inc.key],
                    now,
                    rack=inc.rack or "",
                    node=inc.host or "",
                    kind=inc.kind or "",
                    escalate_after=after,
                    shown=False,
                )
            while len(self.open) > MAX_OPEN:
                self.open.popitem(last=False)
            self._changed()
            return self.gen

    def resolved(self, incident_key):
        """The incident resolved: every open P0 that carried only resolved incidents closes (and its escalation)."""
        with self.lock:
            changed = self.noted.pop(incident_key, None) is not None
            for k, o in list(self.open.items()):
                if incident_key in o.carried:
                    o.carried.discard(incident_key)
                    changed = True
                    if not o.carried:
                        del self.open[k]
            if changed:  # a recovery storm of incidents the ledger never held writes nothing
                self._changed()
        if self.history is not None:
            self.history.resolved(incident_key, time.time())

    def delivered(self, terminal, item, now):
        """A terminal accepted an alarm: a P0 opens (once per terminal and key) or, taken before, is now shown,
        keeping its deadline; a recovery closes its incidents."""
        if item.kind == ItemKind.RECOVERY:
            for key in item.carried:
                self.resolved(key)
            return
        if item.level != P0:
            return
        key = wire_key(item.key)
        carried = item.carried or [item.key]
        with self.lock:
            o = self.open.get((terminal, key))
            if o is not None:
                if o.shown:
                    return
                o.shown = True
                o.since = now
                self._changed()
        if o is not None:
            if self.history is not None:
                self.history.shown(carried, terminal, now)
            return
        with self.lock:
            info = None
            for c in item.carried:
                info = self.noted.get(c)
                if info is not None:
                    break
            self._know(terminal, key)
            if info is None:
                info = _from_key(item.key, self.cfg)
            rack, node, kind, after = info
            # incidents taken alone for this terminal and now carried by this alarm (a summary): the earliest
            # deadline is kept
            deadline = now + after
            for c in carried:
                p = self.open.pop((terminal, wire_key(c)), None)
                if p is not None and not p.shown:
                    deadline = min(deadline, p.deadline)
            self.open[(terminal, key)] = OpenP0(
                terminal, key, carried, now, rack=rack, node=node, kind=kind, escalate_after=after, deadline=deadline
            )
            while len(self.open) > MAX_OPEN:
                self.open.popitem(last=False)
            self._changed()
        if self.history is not None:
            self.history.shown(carried, terminal, now)

    def acknowledge(self, incident, now, *, via="cli"):
        """An operator acknowledges an incident (its key, or the key its terminals know) from the gateway: every
        terminal it is open on is sent its own signed ACK. Returns the terminals to be told."""
        want = wire_key(incident)
        unseen = []
        with self.lock:
            keys = sorted(tk for tk, o in self.open.items() if tk[1] == want or incident in o.carried)
            for tk in keys:
                self.sent[tk] = via
                self.by[tk] = via
                self.to_send.setdefault(tk, now)
                o = self.open[tk]
                if not o.shown:
                    # never shown there (the terminal is down): the operator has it, so it stops paging now; the
                    # ACK is still sent, so the terminal is quiet about it when it comes back
                    del self.open[tk]
                    unseen.append(o)
            if keys:
                self._changed()
        if self.history is not None:
            for o in unseen:
                self.history.acked(sorted(o.carried), o.terminal, via, now)
        return [{"terminal": t, "key": k} for t, k in keys]

    # ---- what a terminal says ---------------------------------------------------------------------------------

    def read_status(self, terminal, body, now, *, error=None):
        """One read of terminal's /api/v1/status: its bytes (None with error when no answer came). Returns a
        Reading; a page that is not a terminal's status changes nothing and is counted once per episode."""
        acked, out = self.parse_status(terminal, body, now, error=error)
        if acked is None:
            return out
        hist_acks = []
        with self.lock:
            group = self.cfg.ack_group_of(terminal)
            changed = False
            # ACKs we owe this terminal that its page already shows (an HA peer sent them): nothing to send
            for tk in [tk for tk in self.to_send if tk[0] == terminal and tk[1] in acked]:
                del self.to_send[tk]
                self.by.pop(tk, None)
                changed = True
            for (t, key), o in list(self.open.items()):
                if t != terminal or key not in acked:
                    continue
                del self.open[(t, key)]
                changed = True
                via = self.sent.pop((t, key), None) or "button"
                if via == "button":
                    for other in group:
                        if other != terminal and (other, key) not in self.sent:
                            self.sent[(other, key)] = "group"
                            self.by[(other, key)] = group_by(terminal)
                            self._know(other, key)
                            self.to_send[(other, key)] = now
                            p = self.open.get((other, key))
                            if p is not None and not p.shown:
                                # never shown there, but a person of its group has seen it: no escalation for it
                                del self.open[(other, key)]
                after = max(0.0, now - o.since)
                self._observe(t, "P0", after)
                self.acks[(t, via)] = self.acks.get((t, via), 0) + 1
                out.acked.append(Acked(t, key, after, "P0", via, o))
                hist_acks.append((sorted(o.carried), t, "terminal" if via == "button" else via))
            seen = self.unknown.setdefault(terminal, set())
            new_unknown = [k for k in acked if (terminal, k) not in self.known and k not in seen]
            for k in new_unknown:
                if len(seen) < 1024:
                    seen.add(k)
            out.to_send = list(self.to_send)
            if changed:
                self._changed()
        for _k in new_unknown:
            self._count_reject(terminal, "unknown_incident", None)
        if self.history is not None:
            for carried, t, via in hist_acks:
                self.history.acked(carried, t, via, now)
        return out

    def parse_status(self, terminal, body, now, *, error=None):
        """(set of acknowledged keys, Reading) from a status page; (None, Reading) when refused (counted, and
        logged once per episode)."""
        if error is not None:
            return self._refuse(terminal, "unreachable", error)
        if len(body) > STATUS_MAX:
            return self._refuse(terminal, "too_large", "status page over %d bytes" % STATUS_MAX)
        try:
            st = json.loads(body.decode("utf-8"))
            acked = st["mute"]["acknowledged"]
            term_now = st["now"]
            if not (isinstance(acked, list) and all(isinstance(k, str) for k in acked)):
                raise TypeError("mute.acknowledged is not a list of keys")
            if isinstance(term_now, bool) or not isinstance(term_now, (int, float)):
                raise TypeError("now is not a number")
        except (ValueError, UnicodeDecodeError, KeyError, TypeError) as e:
            return self._refuse(terminal, "garbage", "not a terminal status page (%s)" % type(e).__name__)
        out = Reading()
        if abs(term_now - now) > CLOCK_SKEW_S:
            # Its ACK list does not depend on its clock: counted and said, and used.
            out.rejected = "clock_off"
            self._count_reject(terminal, "clock_off", "its clock is %+d s off the gateway's" % (term_now - now))
        elif self.failing.pop(terminal, None) is not None:
            log.info("status_read_ok", extra={"fields": {"terminal": terminal}})
        return set(acked), out

    def _refuse(self, terminal, reason, message):
        self._count_reject(terminal, reason, message)
        return None, Reading(rejected=reason)

    def _know(self, terminal, key):
        self.known[(terminal, key)] = True
        self.known.move_to_end((terminal, key))
        while len(self.known) > MAX_NOTED:
            self.known.popitem(last=False)

    def group_due(self, now):
        """The ACKs still to send, as (terminal, key); one that has failed for 15 minutes is given up."""
        with self.lock:
            for k, first in list(self.to_send.items()):
                if now - first > 900:
                    del self.to_send[k]
                    self.sent.pop(k, None)
                    self.by.pop(k, None)
                    self._changed()
            return list(self.to_send)

    def ack_id(self, terminal, key):
        """The message id of the ACK owed to terminal for key: from the terminal, the key and the 5-minute window
        the ACK was first seen in, so an HA peer that sends the same ACK at the same time sends the same id and
        the terminal applies it once (the page read just before sending catches every later one)."""
        with self.lock:
            first = self.to_send.get((terminal, key), 0.0)
        return alarm_id("ack", terminal, key, str(int(first // 300)))

    def ack_by(self, terminal, key):
        """Who acknowledged, for the ACK owed to terminal for key: "cli", "group:<the member pressed>"."""
        with self.lock:
            return self.by.get((terminal, key)) or self.sent.get((terminal, key), "group")

    def group_sent(self, terminal, key, now, *, ok):
        """The ACK for key reached terminal (ok), or did not: then it is tried again on the next read."""
        with self.lock:
            if not ok:
                return None  # still in to_send: tried again on the next poll
            self.by.pop((terminal, key), None)
            if self.to_send.pop((terminal, key), None) is not None:
                self._changed()
            o = self.open.get((terminal, key))
            if o is None:
                return None
            del self.open[(terminal, key)]
            via = self.sent.pop((terminal, key), "group")
            after = max(0.0, now - o.since)
            self._observe(terminal, "P0", after)
            self.acks[(terminal, via)] = self.acks.get((terminal, via), 0) + 1
            self._changed()
        if self.history is not None:
            self.history.acked(sorted(o.carried), terminal, via, now)
        return Acked(terminal, key, after, "P0", via, o)

    # ---- what is due ----------------------------------------------------------------------------------------

    def terminals_open(self):
        with self.lock:
            return sorted({t for (t, _k) in self.open})

    def due_escalations(self, now):
        """The open P0s past their deadline, shown or not (newly escalated ones are logged)."""
        out = []
        new = []
        with self.lock:
            for o in self.open.values():
                if now >= o.deadline:
                    if not o.escalated:
                        o.escalated = True
                        o.esc_shown = o.labels_shown(self._seen_elsewhere(o))
                        new.append(o)
                    out.append(o)
            if new:
                self._changed()
        for o in new:
            log.warning(
                "p0_escalated",
                extra={
                    "fields": {
                        "incident": o.key,
                        "terminal": o.terminal,
                        "after_s": round(now - o.deadline + o.escalate_after, 1),
                        "shown": o.esc_shown,
                        "rack": o.rack,
                        "node": o.node,
                        "type": o.kind,
                    }
                },
            )
            if self.history is not None:
                self.history.escalated(sorted(o.carried), o.terminal, now, shown=o.esc_shown)
        return out

    # ---- the ledger -------------------------------------------------------------------------------------------

    def snapshot(self):
        """(gen, records): what the ledger keeps, as JSON-able records, one per line on disk."""
        with self.lock:
            recs = [dict(o.to_json(), t="open") for o in self.open.values()]
            recs += [
                {
                    "t": "ack_due",
                    "terminal": t,
                    "key": k,
                    "first": first,
                    "via": self.sent.get((t, k), "group"),
                    "by": self.by.get((t, k), ""),
                }
                for (t, k), first in self.to_send.items()
            ]
            recs += [
                {"t": "sent", "terminal": t, "key": k, "via": via}
                for (t, k), via in self.sent.items()
                if (t, k) not in self.to_send
            ]
            recs += [
                {"t": "noted", "key": k, "rack": v[0], "node": v[1], "kind": v[2], "after": v[3]}
                for k, v in list(self.noted.items())[-KEEP_KNOWN:]
            ]
            recs += [{"t": "known", "terminal": t, "key": k} for (t, k) in list(self.known)[-KEEP_KNOWN:]]
            return self.gen, recs

    def restore(self, records):
        """Records from the ledger (each one already parsed): what a restart must not forget. Returns how many
        were taken; a record that does not read is skipped (its count is returned second)."""
        n = bad = 0
        with self.lock:
            for r in records:
                try:
                    t = r["t"]
                    if t == "open":
                        o = OpenP0.from_json(r)
                        self.open[(o.terminal, o.key)] = o
                    elif t == "ack_due":
                        tk = (str(r["terminal"]), str(r["key"]))
                        self.to_send[tk] = float(r["first"])
                        self.sent[tk] = str(r.get("via", "group"))
                        if r.get("by"):
                            self.by[tk] = str(r["by"])[:ACK_BY_MAX_BYTES]
                    elif t == "sent":
                        self.sent[(str(r["terminal"]), str(r["key"]))] = str(r.get("via", "group"))
                    elif t == "noted":
                        self.noted[str(r["key"])] = (str(r["rack"]), str(r["node"]), str(r["kind"]), float(r["after"]))
                    elif t == "known":
                        self.known[(str(r["terminal"]), str(r["key"]))] = True
                    else:
                        bad += 1
                        continue
                    n += 1
                except (KeyError, TypeError, ValueError, AttributeError):
                    bad += 1
            # a terminal the configuration no longer lists has no lane and no client: its records are dropped
            names = set(getattr(self.cfg, "terminals", {}) or {})
            if names:
                for tk in [tk for tk in self.open if tk[0] not in names]:
                    del self.open[tk]
                for tk in [tk for tk in self.to_send if tk[0] not in names]:
                    del self.to_send[tk]
        return n, bad

    # ---- counting -----------------------------------------------------------------------------------------

    def _observe(self, terminal, level, seconds):
        h = self.hist.get((terminal, level))
        if h is None:
            h = self.hist[(terminal, level)] = [0] * (len(ACK_BUCKETS) + 2)
        for i, b in enumerate(ACK_BUCKETS):
            if seconds <= b:
                h[i] += 1
        h[len(ACK_BUCKETS)] += 1
        h[len(ACK_BUCKETS) + 1] += seconds

    def _count_reject(self, terminal, reason, message):
        with self.lock:
            self.rejected[(terminal, reason)] = self.rejected.get((terminal, reason), 0) + 1
            first = self.failing.get(terminal) != reason
            if message is not None and reason != "unknown_incident":
                self.failing[terminal] = reason
        if first and message is not None:
            log.warning(
                "status_read_refused", extra={"fields": {"terminal": terminal, "reason": reason, "detail": message}}
            )
        elif reason == "unknown_incident" and first:
            log.warning(
                "status_unknown_ack",
                extra={
                    "fields": {"terminal": terminal, "reason": "an ACK for an incident this gateway never sent there"}
                },
            )

    def deadlines(self):
        """Every open P0 (shown or not) with its `shown` label, for its deadline series."""
        with self.lock:
            return [(o, o.labels_shown(self._seen_elsewhere(o))) for o in self.open.values()]

    def _seen_elsewhere(self, o):
        """A P0 not shown on its terminal: did another terminal show one of its incidents? (The history knows.)"""
        if o.shown or o.esc_shown is not None or self.history is None:
            return False
        return self.history.was_shown(o.carried)

    def metrics(self, now):
        """(histogram rows, acks, rejected, per-terminal (open count, oldest age), escalated OpenP0s), a snapshot."""
        esc = self.due_escalations(now)
        with self.lock:
            opened = {}
            for o in self.open.values():
                n, oldest = opened.get(o.terminal, (0, 0.0))
                opened[o.terminal] = (n + 1, max(oldest, now - o.since))
            return dict(self.hist), dict(self.acks), dict(self.rejected), opened, esc


def write_metrics(book, fam, lab, lines, terminals, now):
    """The acknowledgement families of /metrics (each family present even while empty: dashboards and rules
    name them). fam(name, type, help) and lab(**labels) are the gateway's writers; lines is appended to."""
    hist, acks, rejected, opened, esc = book.metrics(now)
    fam("sentinel_gateway_ack_seconds", "histogram", "From a P0 reaching a terminal to its acknowledgement there.")
    for (t, level), h in sorted(hist.items()):
        for i, b in enumerate(ACK_BUCKETS):
            lines.append(
                "sentinel_gateway_ack_seconds_bucket%s %d" % (lab(terminal=t, level=level, le=repr(float(b))), h[i])
            )
        n = len(ACK_BUCKETS)
        lines.append("sentinel_gateway_ack_seconds_bucket%s %d" % (lab(terminal=t, level=level, le="+Inf"), h[n]))
        lines.append("sentinel_gateway_ack_seconds_sum%s %.3f" % (lab(terminal=t, level=level), h[n + 1]))
        lines.append("sentinel_gateway_ack_seconds_count%s %d" % (lab(terminal=t, level=level), h[n]))
    fam(
        "sentinel_gateway_acks_total",
        "counter",
        "P0 acknowledgements learnt, by terminal and how (button: on the terminal; group; cli: sentinel-gateway ack).",
    )
    for t in terminals:
        for via in ("button", "group", "cli"):
            lines.append("sentinel_gateway_acks_total%s %d" % (lab(terminal=t, via=via), acks.get((t, via), 0)))
    fam("sentinel_gateway_p0_unacknowledged", "gauge", "P0 alarms a terminal has been sent and not acknowledged.")
    for t in terminals:
        lines.append("sentinel_gateway_p0_unacknowledged%s %d" % (lab(terminal=t), opened.get(t, (0, 0))[0]))
    fam(
        "sentinel_gateway_p0_oldest_unacknowledged_seconds",
        "gauge",
        "Age of the oldest P0 a terminal has not acknowledged (0 when none).",
    )
    for t in terminals:
        lines.append(
            "sentinel_gateway_p0_oldest_unacknowledged_seconds%s %.1f" % (lab(terminal=t), opened.get(t, (0, 0.0))[1])
        )
    fam(
        "sentinel_gateway_p0_escalation",
        "gauge",
        "1 per P0 not acknowledged within its route's escalate_after_s (the SentinelP0NotAcknowledged rule).",
    )
    for o in esc:
        lines.append("sentinel_gateway_p0_escalation%s 1" % _escalation_labels(lab, o, o.esc_shown))
    fam(
        "sentinel_gateway_p0_deadline_timestamp_seconds",
        "gauge",
        "When each open P0 escalates (Unix time), shown or not: Prometheus pages on it while the gateway is down.",
    )
    for o, shown in book.deadlines():
        lines.append(
            "sentinel_gateway_p0_deadline_timestamp_seconds%s %.3f" % (_escalation_labels(lab, o, shown), o.deadline)
        )
    fam(
        "sentinel_gateway_status_reads_rejected_total",
        "counter",
        "Terminal status reads not taken (garbage, too_large, unknown_incident, clock_off, unreachable).",
    )
    for t in terminals:
        for r in REJECTS:
            lines.append(
                "sentinel_gateway_status_reads_rejected_total%s %d"
                % (lab(terminal=t, reason=r), rejected.get((t, r), 0))
            )


def _escalation_labels(lab, o, shown):
    # shown="none": no terminal showed it, nobody has seen it (the rule's summary says so)
    return lab(terminal=o.terminal, incident=o.key, rack=o.rack, node_host=o.node, event_type=o.kind, shown=shown)


def _fields(**kw):
    return {"fields": kw}


class AckPoller:
    """Reads each terminal's status page every poll_s while a P0 it was sent is open there (nothing otherwise), and
    sends the ACK group's signed ACKs. One thread per gateway ticking every poll_s, and a small pool beside it: each
    read and each ACK is a job of its own, a terminal is read again only once its last read is over, and what a
    read returns is taken, and the ACKs it makes due are sent, as soon as it is in. So a terminal that hangs, or
    drips its page a byte a second, delays only its own read and its own ACK (each bounded by the terminal's
    timeout in total), never another's. Before an ACK is sent the member's page is read: an ACK already applied
    there (by an HA peer of this gateway) is not sent again. Escalation goes on by the clock regardless."""

    def __init__(self, book, clients, *, poll_s=1.0, clock=time.time, mono=time.monotonic):
        self.book = book
        self.clients = clients  # terminal name -> AlarmClient (status(), ack())
        self.poll_s = poll_s
        self.clock = clock
        self.mono = mono
        self._stop = threading.Event()
        self._thread = None
        self._pool = None  # concurrent.futures.ThreadPoolExecutor, made on first use
        self._mu = threading.Lock()
        self._reading = set()  # terminals whose read is in flight
        self._acking = set()  # (terminal, key) ACKs in flight

    def start(self):
        self._thread = threading.Thread(target=self._run, name="acks", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self):
        while not self._stop.wait(self.poll_s):
            try:
                self.tick()
            except Exception as e:  # noqa: BLE001 - the poller must outlive any one failure
                log.error("ack_poll_error", extra=_fields(error="%s: %s" % (type(e).__name__, e)))

    def tick(self):
        """One poll, without waiting for it: the reads not in flight are started, the due ACKs not in flight sent."""
        pool = self._executor()
        for name, read in self._reads():
            with self._mu:
                if name in self._reading:
                    continue
                self._reading.add(name)
            pool.submit(self._read_job, name, read)
        self._send_due()
        self.book.due_escalations(self.clock())

    def poll_once(self):
        """One poll, waiting until its reads and the ACKs they made due are done (tests, the bench)."""
        from concurrent.futures import wait

        pool = self._executor()
        jobs = [pool.submit(self._read_job, name, read) for name, read in self._reads()]
        wait(jobs)
        while True:
            with self._mu:
                busy = bool(self._acking)
            if not busy:
                break
            time.sleep(0.01)
        self._send_due(wait_done=True)
        self.book.due_escalations(self.clock())

    def _reads(self):
        out = []
        for name in self.book.terminals_open():
            read = getattr(self.clients.get(name), "status_page", None)
            if read is not None:
                out.append((name, read))
        return out

    def _executor(self):
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=max(2, 2 * len(self.clients)), thread_name_prefix="acks")
        return self._pool

    def _read_job(self, name, read):
        try:
            self._took(name, *self._read(read))
        finally:
            with self._mu:
                self._reading.discard(name)
        self._send_due()

    def _send_due(self, *, wait_done=False):
        jobs = []
        for due in self.book.group_due(self.clock()):
            with self._mu:
                if due in self._acking:
                    continue
                self._acking.add(due)
            jobs.append(self._executor().submit(self._ack_job, due))
        if wait_done and jobs:
            from concurrent.futures import wait

            wait(jobs)

    def _ack_job(self, due):
        try:
            ok = self._ack(*due)
            if ok is not None:
                self._acked(due[0], due[1], ok)
        finally:
            with self._mu:
                self._acking.discard(due)

    @staticmethod
    def _read(read):
        try:
            return read(STATUS_MAX), None
        except Exception as e:  # noqa: BLE001 - any failure to read is the terminal's "unreachable"
            return None, "%s: %s" % (type(e).__name__, e)

    def _took(self, name, body, error):
        r = self.book.read_status(name, body, self.clock(), error=error)
        for a in r.acked:
            self._logged(a)

    def _ack(self, terminal, key):
        """Send one ACK; True when the terminal took it, None when its page showed it applied already (an HA
        peer sent it: nothing is sent), False when it failed."""
        client = self.clients[terminal]
        read = getattr(client, "status_page", None)
        if read is not None:
            body, error = self._read(read)
            if error is None:
                self._took(terminal, body, None)
                if (terminal, key) not in self.book.group_due(self.clock()):
                    log.info("group_ack_applied_already", extra=_fields(terminal=terminal, incident=key))
                    return None
        try:
            client.ack(key, id=self.book.ack_id(terminal, key), by=self.book.ack_by(terminal, key))
            return True
        except Exception as e:  # noqa: BLE001 - logged; retried on the next poll
            log.warning("group_ack_failed", extra=_fields(terminal=terminal, incident=key, error=str(e)))
            return False

    def _acked(self, terminal, key, ok):
        a = self.book.group_sent(terminal, key, self.clock(), ok=ok)
        if a is not None:
            self._logged(a)

    @staticmethod
    def _logged(a):
        log.info(
            "p0_acknowledged",
            extra=_fields(incident=a.key, terminal=a.terminal, after_s=round(a.after_s, 1), via=a.via),
        )
