"""sentinel-remedy's engine against a real Slurm (testkit/slurm_live.py: munged, slurmctld and a slurmd on
loopback): the exact commands it runs, a real batch job that traps the checkpoint signal and is requeued, a
person's drain left untouched, the breaker's trip and latch, dry_run and off changing nothing, its own faults
(slurmctld down, scontrol missing, a node Slurm does not know) as one line, and its state across a restart.

The engine is driven directly (handle, tick) so each step is deterministic; the announcements it makes are
collected as the alerts the gateway would receive (tests/test_remedy_chain.py sends them through a real gateway).
"""

import os
import time

import pytest

from host_client.remedy.actions import Incident
from host_client.remedy.config import from_dict
from host_client.remedy.slurm import SlurmBackend
from host_client.remedy.worker import Remedy
from testkit.slurm_live import CHECKPOINTING_JOB, GHOST_NODES, REAL_NODE, cluster_for_tests
from testkit.wait import until


@pytest.fixture(scope="module")
def slurm():
    c = cluster_for_tests()
    yield c
    c.stop()


class Said:
    """Collects announcements (the alerts posted to the gateway)."""

    def __init__(self):
        self.alerts = []

    def post(self, gateway, alert):
        self.alerts.append(alert)

    def texts(self, lang="en"):
        return [a["annotations"]["summary_" + lang] for a in self.alerts]


def engine(cluster, tmp_path, *, mode="enforce", env_path=None, **over):
    d = {"key_id": "gw", "secret_env": "S", "mode": mode, "state_dir": str(tmp_path / "state")}
    for k, v in over.items():
        if isinstance(v, dict):
            d.setdefault(k, {}).update(v)
        else:
            d[k] = v
    cfg = from_dict(d, env={"S": "secret", "SLURM_CONF": cluster.conf})
    env = dict(cluster.env)
    if env_path is not None:
        env["PATH"] = env_path
    backend = SlurmBackend(
        scontrol=cfg.scontrol, scancel=cfg.scancel, squeue=cfg.squeue, timeout_s=cfg.slurm_timeout_s, env=env
    )
    said = Said()
    return Remedy(cfg, backend, said, logger=lambda *a, **k: None), said


def incident(host, event_type="XID_FATAL", xid=79, ident=None, firing=True, gpu=3):
    return Incident(
        id=ident or "A03:%s:%s@%d" % (host, event_type, time.monotonic_ns()),
        firing=firing,
        level="P0",
        host=host,
        event_type=event_type,
        rack="A03",
        gpu=gpu,
        xid=xid,
    )


def undrain(slurm, node):
    slurm.run("scontrol", "update", "NodeName=" + node, "State=RESUME", check=False)
    slurm.run("scontrol", "update", "NodeName=" + node, "State=UNDRAIN", check=False)


def test_isolate_checkpoint_requeue_and_the_job_runs_again(slurm, tmp_path):
    remedy, said = engine(slurm, tmp_path, slurm={"checkpoint_grace_s": 1})
    job = slurm.sbatch(CHECKPOINTING_JOB, "--requeue", "--open-mode=append")
    slurm.wait_started(job)
    inc = incident(REAL_NODE)
    t0 = time.time()
    remedy.handle(inc, t0)
    node = slurm.node(REAL_NODE)
    assert "DRAIN" in node["State"]  # DRAIN, never DOWN: the job survives it
    assert "DOWN" not in node["State"]
    assert node["Reason"].startswith("sentinel: XID_FATAL xid 79 gpu 3 incident " + inc.id)
    cmds = [h[0] for h in remedy.backend.history]
    assert [
        remedy.backend.scontrol,
        "update",
        "NodeName=" + REAL_NODE,
        "State=DRAIN",
        "Reason=" + node["Reason"].split(" [")[0],
    ] in cmds
    assert [remedy.backend.scancel, "--full", "--signal=USR1", job] in cmds
    assert said.texts() == ["%s drained, job %s asked to checkpoint, requeue in 1 s" % (REAL_NODE, job)]
    assert said.texts("zh") == ["%s 已隔离，作业 %s 已通知保存检查点，1 秒后重新排队" % (REAL_NODE, job)]
    ckpt = os.path.join(slurm.dir, "checkpoint-%s.txt" % job)
    until(lambda: os.path.exists(ckpt) and "checkpoint 0" in open(ckpt).read(), 10)
    # a second fault on the drained node: neither drains again nor asks the job twice
    remedy.handle(incident(REAL_NODE, xid=48), time.time())
    assert len(said.alerts) == 1
    # the grace passes: requeued once
    remedy.tick(time.time() + 1.5)
    assert [remedy.backend.scontrol, "requeue", job] in [h[0] for h in remedy.backend.history]
    assert slurm.job(job)["Restarts"] == "1"
    remedy.tick(time.time() + 3)
    assert [h[0] for h in remedy.backend.history].count([remedy.backend.scontrol, "requeue", job]) == 1
    # a restart of the daemon knows what it drained and which job it requeued, how often
    again, _ = engine(slurm, tmp_path, slurm={"checkpoint_grace_s": 1})
    assert again.state.jobs[job]["restarts"] == 1 and REAL_NODE in again.state.drained
    # the operator resumes the node (its reason is sentinel's); the job starts again from its checkpoint
    ok, msg = remedy.resume(REAL_NODE)
    assert ok and msg == "%s resumed" % REAL_NODE
    assert [remedy.backend.scontrol, "update", "NodeName=" + REAL_NODE, "State=RESUME"] in [
        h[0] for h in remedy.backend.history
    ]

    def running_again():
        remedy.tick(time.time())
        return any(not a["status"] == "firing" for a in said.alerts)

    until(running_again, 30)
    last = said.alerts[-1]
    assert last["status"] == "resolved" and last["fingerprint"] == said.alerts[0]["fingerprint"]
    assert last["annotations"]["summary_en"] == "job %s running again on %s" % (job, REAL_NODE)
    assert "start 1" in open(os.path.join(slurm.dir, "slurm-%s.out" % job)).read()  # --open-mode=append kept both
    slurm.run("scancel", job)
    # the audit log: one JSON line per action, with the command, result and duration
    import json

    lines = [json.loads(x) for x in open(tmp_path / "state" / "audit.jsonl")]
    kinds = [(x["action"], x["result"]) for x in lines]
    assert ("drain", "ok") in kinds and ("signal", "ok") in kinds and ("requeue", "ok") in kinds
    assert all({"incident", "command", "result", "duration_s"} <= set(x) for x in lines)
    text = remedy.metrics_text()
    assert 'sentinel_remedy_actions_total{kind="drain",result="ok"} 1' in text
    assert "sentinel_remedy_incident_to_action_seconds_count" in text


def test_max_restarts_per_job_caps_the_requeue(slurm, tmp_path):
    remedy, said = engine(slurm, tmp_path, slurm={"checkpoint_grace_s": 0, "max_restarts_per_job": 0})
    job = slurm.sbatch(CHECKPOINTING_JOB, "--requeue", "--open-mode=append")
    slurm.wait_started(job)
    try:
        remedy.handle(incident(REAL_NODE), time.time())
        remedy.tick(time.time() + 1)
        assert said.texts()[-1] == "job %s not requeued: requeued 0 times already, max_restarts_per_job is 0" % job
        assert [remedy.backend.scontrol, "requeue", job] not in [h[0] for h in remedy.backend.history]
        assert slurm.job(job)["Restarts"] == "0"
    finally:
        slurm.run("scancel", job)
        undrain(slurm, REAL_NODE)


def test_a_persons_drain_is_never_touched(slurm, tmp_path):
    node = GHOST_NODES[0]
    slurm.run("scontrol", "update", "NodeName=" + node, "State=DRAIN", "Reason=NHC: fan 3 failed")
    try:
        remedy, said = engine(slurm, tmp_path)
        remedy.handle(incident(node), time.time())
        assert slurm.node(node)["Reason"].startswith("NHC: fan 3 failed")
        assert said.texts() == ["%s was already drained by someone else (NHC: fan 3 failed): left as it is" % node]
        ok, msg = remedy.resume(node)
        assert not ok and "drained by someone else" in msg
        assert "DRAIN" in slurm.node(node)["State"] and slurm.node(node)["Reason"].startswith("NHC: fan 3 failed")
        assert not any("State=RESUME" in h[0] for h in remedy.backend.history)
    finally:
        undrain(slurm, node)


def test_a_persons_reason_with_key_value_words_is_read_and_told_whole(slurm, tmp_path):
    """A person writes what they like in a drain's reason, "temp=91C" among it: scontrol -o prints it unquoted among
    its own Key=Value pairs. The reason is read whole (checked against sinfo's own field for it) and the room hears
    all of it; the node is left as it is."""
    node = GHOST_NODES[1]
    reason = "NHC: fan 3 failed; temp=91C (limit 85), Temp=92C"
    slurm.run("scontrol", "update", "NodeName=" + node, "State=DRAIN", "Reason=" + reason)
    try:
        shown = slurm.run("sinfo", "-h", "-N", "-n", node, "-o", "%E").stdout.strip()
        assert shown == reason  # Slurm's other view of the same field
        remedy, said = engine(slurm, tmp_path)
        assert remedy.backend.node(node).reason == reason
        remedy.handle(incident(node), time.time())
        assert said.texts() == ["%s was already drained by someone else (%s): left as it is" % (node, reason)]
        assert "DRAIN" in slurm.node_state(node)
        assert not any("State=DRAIN" in h[0] or "State=RESUME" in h[0] for h in remedy.backend.history)
    finally:
        undrain(slurm, node)


def test_breaker_trips_latches_and_is_reset_by_the_operator(slurm, tmp_path):
    remedy, said = engine(slurm, tmp_path, breaker={"max_nodes": 2, "window_s": 600})
    a, b, c, d = GHOST_NODES
    try:
        for n in (a, b, c, d):
            remedy.handle(incident(n), time.time())
        assert "DRAIN" in slurm.node_state(a) and "DRAIN" in slurm.node_state(b)
        assert "DRAIN" not in slurm.node_state(c) and "DRAIN" not in slurm.node_state(d)
        opened = [t for t in said.texts() if t.startswith("remedy breaker open")]
        assert opened == [
            "remedy breaker open: 2 nodes isolated within 600 s, %s not drained; sentinel-remedy reset-breaker "
            "closes it" % c
        ]  # told once
        assert [x["labels"]["severity"] for x in said.alerts if x["labels"]["action"] == "breaker_open"] == ["critical"]
        # latched: a restart of the daemon keeps it open, and what it drained
        remedy2, said2 = engine(slurm, tmp_path, breaker={"max_nodes": 2, "window_s": 600})
        assert remedy2.state.breaker.latched and set(remedy2.state.drained) == {a, b}
        remedy2.handle(incident(c), time.time())
        assert "DRAIN" not in slurm.node_state(c) and said2.alerts == []
        # the breaker never blocks a resume
        assert remedy2.resume(a)[0] and "DRAIN" not in slurm.node_state(a)
        assert remedy2.reset_breaker() == (True, "breaker closed")
        remedy2.handle(incident(c), time.time())
        assert "DRAIN" in slurm.node_state(c)
        assert "sentinel_remedy_breaker_open 0" in remedy2.metrics_text()
    finally:
        for n in (a, b, c, d):
            undrain(slurm, n)


@pytest.mark.parametrize("mode", ["dry_run", "off"])
def test_dry_run_and_off_change_nothing_in_slurm(slurm, tmp_path, mode):
    node = GHOST_NODES[1]
    before = slurm.node(node)
    remedy, said = engine(slurm, tmp_path, mode=mode)
    remedy.handle(incident(node), time.time())
    after = slurm.node(node)
    assert (after["State"], after.get("Reason")) == (before["State"], before.get("Reason"))
    assert not any(h[0][1] in ("update", "requeue") or h[0][0].endswith("scancel") for h in remedy.backend.history)
    if mode == "dry_run":
        assert said.texts() == ["dry run: %s would drain" % node]
        assert said.texts("zh") == ["演练：%s 将被隔离" % node]
    else:
        assert said.alerts == [] and remedy.backend.history == []


def test_application_xids_never_act(slurm, tmp_path):
    remedy, said = engine(slurm, tmp_path)
    for xid in (13, 31, 43, 45):
        remedy.handle(incident(GHOST_NODES[2], event_type="XID_WARNING", xid=xid), time.time())
    assert remedy.backend.history == [] and said.alerts == []
    assert "DRAIN" not in slurm.node_state(GHOST_NODES[2])


def test_a_hang_signals_the_job_and_leaves_the_node_in_service(slurm, tmp_path):
    remedy, said = engine(slurm, tmp_path)
    job = slurm.sbatch(CHECKPOINTING_JOB, "--requeue", "--open-mode=append")
    slurm.wait_started(job)
    try:
        remedy.handle(incident(REAL_NODE, event_type="NCCL_TIMEOUT", xid=None, gpu=-1), time.time())
        assert "DRAIN" not in slurm.node_state(REAL_NODE)
        assert said.texts() == ["job %s on %s asked to checkpoint; the node stays in service" % (job, REAL_NODE)]
        ckpt = os.path.join(slurm.dir, "checkpoint-%s.txt" % job)
        until(lambda: os.path.exists(ckpt), 10)
    finally:
        slurm.run("scancel", job)


def test_unknown_node_and_missing_scontrol_are_one_line_failures(slurm, tmp_path):
    remedy, said = engine(slurm, tmp_path)
    remedy.handle(incident("gpu-worker-99"), time.time())
    assert said.texts() == ["isolation failed: Slurm does not know node gpu-worker-99"]
    assert said.alerts[0]["labels"]["severity"] == "critical"
    remedy, said = engine(slurm, tmp_path / "b", env_path="/nonexistent", slurm={"scontrol": "scontrol"})
    remedy.handle(incident(GHOST_NODES[3]), time.time())
    assert said.texts() == ["isolation failed: scontrol not found (set [slurm] scontrol to its path)"]
    assert remedy.state.retry  # kept, to retry with back-off


def test_slurmctld_down_then_back_the_isolation_is_retried(slurm, tmp_path):
    node = GHOST_NODES[3]
    remedy, said = engine(slurm, tmp_path, slurm={"timeout_s": 20})
    slurm.stop_daemon("slurmctld")
    try:
        remedy.handle(incident(node), time.time())
        assert len(said.alerts) == 1
        assert said.texts()[0].startswith("isolation failed: scontrol show node: ")
        assert "Unable to contact slurm controller" in said.texts()[0]
        assert "\n" not in said.texts()[0]
    finally:
        slurm.restart_slurmctld()
    # the retry, once slurmctld is back: drained, told once more what was done
    remedy.tick(time.time() + 120)
    assert "DRAIN" in slurm.node_state(node)
    assert said.texts()[-1] == "%s drained, no job was running on it" % node
    assert [t for t in said.texts() if t.startswith("isolation failed")] == [said.texts()[0]]
    undrain(slurm, node)


def test_automatic_resume_only_on_a_healthy_event_for_a_self_clearing_fault(slurm, tmp_path):
    a, b = GHOST_NODES[0], GHOST_NODES[1]
    remedy, said = engine(slurm, tmp_path, policy={"self_clearing": ["PCIE_DOWNGRADE"]})
    try:
        remedy.handle(incident(a, event_type="PCIE_DOWNGRADE", xid=None), time.time())
        remedy.handle(incident(b, event_type="XID_FATAL", xid=79), time.time())
        assert "DRAIN" in slurm.node_state(a) and "DRAIN" in slurm.node_state(b)
        remedy.tick(time.time() + 3600)  # silence is never a healthy event
        assert "DRAIN" in slurm.node_state(a)
        remedy.handle(incident(b, event_type="XID_FATAL", xid=79, firing=False), time.time())
        assert "DRAIN" in slurm.node_state(b)  # an XID 79 does not clear by itself: the operator resumes
        remedy.handle(incident(a, event_type="PCIE_DOWNGRADE", xid=None, firing=False), time.time())
        assert "DRAIN" not in slurm.node_state(a)
        last = said.alerts[-1]  # the drain's announcement clears: NORMAL, the node back in service
        assert last["status"] == "resolved" and last["annotations"]["summary_en"] == "%s back in service" % a
        assert last["fingerprint"] == said.alerts[0]["fingerprint"]
    finally:
        undrain(slurm, a)
        undrain(slurm, b)


PYTHON_JOB = """#!%s
# a training loop with host_client.beat's checkpoint handler, as docs/REMEDY.md shows it
import os, time
from host_client.beat import on_checkpoint
ckpt = on_checkpoint()
restart = os.environ.get("SLURM_RESTART_COUNT", "0")
print("start", restart, flush=True)
for step in range(100000):
    time.sleep(0.05)  # one training step
    if ckpt.requested():
        with open("pycheckpoint-%%s.txt" %% os.environ["SLURM_JOB_ID"], "a") as f:
            f.write("step %%d restart %%s\\n" %% (step, restart))
"""


def test_beats_checkpoint_handler_in_a_python_job_under_slurm(slurm, tmp_path):
    import sys

    remedy, said = engine(slurm, tmp_path)
    job = slurm.sbatch(PYTHON_JOB % sys.executable, "--requeue", "--open-mode=append")
    slurm.wait_started(job)
    out = os.path.join(slurm.dir, "slurm-%s.out" % job)
    until(lambda: os.path.exists(out) and "start 0" in open(out).read(), 20)  # its handler is registered
    try:
        remedy.handle(incident(REAL_NODE, event_type="PROGRESS_STALL", xid=None, gpu=-1), time.time())
        ckpt = os.path.join(slurm.dir, "pycheckpoint-%s.txt" % job)
        until(lambda: os.path.exists(ckpt) and "restart 0" in open(ckpt).read(), 10)
        assert slurm.job(job)["JobState"] == "RUNNING"  # the signal asked for a checkpoint; it did not kill
    finally:
        slurm.run("scancel", job)


def test_slurmctld_slow_is_a_timeout_in_one_line_then_retried(slurm, tmp_path):
    import signal

    node = GHOST_NODES[2]
    remedy, said = engine(slurm, tmp_path, slurm={"timeout_s": 1})
    ctld = slurm.procs["slurmctld"]
    ctld.send_signal(signal.SIGSTOP)  # alive, holding its port, answering nothing: a slurmctld that is slow
    try:
        t0 = time.monotonic()
        remedy.handle(incident(node), time.time())
        assert time.monotonic() - t0 < 5
        assert said.texts() == ["isolation failed: scontrol did not answer within 1 s (slurmctld slow or down?)"]
    finally:
        ctld.send_signal(signal.SIGCONT)
    until(lambda: slurm.run("scontrol", "ping", check=False).returncode == 0, 20)
    remedy.tick(time.time() + 120)
    try:
        assert "DRAIN" in slurm.node_state(node)
        assert said.texts()[-1] == "%s drained, no job was running on it" % node
    finally:
        undrain(slurm, node)
