"""sentinel-remedy's engine: takes incidents, asks the core (actions.py) what to do, has the backend do it, tells
the terminals through the gateway (announce.py), and keeps its state (persist.py), audit log and counters.

One worker thread does every action in order (incidents, due requeues, watches of requeued jobs, retries), so no
two actions race; the HTTP front only queues. A failure of the backend never ends the thread: it is audited,
announced once as "isolation failed: <why>", and retried with the project's back-off.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from dataclasses import asdict

from host_client.backoff import backoff_delay
from host_client.exposition import Page
from host_client.logs import log_event

from . import announce as say
from .actions import Action, Breaker, Incident, decide, drain_reason, may_requeue, ours
from .persist import State, StateFile
from .slurm import BackendError, UnknownNode

LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
WATCH_EVERY_S = 1.0
SEEN_MAX = 10_000


_logger = logging.getLogger("sentinel.remedy")  # host_client.logs's dialect; cli.py sets it up
_ERRORS = frozenset(("isolation_failed", "worker_error", "state_unsaved", "audit_unwritten"))
_WARNINGS = frozenset(("announce_retry", "announce_refused", "announce_nowhere", "isolation_retry"))


def log(event, **fields):
    """One record of the daemon's log (host_client.logs: one JSON line on stderr; no tracebacks, no secrets)."""
    if event == "action" and fields.get("result") == "failed":
        level = logging.WARNING
    else:
        level = logging.ERROR if event in _ERRORS else logging.WARNING if event in _WARNINGS else logging.INFO
    log_event(_logger, event, level, **fields)


class Remedy:
    def __init__(self, cfg, backend, announcer, *, clock=time.time, logger=log):
        self.cfg = cfg
        self.backend = backend
        self.announcer = announcer
        self.clock = clock
        self.log = logger
        self.state = State(Breaker(cfg.max_nodes, cfg.window_s))
        self.file = StateFile(os.path.join(cfg.state_dir, "state.json")) if cfg.state_dir else None
        self.audit_path = os.path.join(cfg.state_dir, "audit.jsonl") if cfg.state_dir else None
        self.lock = threading.RLock()
        self.inbox: queue.Queue = queue.Queue()
        self.counts: dict = {}  # (kind, result) -> n
        self.latency = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0
        self.latency_n = 0
        self.last_error = None
        self._stop = False
        self._thread = None
        self._next_watch = 0.0
        if self.file is not None and self.file.load(self.state):
            self.log(
                "state_restored",
                drained=sorted(self.state.drained),
                jobs=sorted(self.state.jobs),
                breaker_latched=self.state.breaker.latched,
                announcements=len(self.state.outbox),
            )
            restore = getattr(announcer, "restore", None)
            if restore is not None:
                restore(self.state.outbox)

    # ---- lifecycle ----------------------------------------------------------------------------------------

    def start(self):
        self._thread = threading.Thread(target=self._run, name="remedy", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop = True
        self.inbox.put(None)
        if self._thread is not None:
            self._thread.join(30)
        with self.lock:
            self._save()

    def alive(self):
        return self._thread is not None and self._thread.is_alive()

    def submit(self, inc: Incident):
        """From the HTTP front: queued, handled in order by the worker."""
        self.inbox.put((self.clock(), inc))

    def _run(self):
        while not self._stop:
            try:
                item = self.inbox.get(timeout=0.2)
            except queue.Empty:
                item = None
            if self._stop:
                return
            try:
                with self.lock:
                    if item is not None:
                        self.handle(item[1], item[0])
                    self.tick(self.clock())
            except Exception as e:  # noqa: BLE001 - the daemon keeps running whatever one incident does
                self.last_error = "%s: %s" % (type(e).__name__, e)
                self.log("worker_error", error=self.last_error)

    # ---- records ------------------------------------------------------------------------------------------

    def _save(self):
        if self.file is None:
            return
        pending = getattr(self.announcer, "pending", None)
        if pending is not None:
            self.state.outbox = pending()  # what the gateway has not taken yet: re-sent after a restart
        try:
            self.file.save(self.state)
        except OSError as e:
            self.last_error = "state not saved: %s" % e
            self.log("state_unsaved", error=str(e))

    def _audit(self, incident, kind, result, *, command=None, error=None, duration_s=0.0, received_at=None, **kw):
        self.counts[(kind, result)] = self.counts.get((kind, result), 0) + 1
        now = self.clock()
        if received_at is not None and result in ("ok", "dry_run"):
            dt = max(0.0, now - received_at)
            i = next((i for i, b in enumerate(LATENCY_BUCKETS) if dt <= b), len(LATENCY_BUCKETS))
            self.latency[i] += 1
            self.latency_sum += dt
            self.latency_n += 1
        rec = {
            "ts": round(now, 3),
            "incident": incident,
            "action": kind,
            "mode": self.cfg.mode,
            "command": command,
            "result": result,
            "duration_s": round(duration_s, 4),
        }
        if error:
            rec["error"] = error
        rec.update(kw)
        self.log("action", **{k: v for k, v in rec.items() if k != "ts"})
        if self.audit_path is None:
            return
        try:
            os.makedirs(os.path.dirname(self.audit_path), exist_ok=True)
            with open(self.audit_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        except OSError as e:
            self.log("audit_unwritten", error=str(e))

    def _do(self, incident, kind, fn, *args, received_at=None, **kw):
        """Run one backend action, audited; returns (ok, command, error)."""
        t0 = time.monotonic()
        try:
            argv = fn(*args)
        except BackendError as e:
            self._audit(
                incident,
                kind,
                "failed",
                command=_cmd(self.backend),
                error=str(e),
                duration_s=time.monotonic() - t0,
                **kw,
            )
            return False, None, str(e)
        self._audit(incident, kind, "ok", command=argv, duration_s=time.monotonic() - t0, received_at=received_at, **kw)
        return True, argv, None

    def _say(self, inc_gateway, **alert):
        self.announcer.post(inc_gateway, say.alert(**alert))

    # ---- incidents ----------------------------------------------------------------------------------------

    def handle(self, inc: Incident, received_at: float):
        if not inc.firing:
            self._healthy(inc)
            return
        action = decide(self.cfg.policy, inc)
        if action is Action.NONE:
            return
        if self.cfg.mode == "off":
            self.log("mode_off", incident=inc.id, host=inc.host, would=action.value)
            return
        if inc.id in self.state.seen and inc.id not in self.state.retry:
            self._audit(inc.id, action.value, "duplicate", host=inc.host)
            return
        self.state.seen[inc.id] = self.clock()
        if len(self.state.seen) > SEEN_MAX:
            for k in sorted(self.state.seen, key=lambda k: self.state.seen[k])[: SEEN_MAX // 10]:
                del self.state.seen[k]
        if action is Action.ISOLATE:
            self._isolate(inc, received_at)
        else:
            self._signal_only(inc, received_at)
        self._save()

    def _jobs(self, inc):
        jobs = list(inc.jobs)
        for j in self.backend.jobs_on(inc.host):
            if j not in jobs:
                jobs.append(j)
        return jobs

    def _fail(self, inc, why, *, retry):
        """isolation failed: the terminal is told once per incident; a failure retrying may fix is retried."""
        r = self.state.retry.get(inc.id)
        if r is None:
            r = self.state.retry[inc.id] = {"incident": asdict(inc), "attempt": 0, "announced": False}
        r["attempt"] += 1
        r["next_at"] = self.clock() + backoff_delay(r["attempt"], self.cfg.backoff_initial_s, self.cfg.backoff_max_s)
        r["why"] = why
        if not r["announced"]:
            r["announced"] = True
            self._say(
                inc.gateway,
                fingerprint="remedy-failed:%s" % inc.id,
                texts=say.failed_text(why),
                severity="critical",
                host=inc.host,
                rack=inc.rack,
                action="failed",
            )
        if not retry:
            del self.state.retry[inc.id]
        self.log("isolation_failed", incident=inc.id, host=inc.host, why=why, retry=retry, attempt=r["attempt"])

    def _isolate(self, inc, received_at):
        dry = self.cfg.mode == "dry_run"
        mine = self.state.drained.get(inc.host)
        if mine is not None:
            self._audit(inc.id, "drain", "already", host=inc.host, by_incident=mine["incident"])
            self.state.retry.pop(inc.id, None)
            return
        t0 = time.monotonic()
        try:
            node = self.backend.node(inc.host)
            jobs = self._jobs(inc)
        except UnknownNode as e:
            self._audit(inc.id, "drain", "failed", error=str(e), duration_s=time.monotonic() - t0, host=inc.host)
            self._fail(inc, str(e), retry=False)
            return
        except BackendError as e:
            self._audit(
                inc.id,
                "drain",
                "failed",
                command=_cmd(self.backend),
                error=str(e),
                duration_s=time.monotonic() - t0,
                host=inc.host,
            )
            self._fail(inc, str(e), retry=True)
            return
        if node.drained and not ours(node.reason):
            # a person's or another tool's drain: never changed, its jobs left to whoever drained it
            self._audit(inc.id, "drain", "left_alone", host=inc.host, reason=node.reason)
            self._say(
                inc.gateway,
                fingerprint="remedy-left:%s" % inc.id,
                texts=say.left_alone_text(inc.host, node.reason),
                severity="warning",
                host=inc.host,
                rack=inc.rack,
                action="left_alone",
            )
            self.state.retry.pop(inc.id, None)
            return
        if dry:
            self._audit(
                inc.id,
                "drain",
                "dry_run",
                command=self.backend_plan("drain", inc),
                received_at=received_at,
                host=inc.host,
            )
            self._say(
                inc.gateway,
                fingerprint="remedy:%s:%s" % (inc.id, inc.host),
                texts=say.isolated_text(inc.host, jobs, self.cfg.checkpoint_grace_s, dry_run=True),
                severity="warning",
                host=inc.host,
                rack=inc.rack,
                action="would_drain",
            )
            return
        b = self.state.breaker
        if not b.admit(self.clock()):
            self._audit(inc.id, "drain", "breaker_open", host=inc.host)
            self.state.retry.pop(inc.id, None)
            if not b.announced:
                b.announced = True
                self._say(
                    inc.gateway,
                    fingerprint="remedy-breaker:%d" % int(self.clock()),
                    texts=say.breaker_text(b.max_nodes, int(b.window_s), inc.host),
                    severity="critical",
                    host=inc.host,
                    rack=inc.rack,
                    action="breaker_open",
                )
            return
        reason = drain_reason(inc)
        ok, _, err = self._do(
            inc.id, "drain", self.backend.drain, inc.host, reason, received_at=received_at, host=inc.host
        )
        if not ok:
            b.times.pop()  # not isolated: it does not count against the breaker
            self._fail(inc, err, retry=True)
            return
        self.state.retry.pop(inc.id, None)
        self.state.drained[inc.host] = {
            "incident": inc.id,
            "reason": reason,
            "fault": inc.event_type,
            "at": self.clock(),
            "gateway": inc.gateway,
            "rack": inc.rack,
        }
        signalled = self._signal_jobs(inc, jobs, received_at, requeue=True)
        self._say(
            inc.gateway,
            fingerprint="remedy:%s:%s" % (inc.id, inc.host),
            texts=say.isolated_text(inc.host, signalled, self.cfg.checkpoint_grace_s),
            severity="warning",
            host=inc.host,
            rack=inc.rack,
            action="drained",
        )

    def _signal_jobs(self, inc, jobs, received_at, *, requeue):
        done = []
        for j in jobs:
            rec = self.state.jobs.get(j)
            if rec is not None and rec.get("pending"):
                continue  # already asked, its requeue is due: never twice
            ok, _, _ = self._do(
                inc.id,
                "signal",
                self.backend.signal,
                j,
                self.cfg.checkpoint_signal,
                received_at=received_at,
                job=j,
                host=inc.host,
            )
            if not ok:
                continue
            done.append(j)
            if requeue:
                rec = self.state.jobs.setdefault(j, {"restarts": 0})
                rec.update(
                    node=inc.host,
                    incident=inc.id,
                    pending=True,
                    watch=False,
                    requeue_at=self.clock() + self.cfg.checkpoint_grace_s,
                    gateway=inc.gateway,
                    rack=inc.rack,
                )
        return done

    def _signal_only(self, inc, received_at):
        dry = self.cfg.mode == "dry_run"
        try:
            jobs = self._jobs(inc)
        except BackendError as e:
            self._audit(inc.id, "signal", "failed", command=_cmd(self.backend), error=str(e), host=inc.host)
            self._fail(inc, str(e), retry=False)
            return
        if not jobs:
            self._audit(inc.id, "signal", "no_job", host=inc.host)
            return
        if dry:
            for j in jobs:
                self._audit(
                    inc.id,
                    "signal",
                    "dry_run",
                    command=self.backend_plan("signal", inc, j),
                    received_at=received_at,
                    job=j,
                    host=inc.host,
                )
            done = jobs
        else:
            done = self._signal_jobs(inc, jobs, received_at, requeue=False)
        if done:
            self._say(
                inc.gateway,
                fingerprint="remedy-signal:%s:%s" % (inc.id, inc.host),
                texts=say.signalled_text(inc.host, done, dry_run=dry),
                severity="warning",
                host=inc.host,
                rack=inc.rack,
                action="signalled",
            )

    def backend_plan(self, what, inc, job=None):
        """The command enforce would run (dry_run's audit shows it)."""
        b = self.backend
        if what == "drain":
            return [b.scontrol, "update", "NodeName=" + inc.host, "State=DRAIN", "Reason=" + drain_reason(inc)]
        return [b.scancel, "--full", "--signal=" + self.cfg.checkpoint_signal, job]

    def _healthy(self, inc: Incident):
        """An explicit healthy event: resume the node only where the policy says the fault clears by itself."""
        mine = self.state.drained.get(inc.host)
        if mine is None or inc.event_type not in self.cfg.policy.self_clearing or mine["fault"] != inc.event_type:
            return
        if self.cfg.mode != "enforce":
            return
        self.resume(inc.host, by="healthy event %s" % inc.id)

    # ---- operator -----------------------------------------------------------------------------------------

    def resume(self, node, *, by="operator"):
        """Resume a node this daemon drained (its Slurm reason still starts with sentinel:). (ok, one line)."""
        with self.lock:
            try:
                info = self.backend.node(node)
            except BackendError as e:
                self._audit(by, "resume", "failed", error=str(e), host=node)
                return False, "resume failed: %s" % e
            if not info.drained:
                self.state.drained.pop(node, None)
                self._save()
                return True, "%s is not drained (%s): nothing to do" % (node, info.state)
            if not ours(info.reason):
                self._audit(by, "resume", "refused", host=node, reason=info.reason)
                return False, "%s was drained by someone else (reason %r): sentinel-remedy leaves it" % (
                    node,
                    info.reason,
                )
            ok, _, err = self._do(by, "resume", self.backend.resume, node, host=node)
            if not ok:
                return False, "resume failed: %s" % err
            rec = self.state.drained.pop(node, None)
            if rec is not None and not any(
                r.get("incident") == rec["incident"] and (r.get("watch") or r.get("pending"))
                for r in self.state.jobs.values()
            ):
                # no job of its own to wait for: the drain's announcement clears with the node back in service
                # (else the NORMAL is the job running again)
                self._say(
                    rec.get("gateway"),
                    fingerprint="remedy:%s:%s" % (rec["incident"], node),
                    texts=say.resumed_text(node),
                    severity="warning",
                    host=node,
                    rack=rec.get("rack", ""),
                    firing=False,
                    action="resumed",
                )
            self._save()
            return True, "%s resumed" % node

    def reset_breaker(self):
        with self.lock:
            self.state.breaker.reset()
            self._audit("operator", "reset_breaker", "ok")
            self._save()
        return True, "breaker closed"

    # ---- timers -------------------------------------------------------------------------------------------

    def tick(self, now):
        changed = False
        for job, rec in list(self.state.jobs.items()):
            if rec.get("pending") and rec.get("requeue_at", 0) <= now:
                changed = True
                self._requeue(job, rec, now)
        if now >= self._next_watch and any(r.get("watch") for r in self.state.jobs.values()):
            self._next_watch = now + WATCH_EVERY_S
            for job, rec in list(self.state.jobs.items()):
                if rec.get("watch"):
                    changed |= self._watch(job, rec)
        for iid, r in list(self.state.retry.items()):
            if r.get("next_at", 0) <= now:
                fields = dict(r["incident"])
                fields["jobs"] = tuple(fields.get("jobs", ()))
                inc = Incident(**fields)
                self.log("isolation_retry", incident=iid, attempt=r["attempt"])
                self._isolate(inc, None)
                changed = True
        if changed:
            self._save()

    def _requeue(self, job, rec, now):
        if not may_requeue(rec["restarts"], self.cfg.max_restarts_per_job):
            rec["pending"] = False
            self._audit(rec["incident"], "requeue", "cap", job=job, restarts=rec["restarts"])
            self._say(
                rec.get("gateway"),
                fingerprint="remedy-cap:%s:%s" % (rec["incident"], job),
                texts=say.not_requeued_text(job, rec["restarts"], self.cfg.max_restarts_per_job),
                severity="warning",
                host=rec["node"],
                rack=rec.get("rack", ""),
                action="not_requeued",
            )
            return
        ok, _, err = self._do(rec["incident"], "requeue", self.backend.requeue, job, job=job)
        if ok:
            rec.update(pending=False, watch=True, restarts=rec["restarts"] + 1)
            return
        gone = any(
            s in (err or "").lower()
            for s in (
                "invalid job id",
                "already finished",
                "already completed",
                "job has already",
                "not requeueable",
                "requeue disabled",
            )
        )
        if gone:
            rec["pending"] = False
        else:
            rec["attempt"] = rec.get("attempt", 0) + 1
            rec["requeue_at"] = now + backoff_delay(rec["attempt"], self.cfg.backoff_initial_s, self.cfg.backoff_max_s)

    def _watch(self, job, rec):
        try:
            info = self.backend.job(job)
        except BackendError:
            return False
        if info is not None and info.state != "RUNNING":
            return False
        rec["watch"] = False
        if info is None:
            return True
        self._audit(rec["incident"], "running_again", "ok", job=job, nodes=info.nodes)
        others = [
            j
            for j, r in self.state.jobs.items()
            if r.get("incident") == rec["incident"] and (r.get("watch") or r.get("pending"))
        ]
        if not others:
            self._say(
                rec.get("gateway"),
                fingerprint="remedy:%s:%s" % (rec["incident"], rec["node"]),
                texts=say.running_again_text(job, info.nodes),
                severity="warning",
                host=rec["node"],
                rack=rec.get("rack", ""),
                firing=False,
                action="running_again",
            )
        return True

    # ---- /metrics -----------------------------------------------------------------------------------------

    def metrics_text(self) -> str:
        with self.lock:
            counts = dict(self.counts)
            lat, lsum, ln = list(self.latency), self.latency_sum, self.latency_n
            latched = self.state.breaker.latched
            drained = len(self.state.drained)
            retry = len(self.state.retry)
        page = Page()  # the project's one writer and label escaper (host_client/exposition.py)
        fam, lab, out = page.family, page.labels, page.lines
        fam("sentinel_remedy_actions_total", "counter", "Actions taken, by kind and result.")
        for (k, r), n in sorted(counts.items()):
            out.append("sentinel_remedy_actions_total%s %d" % (lab(kind=k, result=r), n))
        fam("sentinel_remedy_breaker_open", "gauge", "1 while the blast-radius breaker is open (latched).")
        out.append("sentinel_remedy_breaker_open %d" % int(latched))
        fam("sentinel_remedy_drained_nodes", "gauge", "Nodes this daemon drained and has not resumed.")
        out.append("sentinel_remedy_drained_nodes %d" % drained)
        fam("sentinel_remedy_isolations_retrying", "gauge", "Isolations that failed and are being retried.")
        out.append("sentinel_remedy_isolations_retrying %d" % retry)
        fam("sentinel_remedy_incident_to_action_seconds", "histogram", "From an incident's arrival to its action.")
        acc = 0
        for b, n in zip(LATENCY_BUCKETS + (float("inf"),), lat, strict=True):
            acc += n
            le = "+Inf" if b == float("inf") else repr(b)
            out.append("sentinel_remedy_incident_to_action_seconds_bucket%s %d" % (lab(le=le), acc))
        out.append("sentinel_remedy_incident_to_action_seconds_sum %.6f" % lsum)
        out.append("sentinel_remedy_incident_to_action_seconds_count %d" % ln)
        fam("sentinel_remedy_mode_info", "gauge", "The configured mode.")
        out.append("sentinel_remedy_mode_info%s 1" % lab(mode=self.cfg.mode))
        return page.text()

    def health(self):
        with self.lock:
            return {
                "ok": self.alive(),
                "mode": self.cfg.mode,
                "breaker_open": self.state.breaker.latched,
                "drained": sorted(self.state.drained),
                "retrying": sorted(self.state.retry),
                "last_error": self.last_error,
            }


def _cmd(backend):
    h = getattr(backend, "history", None)
    return h[-1][0] if h else None
