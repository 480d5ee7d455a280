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

from .delivery_queue import ItemKind
from .wire import wire_key

log = logging.getLogger("sentinel.gateway")

# Time-to-acknowledge histogram buckets, seconds: a person walking to the box takes tens of seconds to minutes.
ACK_BUCKETS = (5, 15, 30, 60, 120, 300, 600, 1800, 3600)
STATUS_MAX = 65536  # a status page larger than this is not a terminal's: refused unread past it
CLOCK_SKEW_S = 300  # a terminal whose clock is further off than this is said to be off (its ACKs still count)
MAX_OPEN = 4096  # open P0s remembered per gateway: a storm of distinct P0s forgets the oldest first
MAX_NOTED = 4096  # labels of P0 incidents queued as their own alarm, not yet delivered
REJECTS = ("garbage", "too_large", "unknown_incident", "clock_off", "unreachable")


class OpenP0:
    """One P0 alarm a terminal has been sent and has not acknowledged."""

    __slots__ = ("terminal", "key", "carried", "since", "rack", "node", "kind", "escalate_after", "escalated")

    def __init__(self, terminal, key, carried, since, *, rack, node, kind, escalate_after):
        self.terminal = terminal
        self.key = key  # the key as the terminal knows it (wire_key)
        self.carried = set(carried)  # the incidents it stands for: it closes when they have all resolved
        self.since = since
        self.rack = rack
        self.node = node
        self.kind = kind
        self.escalate_after = escalate_after
        self.escalated = False


def _from_key(key, cfg):
    """An alarm whose incidents were not noted (a summary, or the memory was full): a GPU incident's key is
    rack:host:type, an Alertmanager one says nothing of where."""
    parts = key.split(":") if not key.startswith("am:") else ()
    if len(parts) == 3:
        rack, node, kind = parts
        return rack, node, kind, cfg.escalate_after({"rack": rack, "host": node, "event_type": kind})
    return "", "", "", cfg.escalate_after({})


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
    """The gateway's record of open P0s and ACKs. Thread-safe; every method takes `now` (wall-clock seconds)."""

    def __init__(self, config):
        self.cfg = config
        self.lock = threading.Lock()
        self.open: OrderedDict = OrderedDict()  # (terminal, key) -> OpenP0
        self.noted: OrderedDict = OrderedDict()  # incident key -> (rack, node, kind, escalate_after)
        self.hist = {}  # (terminal, level) -> [bucket counts..., +Inf count, sum]
        self.acks = {}  # (terminal, via) -> count
        self.rejected = {}  # (terminal, reason) -> count
        self.failing = {}  # terminal -> the reason its last read was refused (logged once per episode)
        self.unknown = {}  # terminal -> acknowledged keys this gateway never sent there (counted once each)
        self.known: OrderedDict = OrderedDict()  # (terminal, key) this gateway sent a P0 or a group ACK for
        self.sent = set()  # (terminal, key): group ACKs sent or due (not a new ACK when read back)
        self.to_send: OrderedDict = OrderedDict()  # (terminal, key) -> first try: group ACKs not yet taken

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

    def resolved(self, incident_key):
        """The incident resolved: every open P0 that carried only resolved incidents closes (and its escalation)."""
        with self.lock:
            self.noted.pop(incident_key, None)
            for k, o in list(self.open.items()):
                o.carried.discard(incident_key)
                if not o.carried:
                    del self.open[k]

    def delivered(self, terminal, item, now):
        """A terminal accepted an alarm: a P0 opens (once per terminal and key); a recovery closes its incidents."""
        if item.kind == ItemKind.RECOVERY:
            for key in item.carried:
                self.resolved(key)
            return
        if item.level != P0:
            return
        key = wire_key(item.key)
        with self.lock:
            if (terminal, key) in self.open:
                return
            info = None
            for c in item.carried:
                info = self.noted.get(c)
                if info is not None:
                    break
            self._know(terminal, key)
            if info is None:
                info = _from_key(item.key, self.cfg)
            rack, node, kind, after = info
            self.open[(terminal, key)] = OpenP0(
                terminal, key, item.carried or [item.key], now, rack=rack, node=node, kind=kind, escalate_after=after
            )
            while len(self.open) > MAX_OPEN:
                self.open.popitem(last=False)

    # ---- what a terminal says ---------------------------------------------------------------------------------

    def read_status(self, terminal, body, now, *, error=None):
        """One read of terminal's /api/v1/status: its bytes (None with error when no answer came). Returns a
        Reading; a page that is not a terminal's status changes nothing and is counted once per episode."""
        if error is not None:
            return self._reject(terminal, "unreachable", error)
        if len(body) > STATUS_MAX:
            return self._reject(terminal, "too_large", "status page over %d bytes" % STATUS_MAX)
        try:
            st = json.loads(body.decode("utf-8"))
            acked = st["mute"]["acknowledged"]
            term_now = st["now"]
            if not (isinstance(acked, list) and all(isinstance(k, str) for k in acked)):
                raise TypeError("mute.acknowledged is not a list of keys")
            if isinstance(term_now, bool) or not isinstance(term_now, (int, float)):
                raise TypeError("now is not a number")
        except (ValueError, UnicodeDecodeError, KeyError, TypeError) as e:
            return self._reject(terminal, "garbage", "not a terminal status page (%s)" % type(e).__name__)
        out = Reading()
        if abs(term_now - now) > CLOCK_SKEW_S:
            # Its ACK list does not depend on its clock: counted and said, and used.
            out.rejected = "clock_off"
            self._count_reject(terminal, "clock_off", "its clock is %+d s off the gateway's" % (term_now - now))
        elif self.failing.pop(terminal, None) is not None:
            log.info("status_read_ok", extra={"fields": {"terminal": terminal}})
        acked = set(acked)
        with self.lock:
            group = self.cfg.ack_group_of(terminal)
            for (t, key), o in list(self.open.items()):
                if t != terminal or key not in acked:
                    continue
                del self.open[(t, key)]
                if (t, key) in self.sent:
                    self.sent.discard((t, key))
                    via = "group"
                else:
                    via = "button"
                    for other in group:
                        if other != terminal and (other, key) not in self.sent:
                            self.sent.add((other, key))
                            self._know(other, key)
                            self.to_send[(other, key)] = now
                after = max(0.0, now - o.since)
                self._observe(t, "P0", after)
                self.acks[(t, via)] = self.acks.get((t, via), 0) + 1
                out.acked.append(Acked(t, key, after, "P0", via, o))
            seen = self.unknown.setdefault(terminal, set())
            new_unknown = [k for k in acked if (terminal, k) not in self.known and k not in seen]
            for k in new_unknown:
                if len(seen) < 1024:
                    seen.add(k)
            out.to_send = list(self.to_send)
        for _k in new_unknown:
            self._count_reject(terminal, "unknown_incident", None)
        return out

    def _know(self, terminal, key):
        self.known[(terminal, key)] = True
        self.known.move_to_end((terminal, key))
        while len(self.known) > MAX_NOTED:
            self.known.popitem(last=False)

    def group_due(self, now):
        """The group ACKs still to send, as (terminal, key); one that has failed for 15 minutes is given up."""
        with self.lock:
            for k, first in list(self.to_send.items()):
                if now - first > 900:
                    del self.to_send[k]
                    self.sent.discard(k)
            return list(self.to_send)

    def group_sent(self, terminal, key, now, *, ok):
        """The group ACK for key reached terminal (ok), or did not: then it is tried again on the next read."""
        with self.lock:
            if not ok:
                return None  # still in to_send: tried again on the next poll
            self.to_send.pop((terminal, key), None)
            o = self.open.get((terminal, key))
            if o is None:
                return None
            del self.open[(terminal, key)]
            after = max(0.0, now - o.since)
            self._observe(terminal, "P0", after)
            self.acks[(terminal, "group")] = self.acks.get((terminal, "group"), 0) + 1
            return Acked(terminal, key, after, "P0", "group", o)

    # ---- what is due ----------------------------------------------------------------------------------------

    def terminals_open(self):
        with self.lock:
            return sorted({t for (t, _k) in self.open})

    def due_escalations(self, now):
        """The open P0s past their terminal's route's escalate_after_s (newly escalated ones are logged)."""
        out = []
        with self.lock:
            for o in self.open.values():
                if now - o.since >= o.escalate_after:
                    if not o.escalated:
                        o.escalated = True
                        log.warning(
                            "p0_escalated",
                            extra={
                                "fields": {
                                    "incident": o.key,
                                    "terminal": o.terminal,
                                    "after_s": round(now - o.since, 1),
                                    "rack": o.rack,
                                    "node": o.node,
                                    "type": o.kind,
                                }
                            },
                        )
                    out.append(o)
        return out

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

    def _reject(self, terminal, reason, message):
        self._count_reject(terminal, reason, message)
        return Reading(rejected=reason)

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
    fam("sentinel_gateway_acks_total", "counter", "P0 acknowledgements learnt, by terminal and how (button, group).")
    for t in terminals:
        for via in ("button", "group"):
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
        lines.append(
            "sentinel_gateway_p0_escalation%s 1"
            % lab(terminal=o.terminal, incident=o.key, rack=o.rack, node_host=o.node, event_type=o.kind)
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


def _fields(**kw):
    return {"fields": kw}


class AckPoller:
    """Reads each terminal's status page every poll_s while a P0 it was sent is open there (nothing otherwise), and
    sends the ACK group's signed ACKs. One thread per gateway, and a small pool beside it while two or more terminals
    are read at once: the reads and the group's ACKs run side by side, so a terminal that does not answer delays only
    its own read and its own ACK (each has the terminal's timeout), never another's; what a read returns is taken,
    and the ACKs it makes due are sent, as soon as it is in. Escalation goes on by the clock regardless."""

    def __init__(self, book, clients, *, poll_s=1.0, clock=time.time, mono=time.monotonic):
        self.book = book
        self.clients = clients  # terminal name -> AlarmClient (status(), ack())
        self.poll_s = poll_s
        self.clock = clock
        self.mono = mono
        self._stop = threading.Event()
        self._thread = None
        self._pool = None  # concurrent.futures.ThreadPoolExecutor, made when two terminals are first read at once

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
                self.poll_once()
            except Exception as e:  # noqa: BLE001 - the poller must outlive any one failure
                log.error("ack_poll_error", extra=_fields(error="%s: %s" % (type(e).__name__, e)))

    def poll_once(self):
        reads = []
        for name in self.book.terminals_open():
            read = getattr(self.clients.get(name), "status_page", None)
            if read is not None:
                reads.append((name, read))
        if len(reads) < 2:
            for name, read in reads:
                self._took(name, *self._read(read))
            self._send_group_acks()
        else:
            from concurrent.futures import FIRST_COMPLETED, wait

            pool = self._executor()
            pending = {pool.submit(self._read, read): name for name, read in reads}
            acks = {}
            tried = set()  # group ACKs sent in this poll (a failed one is tried again in the next)
            while pending or acks:
                done, _ = wait(set(pending) | set(acks), return_when=FIRST_COMPLETED)
                for f in done:
                    if f in pending:
                        self._took(pending.pop(f), *f.result())
                        for due in self.book.group_due(self.clock()):
                            if due not in tried:
                                tried.add(due)
                                acks[pool.submit(self._ack, *due)] = due
                    else:
                        other, key = acks.pop(f)
                        self._acked(other, key, f.result())
        self.book.due_escalations(self.clock())

    def _executor(self):
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=max(2, 2 * len(self.clients)), thread_name_prefix="acks")
        return self._pool

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

    def _send_group_acks(self):
        for other, key in self.book.group_due(self.clock()):
            self._acked(other, key, self._ack(other, key))

    def _ack(self, terminal, key):
        """Send one group ACK; True when the terminal took it."""
        try:
            self.clients[terminal].ack(key)
            return True
        except Exception as e:  # noqa: BLE001 - logged; retried on the next read of the acknowledging terminal
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
