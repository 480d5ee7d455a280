"""The gateway service: events in -> debounce -> route -> per-terminal lanes -> delivery workers.

Independent of HTTP (server.py is the front before it), so tests and the bench can drive it directly.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
import time
from functools import partial

from host_client.client import AlarmClient
from sentinel_core.alarm import LEVEL_NAMES

from .alertmanager import parse_webhook
from .debounce import Debouncer
from .delivery import PendingStore, Persister, RfcCompatTransport, Worker
from .events import EVENT_TYPES, OTHER_TYPE, EventError, parse_event, phrase, severity
from .incident import gpu_incident
from .lane import Lane
from .resolved import ResolvedMemory
from .stats import LATENCY_BUCKETS

logger = logging.getLogger("sentinel.gateway")
MAX_BATCH = 1000
_PHRASES: dict = {}  # event type -> its (zh, en) summary phrase
# the events_in / suppressed counters' key of a GPU event, by its type: ("gpu_event", metric type)
_GPU_COUNT_KEYS = {t: ("gpu_event", t) for t in EVENT_TYPES}
_GPU_COUNT_OTHER = ("gpu_event", OTHER_TYPE)


def log_event(event: str, severity: int = logging.INFO, /, **fields) -> None:
    """One structured record: the event name plus fields; the formatter renders JSON or text."""
    if logger.isEnabledFor(severity):
        logger.log(severity, event, extra={"fields": fields})


class JsonFormatter(logging.Formatter):
    def format(self, record):
        d = {"ts": round(record.created, 3), "severity": record.levelname.lower(), "event": record.getMessage()}
        d.update(getattr(record, "fields", {}) or {})
        if record.exc_info:
            d["exc"] = self.formatException(record.exc_info)
        return json.dumps(d, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record):
        f = getattr(record, "fields", {}) or {}
        tail = " ".join("%s=%s" % (k, json.dumps(v, ensure_ascii=False, default=str)) for k, v in f.items())
        return "%s %s %s %s" % (self.formatTime(record), record.levelname, record.getMessage(), tail)


def _lane_log(event, **fields):
    log_event(event, logging.WARNING if event in ("alarm_dropped", "alarm_undeliverable") else logging.INFO, **fields)


_ERRORS = frozenset(("alarm_dead_letter", "persist_failed", "dead_letter_unsaved", "worker_error"))
_WARNINGS = frozenset(("terminal_unreachable", "alarm_refused", "heartbeat_failed"))


def _worker_log(event, **fields):
    lvl = (
        logging.ERROR
        if event in _ERRORS
        else logging.WARNING
        if event in _WARNINGS
        else (logging.DEBUG if event == "delivery_retry" else logging.INFO)
    )
    log_event(event, lvl, **fields)


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
        # set by the HTTP front that serves this gateway (server.py): () -> FrontStatus, for /healthz and /metrics
        self.front_status = None
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
        if config.state_dir:
            os.makedirs(config.state_dir, exist_ok=True)
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
                log=_lane_log,
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
                self.persisters[name] = Persister(lane, store, log=_worker_log)
            self.workers[name] = Worker(
                lane,
                client,
                backoff_initial=config.backoff_initial,
                backoff_max=config.backoff_max,
                heartbeat_s=t.heartbeat_s,
                log=_worker_log,
                clock=clock,
                mono=mono,
                on_delivered=on_delivered,
                store=store,
            )

    # ---- lifecycle --------------------------------------------------------------------------------------

    def start(self):
        for p in self.persisters.values():
            p.start()
        for w in self.workers.values():
            w.start()
        log_event("gateway_started", terminals=sorted(self.lanes), listen="%s:%d" % (self.cfg.host, self.cfg.port))

    def stop(self):
        for w in self.workers.values():
            w.stop()
        for p in self.persisters.values():
            p.stop()

    # ---- ingest -----------------------------------------------------------------------------------------

    def _count(self, d, k):
        d[k] = d.get(k, 0) + 1

    def refuse(self, source, status, code, message):
        """A body refused before it was parsed (size, encoding, JSON): counted like any rejection."""
        return self.reject(source, EventError(code, message, status))

    def reject(self, source, err: EventError):
        with self.lock:
            self._count(self.rejected, (source, err.code))
        log_event("event_rejected", logging.INFO, source=source, code=err.code, message=str(err))
        return err.status, {"ok": False, "error": err.code, "message": str(err)}

    def check_auth(self, source, header):
        """None when the request may ingest: no token is configured, or its Authorization header is
        "Bearer <one of the tokens>". Else (401, answer), counted as a rejection. Neither the token sent nor the
        ones configured ever reach an answer or a log line."""
        if not self._token_digests:
            return None
        if not header:
            return self.refuse(
                source,
                401,
                "auth_required",
                "this gateway's ingest requires an Authorization: "
                "Bearer <token> header ([ingest] token_env / token_file)",
            )
        scheme, _, cred = header.strip().partition(" ")
        cred = cred.strip()
        if scheme.lower() != "bearer" or not cred:
            return self.refuse(source, 401, "auth_scheme", "the Authorization header must be Bearer <token>")
        d = hashlib.sha256(cred.encode("utf-8", "surrogateescape")).digest()
        ok = False
        for t in self._token_digests:  # every token compared: the time does not say which one matched
            ok |= hmac.compare_digest(d, t)
        if not ok:
            return self.refuse(source, 401, "auth_invalid", "the bearer token is not one this gateway accepts")
        return None

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
        return 503, {"ok": False, "error": "persist_failed", "message": reason + "; retry later"}

    def gpu_event(self, body, waits=None):
        """One probe event, or a JSON array of up to MAX_BATCH (a node reporting its GPUs at once).
        Returns (HTTP status, JSON answer); a batch answers 200 with one result per event, in order. While a
        terminal's queue cannot be saved, every event is answered 503 (the sender retries) and changes nothing:
        nothing is answered 200 that a crash could lose. waits: a list to collect (persister, gen) in instead of
        blocking until they are on disk (the epoll front waits for them, then answers; see server.py)."""
        broken = self.persist_broken()
        if broken:
            return self._unavailable("gpu_event", broken)
        if isinstance(body, list):
            if not body or len(body) > MAX_BATCH:
                return self.refuse(
                    "gpu_event",
                    422 if body else 400,
                    "bad_batch",
                    "a batch is a JSON array of 1..%d events" % MAX_BATCH,
                )
            results = [self._event(b) for b in body]
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
            return 200, {
                "ok": all(r[0] == 200 for r in results),
                "results": answers,
                "rejected": sum(1 for r in results if r[0] != 200),
            }
        status, answer, inc = self._event(body)
        if inc is not None:
            routed, durable = self._dispatch([inc], waits)
            if not durable:
                return self._unavailable("gpu_event", "the pending queue was not saved in time")
            answer["terminals"] = routed[0]
        return status, answer

    def _event(self, body):
        try:
            ev = parse_event(body, accept_unknown=self.cfg.accept_unknown)
        except EventError as e:
            status, answer = self.reject("gpu_event", e)
            return status, answer, None
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
        lock.acquire()  # not `with`: about 1,000 instructions less (callgrind)
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
        if not fire and (recovery or not scoped):
            return 200, {"ok": True, "key": key, "level": LEVEL_NAMES[level], "result": "suppressed"}, None
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
            200,
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
                self._refire = {k: v for k, v in self._refire.items() if v[0] >= b - 1}
        return ident

    def alertmanager(self, body, source="alertmanager", waits=None):
        broken = self.persist_broken()
        if broken:
            return self._unavailable(source, broken)
        try:
            incs = parse_webhook(body, self.cfg, self.cfg.language)
        except EventError as e:
            return self.reject(source, e)
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
        return 200, {
            "ok": True,
            "alerts": len(incs),
            "suppressed": n_sup,
            "stale": n_stale,
            "firing": sum(1 for i in take if not i.recovery),
            "resolved": sum(1 for i in take if i.recovery),
            "results": results,
        }

    def not_durable_answer(self, source):
        """The answer that replaces a 200 whose alarm did not reach the disk in time (the epoll front)."""
        return self._unavailable(source, "the pending queue was not saved in time")

    def _dispatch(self, incidents, waits=None):
        now = self.clock()
        out = []
        before = {}
        lanes = self.lanes
        route = self.cfg.route
        for inc in incidents:
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
        return out, durable

    # ---- operations -------------------------------------------------------------------------------------

    def health(self):
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
        front = self.front_status() if self.front_status is not None else None
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

    def metrics_text(self) -> str:
        lines = []

        def fam(name, typ, help_):
            lines.append("# HELP %s %s" % (name, help_))
            lines.append("# TYPE %s %s" % (name, typ))

        def lab(**kw):
            return "{" + ",".join('%s="%s"' % (k, _esc(v)) for k, v in kw.items()) + "}"

        with self.lock:
            events = dict(self.events_in)
            rejected = dict(self.rejected)
            suppressed = dict(self.suppressed)
            dkeys = len(self.debouncer)
            dev = self.debouncer.evicted
            unrouted = self.unrouted
            stale = dict(self.stale)
            not_durable = self.not_durable
        fam("sentinel_gateway_events_total", "counter", "Events received, by source and type.")
        for (s, t), n in sorted(events.items()):
            lines.append("sentinel_gateway_events_total%s %d" % (lab(source=s, type=t), n))
        fam("sentinel_gateway_events_rejected_total", "counter", "Events refused with a 4xx, by reason.")
        for (s, c), n in sorted(rejected.items()):
            lines.append("sentinel_gateway_events_rejected_total%s %d" % (lab(source=s, code=c), n))
        fam("sentinel_gateway_debounce_suppressed_total", "counter", "Events suppressed by the debounce window.")
        for (s, t), n in sorted(suppressed.items()):
            lines.append("sentinel_gateway_debounce_suppressed_total%s %d" % (lab(source=s, type=t), n))
        fam("sentinel_gateway_debounce_keys", "gauge", "Keys in debounce memory.")
        lines.append("sentinel_gateway_debounce_keys %d" % dkeys)
        fam("sentinel_gateway_debounce_evicted_total", "counter", "Keys evicted before their window ended (cap).")
        lines.append("sentinel_gateway_debounce_evicted_total %d" % dev)
        fam("sentinel_gateway_unrouted_total", "counter", "Incidents no route or default took.")
        lines.append("sentinel_gateway_unrouted_total %d" % unrouted)
        fam(
            "sentinel_gateway_stale_firing_total",
            "counter",
            "Firings dropped because their incident (fingerprint "
            "and startsAt) was resolved within the resolved memory: an HA peer's late copy.",
        )
        for s_, n in sorted(stale.items()):
            lines.append("sentinel_gateway_stale_firing_total%s %d" % (lab(source=s_), n))
        fam(
            "sentinel_gateway_not_durable_total",
            "counter",
            "Events answered 503 because the pending queue could not be saved (the sender retries).",
        )
        lines.append("sentinel_gateway_not_durable_total %d" % not_durable)
        fam("sentinel_gateway_persist_failures_total", "counter", "Failed saves of a terminal's pending queue.")
        for name, p in self.persisters.items():
            lines.append("sentinel_gateway_persist_failures_total%s %d" % (lab(terminal=name), p.failed))
        fam("sentinel_gateway_persist_ok", "gauge", "1 if the last save of the terminal's pending queue succeeded.")
        for name, p in self.persisters.items():
            lines.append("sentinel_gateway_persist_ok%s %d" % (lab(terminal=name), 0 if p.broken else 1))

        per = {}
        for name, lane in self.lanes.items():
            with lane.cond:
                per[name] = (lane.stats.copy(), len(lane.items), lane.up)
        fam("sentinel_gateway_alarms_total", "counter", "Alarms by terminal and outcome.")
        for name, (st, _d, _up) in per.items():
            for outcome, n in st.alarms.items():
                lines.append("sentinel_gateway_alarms_total%s %d" % (lab(terminal=name, outcome=outcome), n))
        fam(
            "sentinel_gateway_incidents_total",
            "counter",
            "Incidents by terminal and fate (alone, folded into a "
            "summary, attached to the alarm already standing for that node's fault, delivered, expired, dropped, "
            "refused, dead-lettered, stale: a firing after its resolve).",
        )
        for name, (st, _d, _up) in per.items():
            for fate, n in st.incidents.items():
                lines.append("sentinel_gateway_incidents_total%s %d" % (lab(terminal=name, fate=fate), n))
        fam("sentinel_gateway_heartbeats_total", "counter", "Heartbeats sent, by terminal and outcome.")
        for name, (st, _d, _up) in per.items():
            lines.append(
                "sentinel_gateway_heartbeats_total%s %d" % (lab(terminal=name, outcome="ok"), st.heartbeats_ok)
            )
            lines.append(
                "sentinel_gateway_heartbeats_total%s %d" % (lab(terminal=name, outcome="failed"), st.heartbeats_failed)
            )
        fam("sentinel_gateway_queue_depth", "gauge", "Alarms waiting per terminal.")
        for name, (_st, depth, _up) in per.items():
            lines.append("sentinel_gateway_queue_depth%s %d" % (lab(terminal=name), depth))
        fam("sentinel_gateway_terminal_up", "gauge", "1 if the last request to the terminal got an answer.")
        for name, (_st, _d, up) in per.items():
            lines.append("sentinel_gateway_terminal_up%s %d" % (lab(terminal=name), 1 if up else 0))
        fam("sentinel_gateway_delivery_latency_seconds", "histogram", "From alarm queued to terminal's 200.")
        for name, (st, _d, _up) in per.items():
            lat = st.latency
            acc = 0
            for i, b in enumerate(LATENCY_BUCKETS):
                acc += lat.buckets[i]
                lines.append(
                    "sentinel_gateway_delivery_latency_seconds_bucket%s %d"
                    % (lab(terminal=name, le=repr(float(b))), acc)
                )
            acc += lat.buckets[-1]
            lines.append("sentinel_gateway_delivery_latency_seconds_bucket%s %d" % (lab(terminal=name, le="+Inf"), acc))
            lines.append("sentinel_gateway_delivery_latency_seconds_sum%s %.6f" % (lab(terminal=name), lat.total))
            lines.append("sentinel_gateway_delivery_latency_seconds_count%s %d" % (lab(terminal=name), lat.count))
        front = self.front_status() if self.front_status is not None else None
        if front is not None:
            fam("sentinel_gateway_connections", "gauge", "Client connections the HTTP front holds open.")
            lines.append("sentinel_gateway_connections %d" % front.connections)
            fam(
                "sentinel_gateway_accept_paused_total",
                "counter",
                "Times the HTTP front stopped accepting connections for want of file descriptors or memory.",
            )
            lines.append("sentinel_gateway_accept_paused_total %d" % front.accept_failures)
            fam("sentinel_gateway_max_connections", "gauge", "Connections the HTTP front holds at most (shedding).")
            lines.append("sentinel_gateway_max_connections %d" % front.max_connections)
            fam(
                "sentinel_gateway_connections_shed_total",
                "counter",
                "Connections closed to make room at max_connections (the oldest idle, else the oldest slow).",
            )
            lines.append("sentinel_gateway_connections_shed_total %d" % front.shed)
            fam(
                "sentinel_gateway_request_timeouts_total",
                "counter",
                "Requests answered 408 and closed: the head or the body did not arrive within its deadline.",
            )
            lines.append('sentinel_gateway_request_timeouts_total{phase="head"} %d' % front.head_timeouts)
            lines.append('sentinel_gateway_request_timeouts_total{phase="body"} %d' % front.body_timeouts)
            fam(
                "sentinel_gateway_partial_bodies_refused_total",
                "counter",
                "Requests answered 503 and closed: incomplete bodies together over max_partial_body_bytes.",
            )
            lines.append("sentinel_gateway_partial_bodies_refused_total %d" % front.partial_refused)
        return "\n".join(lines) + "\n"


def _texts(ev, templates) -> dict:
    return {"zh": ev.text("zh", templates), "en": ev.text("en", templates)}


def debounce_recovered(key: str) -> str:
    """The debounce key of a recovery, kept apart from the fault's own key."""
    return key + ":RECOVERED"


def _esc(v) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
