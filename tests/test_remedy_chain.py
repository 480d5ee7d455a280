"""The whole chain on loopback against real Slurm: a probe's event -> the gateway (its [remedy] lane) ->
sentinel-remedy (its own process, signed HTTP) -> Slurm (drain, USR1 to a real batch job that writes a checkpoint,
requeue) -> the operator's `sentinel-remedy resume` -> the job running again -> NORMAL on the emulator, every
announcement reaching the emulator THROUGH the gateway. And slurmctld down: the P0 still shows, "isolation failed"
reaches the emulator, the daemon keeps running and drains once slurmctld is back."""

import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("emulator.harness")
pytest.importorskip("waitress")

from emulator.harness import Harness
from host_client.gateway.config import Config
from testkit.net import free_port, running, wait_port
from testkit.slurm_live import CHECKPOINTING_JOB, GHOST_NODES, REAL_NODE, cluster_for_tests
from testkit.wait import until

SECRET = "remedy-secret-for-tests-0123456789"


@pytest.fixture(scope="module")
def slurm():
    c = cluster_for_tests()
    yield c
    c.stop()


class Chain:
    def __init__(self, slurm, tmp_path, *, grace_s=2, mode="enforce"):
        from gateway_front import ServedGateway

        self.slurm = slurm
        self.h = Harness(str(tmp_path / "emu")).start()
        self.port = free_port()
        self.delivered = []  # (level, key, text) of every alarm the gateway delivered to the emulator
        cfg = Config.from_dict(
            {
                "gateway": {"language": "en"},
                "terminals": {"emu": {"url": self.h.url, "key_id": self.h.cfg["key_id"], "secret_env": "EMU"}},
                "delivery": {"rate_interval_s": 0, "backoff_initial_s": 0.05, "backoff_max_s": 0.5},
                "remedy": {"url": "http://127.0.0.1:%d" % self.port, "key_id": "gw", "secret_env": "REMEDY"},
            },
            env={"EMU": self.h.cfg["secret"], "REMEDY": SECRET},
        )
        self.gw = ServedGateway(
            cfg, on_delivered=lambda _t, item, _a: self.delivered.append((item.level, item.key, item.text))
        )
        self.conf = tmp_path / "remedy.toml"
        self.conf.write_text(
            'key_id = "gw"\nsecret_env = "REMEDY_SECRET"\nport = %d\nmode = "%s"\nstate_dir = "%s"\n'
            "[slurm]\ncheckpoint_grace_s = %d\ntimeout_s = 20\nbackoff_max_s = 2\n"
            '[announce]\nurl = "%s"\n' % (self.port, mode, tmp_path / "remedy-state", grace_s, self.gw.url)
        )
        self.env = dict(slurm.env, REMEDY_SECRET=SECRET)
        self.log = open(tmp_path / "remedy.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "host_client.remedy.cli", "--config", str(self.conf)],
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_port(self.port, 20, alive=running(self.proc, str(tmp_path / "remedy.log")))
        self.log_path = tmp_path / "remedy.log"

    def event(self, **body):
        d = {"cluster_rack": "A03", "event_type": "XID_FATAL", "gpu_index": 3, "xid": 79}
        d.update(body)
        return self.gw.test_client().post("/api/v1/gpu_event", json=d).status_code

    def cli(self, *args):
        return subprocess.run(
            [sys.executable, "-m", "host_client.remedy.cli", "--config", str(self.conf), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def texts(self):
        return [t for _l, _k, t in self.delivered]

    def close(self):
        self.proc.terminate()
        self.proc.wait(15)
        self.log.close()
        self.gw.close()
        self.h.stop()


def test_fault_to_drain_checkpoint_requeue_resume_and_normal(slurm, tmp_path):
    job = slurm.sbatch(CHECKPOINTING_JOB, "--requeue", "--open-mode=append")
    slurm.wait_started(job)
    chain = Chain(slurm, tmp_path)
    try:
        t0 = time.monotonic()
        assert chain.event(node_host=REAL_NODE) == 200
        until(lambda: "DRAIN" in slurm.node_state(REAL_NODE), 5)  # within 5 s of the event reaching the gateway
        drained_after = time.monotonic() - t0
        assert slurm.node(REAL_NODE)["Reason"].startswith("sentinel: XID_FATAL xid 79 gpu 3 incident A03:")
        said = "%s drained, job %s asked to checkpoint, requeue in 2 s" % (REAL_NODE, job)
        until(lambda: said in chain.texts(), 10)
        levels = {t: lvl for lvl, _k, t in chain.delivered}
        assert levels[said] == 1  # P1: what was done; the fault itself stays the P0
        assert any(lvl == 2 and "gpu-worker-08" in t for lvl, _k, t in chain.delivered)
        ckpt = os.path.join(slurm.dir, "checkpoint-%s.txt" % job)
        until(lambda: os.path.exists(ckpt), 10)
        until(lambda: slurm.job(job).get("Restarts") == "1", 15)  # requeued after the grace
        r = chain.cli("resume", REAL_NODE)
        assert (r.returncode, r.stdout.strip()) == (0, "sentinel-remedy: %s resumed" % REAL_NODE)
        again = "Resolved: job %s running again on %s" % (job, REAL_NODE)
        until(lambda: again in chain.texts(), 40)
        assert [lvl for lvl, _k, t in chain.delivered if t == again] == [0]  # NORMAL, naming the job
        assert "checkpoint 0" in open(ckpt).read()
        assert drained_after < 5
        import urllib.request

        with urllib.request.urlopen(chain.gw.url + "/metrics", timeout=5) as resp:
            assert 'sentinel_gateway_remedy_incidents_total{result="sent"} 1' in resp.read().decode()
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % chain.port, timeout=5) as resp:
            page = resp.read().decode()
        assert 'sentinel_remedy_actions_total{kind="drain",result="ok"} 1' in page
        assert 'sentinel_remedy_actions_total{kind="requeue",result="ok"} 1' in page
    finally:
        slurm.run("scancel", job, check=False)
        chain.close()
    assert "Traceback" not in chain.log_path.read_text()


def test_slurmctld_down_isolation_failed_reaches_the_emulator(slurm, tmp_path):
    node = GHOST_NODES[0]
    chain = Chain(slurm, tmp_path)
    slurm.stop_daemon("slurmctld")
    try:
        assert chain.event(node_host=node) == 200
        failed = until(lambda: [t for t in chain.texts() if t.startswith("isolation failed: ")], 30)
        assert failed == [
            "isolation failed: scontrol show node: slurm_load_node error: Unable to contact slurm controller "
            "(connect failure)"
        ]
        assert [lvl for lvl, _k, t in chain.delivered if t == failed[0]] == [2]  # a P0: a person must act
        assert any(lvl == 2 and node in t and "isolation" not in t for lvl, _k, t in chain.delivered)  # the fault
        assert chain.proc.poll() is None  # still running
    finally:
        slurm.restart_slurmctld()
    try:
        until(lambda: "DRAIN" in slurm.node_state(node), 40)  # retried with back-off once slurmctld is back
        try:
            until(lambda: "%s drained, no job was running on it" % node in chain.texts(), 20)
        except AssertionError:
            raise AssertionError((chain.delivered, chain.log_path.read_text()[-3000:])) from None
        assert len([t for t in chain.texts() if t.startswith("isolation failed")]) == 1
    finally:
        slurm.run("scontrol", "update", "NodeName=" + node, "State=RESUME", check=False)
        chain.close()
    log = chain.log_path.read_text()
    assert "Traceback" not in log and SECRET not in log


def test_dry_run_and_a_persons_drain_through_the_chain(slurm, tmp_path):
    person, fresh = GHOST_NODES[1], GHOST_NODES[2]
    slurm.run("scontrol", "update", "NodeName=" + person, "State=DRAIN", "Reason=NHC: PSU 2 lost")
    before = slurm.node(fresh)
    chain = Chain(slurm, tmp_path, mode="dry_run")
    try:
        assert chain.event(node_host=fresh, cluster_rack="B01") == 200
        until(lambda: "dry run: %s would drain" % fresh in chain.texts(), 15)
        assert (slurm.node(fresh)["State"], slurm.node(fresh).get("Reason")) == (before["State"], before.get("Reason"))
    finally:
        chain.close()
    chain = Chain(slurm, tmp_path / "enforce")
    try:
        assert chain.event(node_host=person, cluster_rack="B02") == 200
        said = "%s was already drained by someone else (NHC: PSU 2 lost): left as it is" % person
        until(lambda: said in chain.texts(), 15)
        assert slurm.node(person)["Reason"].startswith("NHC: PSU 2 lost")
        r = chain.cli("resume", person)
        assert r.returncode == 1 and "drained by someone else" in r.stderr
        assert "DRAIN" in slurm.node_state(person)
    finally:
        chain.close()
        slurm.run("scontrol", "update", "NodeName=" + person, "State=RESUME", check=False)
