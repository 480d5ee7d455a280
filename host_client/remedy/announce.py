"""What sentinel-remedy did, told to the terminals THROUGH the gateway: each announcement is an alert posted to the
gateway's Alertmanager ingest, so its routing, ACK groups and quiet hours apply. Texts in zh and en (annotations
summary_zh / summary_en); a resolved alert is the NORMAL (the job runs again).

The texts are built here (pure); Announcer is the thread that posts them, retrying with the project's back-off
while the gateway is unreachable.
"""

from __future__ import annotations

import collections
import json
import threading

from host_client.backoff import backoff_delay
from host_client.errors import SentinelError
from host_client.transport import HTTPTransport

PATH_AM = "/api/v1/alertmanager"
ALERTNAME = "SentinelRemedy"


def _jobs(jobs, lang):
    if lang == "zh":
        return "作业 " + "、".join(jobs)
    return ("job " if len(jobs) == 1 else "jobs ") + ", ".join(jobs)


def isolated_text(node, jobs, grace_s, *, dry_run=False) -> dict:
    g = int(round(grace_s))
    if dry_run:
        en = "dry run: %s would drain" % node
        zh = "演练：%s 将被隔离" % node
        if jobs:
            en += ", %s would be asked to checkpoint, requeue in %d s" % (_jobs(jobs, "en"), g)
            zh += "，%s 将被通知保存检查点，%d 秒后重新排队" % (_jobs(jobs, "zh"), g)
        return {"en": en, "zh": zh}
    en = "%s drained" % node
    zh = "%s 已隔离" % node
    if jobs:
        en += ", %s asked to checkpoint, requeue in %d s" % (_jobs(jobs, "en"), g)
        zh += "，%s 已通知保存检查点，%d 秒后重新排队" % (_jobs(jobs, "zh"), g)
    else:
        en += ", no job was running on it"
        zh += "，节点上没有运行中的作业"
    return {"en": en, "zh": zh}


def signalled_text(node, jobs, *, dry_run=False) -> dict:
    if dry_run:
        return {
            "en": "dry run: %s on %s would be asked to checkpoint; the node stays in service"
            % (_jobs(jobs, "en"), node),
            "zh": "演练：%s 上的%s 将被通知保存检查点，节点不隔离" % (node, _jobs(jobs, "zh")),
        }
    return {
        "en": "%s on %s asked to checkpoint; the node stays in service" % (_jobs(jobs, "en"), node),
        "zh": "%s 上的%s 已通知保存检查点，节点不隔离" % (node, _jobs(jobs, "zh")),
    }


# The two NORMALs: the gateway's bridge appends "已恢复正常" to a resolved alert's zh text, so neither says 恢复 itself.
def running_again_text(job, nodes) -> dict:
    return {"en": "job %s running again on %s" % (job, nodes), "zh": "作业 %s 已在 %s 上重新运行" % (job, nodes)}


def resumed_text(node) -> dict:
    return {"en": "%s back in service" % node, "zh": "%s 已重新投入使用" % node}


def failed_text(why) -> dict:
    return {"en": "isolation failed: %s" % why, "zh": "隔离失败：%s" % why}


def breaker_text(max_nodes, window_s, node) -> dict:
    return {
        "en": "remedy breaker open: %d nodes isolated within %d s, %s not drained; "
        "sentinel-remedy reset-breaker closes it" % (max_nodes, window_s, node),
        "zh": "自动处置熔断：%d 秒内已隔离 %d 个节点，%s 未隔离；执行 sentinel-remedy reset-breaker 恢复"
        % (window_s, max_nodes, node),
    }


def not_requeued_text(job, restarts, max_restarts) -> dict:
    return {
        "en": "job %s not requeued: requeued %d times already, max_restarts_per_job is %d"
        % (job, restarts, max_restarts),
        "zh": "作业 %s 未重新排队：已重排 %d 次，达到上限 %d" % (job, restarts, max_restarts),
    }


def left_alone_text(node, reason) -> dict:
    return {
        "en": "%s was already drained by someone else (%s): left as it is" % (node, reason[:60]),
        "zh": "%s 已被他人隔离（%s），保持不变" % (node, reason[:60]),
    }


def alert(*, fingerprint, texts, severity, host, rack="", firing=True, action="") -> dict:
    """One Alertmanager alert (the webhook's version 4 shape) carrying texts in both languages."""
    return {
        "status": "firing" if firing else "resolved",
        # one alertname per action: the gateway folds alerts of one name and rack into a summary, and a drain must
        # not be folded into the "isolation failed" before it
        "labels": {
            "alertname": ALERTNAME + "".join(w.capitalize() for w in action.split("_")),
            "severity": severity,
            "host": host,
            "rack": rack,
            "action": action,
        },
        "annotations": {"summary": texts["en"], "summary_en": texts["en"], "summary_zh": texts["zh"]},
        "fingerprint": fingerprint[:64],
        "startsAt": "",
    }


class Announcer:
    """Posts announcements to the gateway in order; retries with back-off; never blocks the caller."""

    def __init__(self, *, url="", token=None, timeout_s=5.0, log=None, transport=None, max_queue=10_000):
        self.url = url.rstrip("/")  # "" : the url of the gateway that sent the incident (per announcement)
        self.token = token
        self.timeout_s = timeout_s
        self.log = log or (lambda event, **kw: None)
        self.transport = transport or HTTPTransport()
        self.queue: collections.deque = collections.deque(maxlen=max_queue)
        self.cond = threading.Condition()
        self.sent = 0
        self.failures = 0
        self._stop = False
        self._thread = None

    def post(self, gateway_url, a):
        url = self.url or (gateway_url or "").rstrip("/")
        if not url:
            self.log("announce_nowhere", text=a["annotations"]["summary_en"])
            return
        with self.cond:
            self.queue.append((url, a))
            self.cond.notify()

    def pending(self) -> list:
        """[url, alert] of every announcement not yet taken by the gateway, oldest first (for the state file)."""
        with self.cond:
            return [[u, a] for u, a in self.queue]

    def restore(self, items):
        """Announcements a previous run had not delivered: queued first (at least once; the gateway's alarm id
        makes a copy of one it already took a duplicate on the terminal)."""
        with self.cond:
            self.queue.extendleft((u, a) for u, a in reversed(items))
            self.cond.notify()

    def start(self):
        self._thread = threading.Thread(target=self._run, name="announce", daemon=True)
        self._thread.start()

    def stop(self):
        with self.cond:
            self._stop = True
            self.cond.notify()
        if self._thread:
            self._thread.join(5)

    def _run(self):
        attempt = 0
        while True:
            with self.cond:
                while not self.queue and not self._stop:
                    self.cond.wait()
                if self._stop:
                    return
                url, a = self.queue[0]
            body = json.dumps({"version": "4", "status": a["status"], "alerts": [a]}, ensure_ascii=False).encode()
            headers = {"Content-Type": "application/json"}
            if self.token:
                headers["Authorization"] = "Bearer " + self.token
            status = 0
            try:
                status = self.transport.post(url + PATH_AM, headers, body, self.timeout_s).status
                ok, why = status == 200, "HTTP %d" % status
            except SentinelError as e:
                ok, why = False, str(e)
            if ok or 400 <= status < 500:  # a 4xx is this request's fault: retrying cannot fix it
                with self.cond:
                    self.queue.popleft()
                if ok:
                    self.sent += 1
                    attempt = 0
                else:
                    self.log("announce_refused", url=url, why=why)
                continue
            self.failures += 1
            attempt += 1
            self.log("announce_retry", url=url, why=why, attempt=attempt)
            with self.cond:
                self.cond.wait(backoff_delay(attempt, 0.5, 30.0))
