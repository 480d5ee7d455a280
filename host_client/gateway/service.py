"""The gateway service: events in -> debounce -> route -> per-terminal lanes -> delivery workers.

Independent of HTTP (application.py maps its outcomes to HTTP statuses, behind the front in server.py), so tests and
the bench can drive it directly. Its log is logs.py's, its /metrics page metrics.py's; a lane's threads are
persist.py's and delivery.py's.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
import time
from functools import partial

from host_client.client import AlarmClient
from sentinel_core.alarm import LEVEL_NAMES, P0

from .acks import AckBook, AckPoller
from .alertmanager import parse_webhook
from .debounce import Debouncer
from .delivery import Worker
from .events import EVENT_TYPES, OTHER_TYPE, EventError, parse_event, phrase, severity
from .front_status import FrontStatus
from .history import IncidentHistory
from .incident import gpu_incident
from .lane import Lane, Outcome
from .ledger import FILE as LEDGER_FILE
from .ledger import LedgerPersister
from .ledger import restore as restore_ledger
from .logs import lane_log, log_event, worker_log
from .metrics import metrics_text
from .persist import PendingStore, Persister
from .resolved import ResolvedMemory
from .wire import RfcCompatTransport

MAX_BATCH = 1000
# What became of a request, with its answer: taken (the events are in, or suppressed), malformed (not the shape a
# request has), invalid (the shape, but a field breaks a rule), unauthorized (no accepted token), unavailable (not
# durable now: the sender retries). application.py maps each to its HTTP status.
TAKEN, MALFORMED, INVALID, UNAUTHORIZED, UNAVAILABLE = "taken", "malformed", "invalid", "unauthorized", "unavailable"
_ALONE = Outcome.ALONE
_PHRASES: dict = {}  # event type -> its (zh, en) summary phrase
# the events_in / suppressed counters' key of a GPU event, by its type: ("gpu_event", metric type)
_GPU_COUNT_KEYS = {t: ("gpu_event", t) for t in EVENT_TYPES}
_GPU_COUNT_OTHER = ("gpu_event", OTHER_TYPE)


class Gateway:
    def __init__(self, config, clients=None, clock=time.time, mono=time.monotonic, on_delivered=None):
        self.cfg = config
        self.clock = clock
        self.mono = mono
        self.boot = os.urandom(3).hex()  # not secrets.token_hex: the same bytes, without 0.8 MB of imports
        self.debouncer = Debouncer(config.debounce_window, config.debounce_max_keys)
        self.lock = threading.Lock()
        self.started_at = clock()
        self.events_in = {}  # (source, type) -> n
        self.rejected = {}  # (source, code) -> n
        self.suppressed = {}  # (source, type) -> n
        self.unrouted = 0
        self.stale = {}  # source -> firings dropped because their incident was resolved (an HA peer's copy)
        self.not_durable = 0  # answers 503 because the queue could not be saved in time
        self.resolved = ResolvedMemory(hold_s=config.resolved_hold_s, max_keys=config.debounce_max_keys)
        # GPU events: (bucket, n) per key that recovered, so a fault that returns within the same id window gets a
        # new ident (key@bucket#n) and is not taken for a copy of the first by the terminal
        self._refire = {}
        self.id_window = config.debounce_window if config.debounce_window >= 1 else 120.0
        # ingest auth: SHA-256 of each accepted token, compared in constant time (equal lengths, compare_digest)
        self._token_digests = [hashlib.sha256(t.reveal()).digest() for t in getattr(config, "ingest_tokens", [])]
        self.auth_required = bool(self._token_digests)
        self.lanes = {}
        self.workers = {}
        self.persisters = {}
        self.restore_errors = []
        self.acks = AckBook(config)
        self.history = self.acks.history = IncidentHistory(self.acks.cond, lock=self.acks.lock)
        self.ledger = None  # LedgerPersister: the ACK ledger and the history under state_dir
        term_clients = {}
        user_delivered = on_delivered

        def delivered(terminal, item, ack):
            self.acks.delivered(terminal, item, self.clock())
            if user_delivered is not None:
                user_delivered(terminal, item, ack)

        if config.state_dir:
            os.makedirs(config.state_dir, exist_ok=True)
            path = os.path.join(config.state_dir, LEDGER_FILE)
            restore_ledger(path, self.acks, self.history)
            self.ledger = LedgerPersister(path, self.acks, self.history)
        for name, t in config.terminals.items():
            lane = Lane(
                name,
                language=t.language or config.language,
                group_by=config.group_by,
                window=config.group_window,
                cluster_threshold=config.cluster_threshold,
                grouping=config.grouping,
                queue_size=t.queue_size or config.queue_size,
                deadlines=config.deadlines,
                rate_burst=t.rate_burst or config.rate_burst,
                rate_interval=config.rate_interval if t.rate_interval_s is None else t.rate_interval_s,
                max_tracked=config.max_tracked,
                track_s=config.track_s,
                id_window=self.id_window,
                log=lane_log,
            )
            if clients and name in clients:
                client = clients[name]
            else:
                client = AlarmClient(
                    t.url,
                    t.key_id,
                    t.secret.reveal(),
                    timeout=t.timeout_s or config.timeout_s,
                    retries=0,
                    transport=RfcCompatTransport() if t.compat == "rfc" else None,
                )
            store = None
            if config.state_dir:
                store = PendingStore(os.path.join(config.state_dir, "pending-%s.json" % name))
                try:
                    data = store.load()
                except ValueError as e:
                    self.restore_errors.append(str(e))
                    log_event("pending_unreadable", logging.ERROR, terminal=name, error=str(e))
                    data = None
                if data:
                    n = lane.restore(data)
                    if n:
                        log_event(
                            "pending_restored", terminal=name, alarms=n, p0=sum(1 for x in lane.items if x.level == 2)
                        )
            self.lanes[name] = lane
            if store is not None:
                self.persisters[name] = Persister(lane, store, log=worker_log)
            term_clients[name] = client
            self.workers[name] = Worker(
                lane,
                client,
                backoff_initial_s=config.backoff_initial_s,
                backoff_max_s=config.backoff_max_s,
                heartbeat_s=t.heartbeat_s,
                log=worker_log,
                clock=clock,
                mono=mono,
                on_delivered=delivered,
                store=store,
            )
        self.ack_poller = AckPoller(self.acks, term_clients, poll_s=config.status_poll_s, clock=clock, mono=mono)
        self.remedy = None  # [remedy]: a lane of its own to sentinel-remedy, beside the terminals' (remedy_lane.py)
        if getattr(config, "remedy", None) is not None:
            from .remedy_lane import RemedyLane, gateway_url

            self.remedy = RemedyLane(
                config.remedy,
                gateway_url=gateway_url(config.host, config.port),
                backoff_initial_s=config.backoff_initial_s,
                backoff_max_s=config.backoff_max_s,
            )

    # ---- lifecycle --------------------------------------------------------------------------------------

    def start(self):
        if self.ledger is not None:
            self.ledger.start()
        for p in self.persisters.values():
            p.start()
        for w in self.workers.values():
            w.start()
        self.ack_poller.start()
        if self.remedy is not None:
            self.remedy.start()
        log_event("gateway_started", terminals=sorted(self.lanes), listen="%s:%d" % (self.cfg.host, self.cfg.port))

    def stop(self):
        self.ack_poller.stop()
        if self.remedy is not None:
            self.remedy.stop()
        for w in self.workers.values():
            w.stop()
        for p in self.persisters.values():
            p.stop()
        if self.ledger is not None:
            self.ledger.stop()

    # ---- ingest -----------------------------------------------------------------------------------------

    def _count(self, d, k):
        d[k] = d.get(k, 0) + 1

    def refuse(self, source, code, message, peer=None) -> dict:
        """A request refused before its body was parsed (auth, size, encoding, JSON): counted like any rejection;
        returns the answer. peer: a callable that names the client ("127.0.0.1:50412"), which the HTTP front hands
        over with each request and only a refusal asks."""
        with self.lock:
            self._count(self.rejected, (source, code))
        client = peer() if peer is not None else None
        log_event("event_rejected", logging.INFO, source=source, client=client, code=code, message=message)
        return {"ok": False, "error": code, "message": message}

    def reject(self, source, err: EventError, peer=None):
        """(MALFORMED or INVALID, answer) for a body that is not a valid event, counted."""
        return MALFORMED if err.status == 400 else INVALID, self.refuse(source, err.code, str(err), peer)

    def check_auth(self, source, header, peer=None) -> dict | None:
        """None when the request may ingest: no token is configured, or its Authorization header is
        "Bearer <one of the tokens>". Else the refusal's answer (UNAUTHORIZED), counted as a rejection. Neither the
        token sent nor the ones configured ever reach an answer or a log line."""
        if not self._token_digests:
            return None
        if not header:
            return self.refuse(
                source,
                "auth_required",
                "this gateway's ingest requires an Authorization: "
                "Bearer <token> header ([ingest] token_env / token_file)",
                peer,
            )
        scheme, _, cred = header.strip().partition(" ")
        cred = cred.strip()
        if scheme.lower() != "bearer" or not cred:
            return self.refuse(source, "auth_scheme", "the Authorization header must be Bearer <token>", peer)
        d = hashlib.sha256(cred.encode("utf-8", "surrogateescape")).digest()
        ok = False
        for t in self._token_digests:  # every token compared: the time does not say which one matched
            ok |= hmac.compare_digest(d, t)
        if not ok:
            return self.refuse(source, "auth_invalid", "the bearer token is not one this gateway accepts", peer)
        return None

    def tidy(self) -> int:
        """Forget what is worth nothing any more, without waiting for the next event to prune it (after a flood
        none may come): debounce keys past their window, resolved incidents past resolved_hold_s, re-fire counts
        of id windows gone by, closed groups and expired tracked incidents of each lane. Returns how many entries
        went. The front calls it about once a second (application.py's tick)."""
        now = self.clock()
        with self.lock:
            n = self.debouncer.prune(self.mono()) + self.resolved.prune(now)
            if self._refire:
                b = int(now // self.id_window)
                before = len(self._refire)
                self._refire = {k: v for k, v in self._refire.items() if v[0] >= b - 1}
                n += before - len(self._refire)
        for lane in self.lanes.values():
            n += lane.tidy(now)
        return n

    def persist_broken(self):
        """The reason no new event can be taken durably now (a persister whose last save failed), or None."""
        for p in self.persisters.values():  # on every request: the names only once one is broken
            if p.broken:
                for name, p in self.persisters.items():
                    if p.broken:
                        return "pending queue of terminal %s cannot be saved: %s" % (name, p.last_error)
        return None

    def _unavailable(self, source, reason):
        with self.lock:
            self.not_durable += 1
        log_event("event_not_durable", logging.ERROR, source=source, reason=reason)
        return UNAVAILABLE, {"ok": False, "error": "persist_failed", "message": reason + "; retry later"}

    def gpu_event(self, body, waits=None, peer=None):
        """One probe event, or a JSON array of up to MAX_BATCH (a node reporting its GPUs at once).
        Returns (outcome, JSON answer); a batch is TAKEN with one result per event, in order. While a
        terminal's queue cannot be saved, every event is answered 503 (the sender retries) and changes nothing:
        nothing is answered 200 that a crash could lose. waits: a list to collect (persister, gen) in instead of
        blocking until they are on disk (the front waits for them, then answers; see application.py). peer: names
        the client in a refusal's log line (refuse())."""
        broken = self.persist_broken()
        if broken:
            return self._unavailable("gpu_event", broken)
        if isinstance(body, list):
            return self._batch(body, waits, peer)
        verdict, answer, inc = self._event(body, peer)
        if inc is not None:
            routed, durable = self._dispatch([inc], waits)
            if not durable:
                return self._unavailable("gpu_event", "the pending queue was not saved in time")
            answer["terminals"] = routed[0]
        return verdict, answer

    def _batch(self, body, waits, peer):
        # a method of its own: its comprehension over self would make every gpu_event call build a cell for self
        if not body or len(body) > MAX_BATCH:
            return self.reject(
                "gpu_event",
                EventError("bad_batch", "a batch is a JSON array of 1..%d events" % MAX_BATCH, 422 if body else 400),
                peer,
            )
        results = [self._event(b, peer) for b in body]
        incs = [r[2] for r in results if r[2] is not None]
        if incs:
            routed, durable = self._dispatch(incs, waits)
            if not durable:
                return self._unavailable("gpu_event", "the pending queue was not saved in time")
            i = 0
            for r in results:
                if r[2] is not None:
                    r[1]["terminals"] = routed[i]
                    i += 1
        answers = [r[1] for r in results]
        return TAKEN, {
            "ok": all(r[0] == TAKEN for r in results),
            "results": answers,
            "rejected": sum(1 for r in results if r[0] != TAKEN),
        }

    def _event(self, body, peer=None):
        try:
            ev = parse_event(body, accept_unknown=self.cfg.accept_unknown)
        except EventError as e:
            verdict, answer = self.reject("gpu_event", e, peer)
            return verdict, answer, None
        # The event's attributes read once, the metric's key looked up, the answer built in one literal per
        # outcome (same keys, same order): each saves a call or an allocation on every event of a storm.
        level = severity(ev)
        recovery = ev.recovers is not None
        key = ev.key
        rfc_key = ev.rfc_key
        scoped = key != rfc_key  # one GPU's fault, under the node's debounce key
        ident = None
        ck = _GPU_COUNT_KEYS.get(ev.event_type, _GPU_COUNT_OTHER)  # ("gpu_event", ev.metric_type)
        lock = self.lock
        lock.acquire()  # not `with`: cheaper on the ingest path (docs/PERFORMANCE.md)
        try:
            d = self.events_in
            d[ck] = d.get(ck, 0) + 1
            fire = self.debouncer.fire(debounce_recovered(key) if recovery else rfc_key, self.mono())
            if not fire:
                d = self.suppressed
                d[ck] = d.get(ck, 0) + 1
            elif recovery:
                self.debouncer.forget(rfc_key)
            else:
                self.debouncer.forget(debounce_recovered(key))
            if fire:
                ident = self._gpu_ident(key, ev.ts, recovery)
        finally:
            lock.release()
        if fire and self.remedy is not None:
            self.remedy.offer(ev, ident, level)  # a queue append: never waits on the remedy daemon
        if not fire and (recovery or not scoped):
            return TAKEN, {"ok": True, "key": key, "level": LEVEL_NAMES[level], "result": "suppressed"}, None
        kind = ev.fault_type
        ph = _PHRASES.get(kind)
        if ph is None:
            ph = _PHRASES[kind] = (phrase(kind, "zh"), phrase(kind, "en"))
            if len(_PHRASES) > 1024:  # unknown types are accepted: keep the memo bounded
                _PHRASES.clear()
        # both languages, built when first needed: each terminal speaks its own (terminals.<name>.language, else
        # gateway.language). A debounced GPU (not fire) is attached to the alarm that stands for its node's fault:
        # the RFC's debounce keeps the room quiet about a second GPU of the same node and fault, but the gateway
        # must still know that GPU is bad, so the first GPU's recovery does not turn the terminal green while this
        # one is not.
        inc = gpu_incident(
            key,
            level,
            ev.rack,
            ev.host,
            kind,
            partial(_texts, ev, self.cfg.templates),
            ev.labels(),
            recovery,
            ph[0],
            ph[1],
            rfc_key if scoped else None,
            not fire,
            ident,
        )
        return (
            TAKEN,
            {
                "ok": True,
                "key": key,
                "level": LEVEL_NAMES[level],
                "result": "suppressed" if not fire else "recovery" if recovery else "alarm",
            },
            inc,
        )

    def _gpu_ident(self, key, ts, recovery):
        """The ident of a GPU incident: its key and the id window its first event falls in (the probe's ts when it
        sent one and it is within a window of ours, else our clock), so every gateway that takes the same event
        names it alike; #n counts the faults of that key that recovered within the same window. Under self.lock."""
        now = self.clock()
        t = ts if ts is not None and abs(ts - now) < self.id_window else now
        b = int(t // self.id_window)
        e = self._refire.get(key)
        n = e[1] if e is not None and e[0] == b else 0
        ident = "%s@%d" % (key, b) + ("#%d" % n if n else "")
        if recovery:
            self._refire[key] = (b, n + 1)
            if len(self._refire) > 10_000:
                self._forget_refires(b)
        return ident

    def _forget_refires(self, b):
        # a method of its own: the comprehension's closure would make every _gpu_ident call build a cell for b
        self._refire = {k: v for k, v in self._refire.items() if v[0] >= b - 1}

    def alertmanager(self, body, source="alertmanager", waits=None, peer=None):
        broken = self.persist_broken()
        if broken:
            return self._unavailable(source, broken)
        try:
            incs = parse_webhook(body, self.cfg, self.cfg.language)
        except EventError as e:
            return self.reject(source, e, peer)
        take = []
        n_sup = 0
        n_stale = 0
        now = self.clock()
        with self.lock:
            for inc in incs:
                self._count(self.events_in, (source, "resolved" if inc.recovery else "firing"))
                if inc.recovery:
                    self.resolved.resolved(inc.ident, now)
                elif self.resolved.is_stale(inc.ident, now):
                    # an HA peer's late copy of a firing whose resolve we already took: the room stays green
                    n_stale += 1
                    self._count(self.stale, source)
                    continue
                if not self.cfg.am_debounce:
                    take.append(inc)
                    continue
                dk = debounce_recovered(inc.key) if inc.recovery else inc.key
                if self.debouncer.fire(dk, self.mono()):
                    self.debouncer.forget(inc.key if inc.recovery else debounce_recovered(inc.key))
                    take.append(inc)
                else:
                    n_sup += 1
                    self._count(self.suppressed, (source, "resolved" if inc.recovery else "firing"))
        results = []
        if take:
            results, durable = self._dispatch(take, waits)
            if not durable:
                return self._unavailable(source, "the pending queue was not saved in time")
        log_event(
            "alertmanager_notification",
            logging.INFO,
            alerts=len(incs),
            taken=len(take),
            suppressed=n_sup,
            stale=n_stale,
            group_key=str(body.get("groupKey", ""))[:200],
            source=source,
        )
        return TAKEN, {
            "ok": True,
            "alerts": len(incs),
            "suppressed": n_sup,
            "stale": n_stale,
            "firing": sum(1 for i in take if not i.recovery),
            "resolved": sum(1 for i in take if i.recovery),
            "results": results,
        }

    def not_durable_answer(self, source):
        """(UNAVAILABLE, answer): what replaces an answer whose alarm did not reach the disk in time."""
        return self._unavailable(source, "the pending queue was not saved in time")

    def _dispatch(self, incidents, waits=None):
        now = self.clock()
        out = []
        before = {}
        lanes = self.lanes
        route = self.cfg.route
        acks = self.acks
        ledger_due = False
        for inc in incidents:
            if inc.recovery:
                acks.resolved(inc.key)
            names = route(inc.labels)
            if not names:
                with self.lock:
                    self.unrouted += 1
                log_event("event_unrouted", logging.WARNING, key=inc.key)
            res = {}
            for name in names:
                lane = lanes[name]
                if name not in before:
                    before[name] = lane.sync_gen
                res[name] = lane.submit(inc, now)
            if _ALONE in res.values():  # its own alarm: the labels its escalation will carry (folds add none)
                acks.note_incident(inc)
                if inc.level == P0 and not inc.recovery:
                    # open from now on each terminal it is queued for: its deadline runs even if none answers
                    taken = acks.taken(inc, [n for n, r in res.items() if r is _ALONE], now)
                    if taken is not None and self.ledger is not None:
                        ledger_due = True
            if names and not inc.recovery and inc.level:
                if _ALONE in res.values():
                    self.history.fired(inc, names, now)
                else:  # folded into a summary: counted per type, not kept alone (history.py)
                    self.history.folded(inc, names, now)
            out.append(res)
        # An event that created an alarm is answered only once that alarm is on disk (group commit: one write
        # covers every request waiting at that moment). A fold into a summary already on disk does not wait. If the
        # write does not happen in time the answer is 503: the sender retries, and nothing answered 200 is lost.
        durable = True
        for name, sync0 in before.items():
            if lanes[name].sync_gen == sync0:
                continue
            p = self.persisters.get(name)
            if p is None:
                continue
            lane = lanes[name]
            with lane.lock:
                gen = lane.gen
            if waits is not None:
                waits.append((p, gen))
                continue
            if not p.wait(gen, self.cfg.persist_wait_s):
                log_event("persist_slow", logging.WARNING, terminal=name, error=p.last_error)
                durable = False
        ledger = self.ledger
        if ledger_due and ledger is not None:  # a P0 opened: its deadline is on disk before the answer, like its alarm
            if waits is not None:
                waits.append((ledger, ledger.gen()))
            elif not ledger.wait(ledger.gen(), self.cfg.persist_wait_s):
                log_event("persist_slow", logging.WARNING, terminal="ack-ledger", error=ledger.last_error)
                durable = False
        return out, durable

    # ---- operations -------------------------------------------------------------------------------------

    def health(self, front: FrontStatus | None = None):
        """/healthz: the terminals, and front (the HTTP front's status, if one serves this gateway)."""
        terms = {}
        problems = []
        for name, lane in self.lanes.items():
            w = self.workers[name]
            p = self.persisters.get(name)
            with lane.cond:
                terms[name] = {
                    "up": lane.up,
                    "queue": len(lane.items),
                    "p0_pending": sum(1 for x in lane.items if x.level == 2),
                    "last_error": w.last_error,
                    "dead_letters": lane.stats.alarms.dead_letter,
                    "last_dead_letter": w.last_dead,
                    "persist_failures": p.failed if p is not None else 0,
                    "persist_error": p.last_error if p is not None and p.broken else None,
                }
            if p is not None and p.broken:
                problems.append("terminal %s: pending queue cannot be saved (%s)" % (name, p.last_error))
            if p is not None and not p.alive():
                problems.append("terminal %s: persister thread is not running" % name)
            if not w.alive():
                problems.append("terminal %s: delivery worker is not running" % name)
        if self.ledger is not None and self.ledger.broken:
            problems.append("the ACK ledger cannot be saved (%s)" % self.ledger.last_error)
        if self.remedy is not None and not self.remedy.alive():
            problems.append("remedy: delivery thread is not running")
        if front is not None and front.accept_failing:
            problems.append("not accepting connections: %s" % front.accept_error)
        out = {
            "ok": not problems,
            "uptime_s": round(self.clock() - self.started_at, 1),
            "terminals": terms,
            "debounce_keys": len(self.debouncer),
            "resolved_memory": len(self.resolved),
            "restore_errors": self.restore_errors,
        }
        if problems:
            out["reasons"] = problems
        return out

    def metrics_text(self, front: FrontStatus | None = None) -> str:
        """/metrics: the Prometheus text of this gateway and front (the HTTP front's status; metrics.py writes it)."""
        text = metrics_text(self, front)
        if self.remedy is not None:
            text += "\n".join(self.remedy.metrics_lines()) + "\n"
        return text


def _texts(ev, templates) -> dict:
    return {"zh": ev.text("zh", templates), "en": ev.text("en", templates)}


def debounce_recovered(key: str) -> str:
    """The debounce key of a recovery, kept apart from the fault's own key."""
    return key + ":RECOVERED"
