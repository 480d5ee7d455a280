"""The incident history: what fired, when each terminal showed it, who acknowledged it and how (terminal: its
button or page; group: sent by this gateway from another member; cli: `sentinel-gateway ack`), when it escalated
and when it resolved. Bounded (the newest MAX_INCIDENTS), kept in the ACK ledger under state_dir (ledger.py), served
as GET /api/v1/incidents (token-protected like ingest) and read by `sentinel-gateway incidents`.

The route's handler takes values and returns (status, answer); application.py authenticates and decodes.
"""

from __future__ import annotations

from collections import OrderedDict

from sentinel_core.alarm import LEVEL_NAMES, NORMAL, P0

MAX_INCIDENTS = 1000
VIA = ("terminal", "group", "cli")


class IncidentHistory:
    """Thread-safe under `cond` (the AckBook's condition, which the ledger's persister waits on); lock: the lock
    cond was made with, which folded() takes directly (a storm calls it per incident; `with cond` costs two Python
    calls more)."""

    def __init__(self, cond, *, lock=None, max_incidents=MAX_INCIDENTS):
        self.cond = cond
        self._lock = lock if lock is not None else cond
        self.max = max_incidents
        self.gen = 0
        self.items: OrderedDict = OrderedDict()  # incident key -> record (dict)
        self._tally_keys: dict = {}  # event type -> "folded:<type>" (a handful of types)

    def _touch(self):
        # the ledger's thread saves soon; a storm's folded incidents do not come here one by one (folded())
        self.gen += 1
        self.cond.notify_all()

    def fired(self, inc, terminals, now):
        """An incident taken for these terminals (a P0 or P1; a recovery is resolved())."""
        if inc.recovery or inc.level <= NORMAL:
            return
        with self.cond:
            r = self.items.get(inc.key)
            if r is None or r.get("resolved") is not None:
                r = self.items[inc.key] = {
                    "key": inc.key,
                    "level": LEVEL_NAMES[inc.level],
                    "rack": inc.rack or "",
                    "node": inc.host or "",
                    "type": inc.kind or "",
                    "source": inc.source,
                    "fired": now,
                    "terminals": [],
                    "shown": {},
                    "acknowledged": {},
                    "escalated": {},
                    "resolved": None,
                }
            for t in terminals:
                if t not in r["terminals"]:
                    r["terminals"].append(t)
            self.items.move_to_end(inc.key)
            while len(self.items) > self.max:
                self.items.popitem(last=False)
            self._touch()

    def folded(self, inc, terminals, now):
        """An incident folded into a summary (a storm): counted on one record per event type, "folded:<TYPE>", not
        recorded alone, so a storm of thousands neither evicts tonight's other incidents nor rewrites the ledger per
        event (the count reaches the disk with the next write)."""
        if inc.recovery or inc.level <= NORMAL:
            return
        key = self._tally_keys.get(inc.kind)
        if key is None:
            key = self._tally_keys[inc.kind] = "folded:%s" % (inc.kind or "")
        with self._lock:
            r = self.items.get(key)
            if r is None or r["resolved"] is not None:
                r = self.items[key] = {
                    "key": key,
                    "level": LEVEL_NAMES[inc.level],
                    "rack": "",
                    "node": "",
                    "type": inc.kind or "",
                    "source": inc.source,
                    "fired": now,
                    "terminals": list(terminals),
                    "shown": {},
                    "acknowledged": {},
                    "escalated": {},
                    "resolved": None,
                    "folded": 0,
                }
                self._touch()
            r["folded"] += 1
            r["last"] = now
            if inc.level == P0 and r["level"] != "P0":  # levels here are P1 or P0
                r["level"] = "P0"

    def _each(self, keys, fn):
        with self.cond:
            hit = False
            for k in keys:
                r = self.items.get(k)
                if r is not None:
                    fn(r)
                    hit = True
            if hit:
                self._touch()

    def shown(self, keys, terminal, now):
        self._each(keys, lambda r: r["shown"].setdefault(terminal, now))

    def acked(self, keys, terminal, via, now):
        self._each(keys, lambda r: r["acknowledged"].setdefault(terminal, {"at": now, "via": via}))

    def escalated(self, keys, terminal, now, *, shown):
        self._each(keys, lambda r: r["escalated"].setdefault(terminal, {"at": now, "shown": shown}))

    def resolved(self, key, now):
        def done(r):
            if r["resolved"] is None:
                r["resolved"] = now

        self._each([key], done)

    def was_shown(self, keys):
        """Whether any terminal showed one of these incidents. Called under cond (the book's lock)."""
        for k in keys:
            r = self.items.get(k)
            if r is not None and r["shown"]:
                return True
        return False

    def records(self):
        with self.cond:
            return [dict(r, t="incident") for r in self.items.values()]

    def restore(self, records):
        n = bad = 0
        with self.cond:
            for r in records:
                try:
                    rec = {
                        "key": str(r["key"]),
                        "level": str(r["level"]),
                        "rack": str(r.get("rack", "")),
                        "node": str(r.get("node", "")),
                        "type": str(r.get("type", "")),
                        "source": str(r.get("source", "")),
                        "fired": float(r["fired"]),
                        "terminals": [str(t) for t in r.get("terminals", [])],
                        "shown": {str(k): float(v) for k, v in dict(r.get("shown", {})).items()},
                        "acknowledged": {
                            str(k): {"at": float(v["at"]), "via": str(v["via"])}
                            for k, v in dict(r.get("acknowledged", {})).items()
                        },
                        "escalated": {
                            str(k): {"at": float(v["at"]), "shown": str(v.get("shown", "true"))}
                            for k, v in dict(r.get("escalated", {})).items()
                        },
                        "resolved": None if r.get("resolved") is None else float(r["resolved"]),
                    }
                    if r.get("folded") is not None:  # a storm's tally (folded())
                        rec["folded"] = int(r["folded"])
                        rec["last"] = float(r.get("last", rec["fired"]))
                except (KeyError, TypeError, ValueError, AttributeError):
                    bad += 1
                    continue
                self.items[rec["key"]] = rec
                n += 1
            while len(self.items) > self.max:
                self.items.popitem(last=False)
        return n, bad

    def listing(self, *, open_only=False):
        """Newest first; open: not resolved and not acknowledged on every terminal it was for."""
        with self.cond:
            out = [dict(r, open=is_open(r)) for r in reversed(self.items.values())]
        return [r for r in out if r["open"]] if open_only else out


def is_open(r):
    if r["resolved"] is not None or r.get("folded") is not None:
        return False  # a storm's tally is no incident of its own: its summary alarm is
    if r["level"] != "P0":
        return True
    return not r["terminals"] or any(t not in r["acknowledged"] for t in r["terminals"])


# ---- the HTTP route (server.py calls these; they take values and return values) ---------------------------------

PATH = "/api/v1/incidents"
ACK_PATH = "/api/v1/incidents/ack"


PATHS = frozenset((PATH, ACK_PATH))


def answer(gw, method, path, body_obj, *, now):
    """(status, answer) for GET /api/v1/incidents and POST /api/v1/incidents/ack {"key": ...}. Authentication is
    the caller's (the ingest token)."""
    if path == PATH:
        if method != "GET":
            return 405, {"ok": False, "error": "method_not_allowed", "message": "use GET"}
        items = gw.history.listing()
        return 200, {"ok": True, "now": now, "incidents": items}
    if method != "POST":
        return 405, {"ok": False, "error": "method_not_allowed", "message": "use POST"}
    key = body_obj.get("key") if isinstance(body_obj, dict) else None
    if not isinstance(key, str) or not key or len(key) > 1024:
        return 400, {"ok": False, "error": "bad_key", "message": 'the body must be {"key": "<incident key>"}'}
    sent = gw.acks.acknowledge(key, now, via="cli")
    if not sent:
        return 404, {
            "ok": False,
            "error": "not_open",
            "message": "incident %s is not open on any terminal (already acknowledged, resolved, or unknown)" % key,
        }
    return 202, {"ok": True, "key": key, "terminals": sent}
