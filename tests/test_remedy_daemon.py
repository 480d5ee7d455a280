"""sentinel-remedy as its users meet it without Slurm in the way: remedy.toml's one-line errors, the policy core's
decisions (NVIDIA's XID catalogue), the breaker, its signed HTTP front refusing what is not the gateway's, and the
operator's commands. Real processes over loopback; Slurm itself is tests/test_remedy_slurm.py's."""

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("waitress")

from host_client.client import AlarmClient
from host_client.errors import ConfigError
from host_client.remedy.actions import Action, Breaker, Incident, Policy, decide, drain_reason, ours
from host_client.remedy.config import from_dict
from host_client.remedy.feed import PATH_INCIDENT, wire
from testkit.net import free_port, running, wait_port

SECRET = "remedy-secret-0123456789abcdef"


def inc(event_type="XID_FATAL", xid=None, host="gpu-worker-08"):
    return Incident(id="i1", firing=True, level="P0", host=host, event_type=event_type, xid=xid)


@pytest.mark.parametrize("xid", [48, 64, 74, 79, 92, 94, 95, 119, 120])
def test_the_catalogues_reset_and_field_xids_isolate(xid):
    assert decide(Policy(), inc(xid=xid)) is Action.ISOLATE


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 63])
def test_application_xids_never_isolate(xid):
    assert decide(Policy(), inc(event_type="XID_FATAL", xid=xid)) is Action.NONE


def test_event_types_lost_gpu_pcie_and_hangs():
    p = Policy()
    assert decide(p, inc("GPU_LOST")) is Action.ISOLATE
    assert decide(p, inc("PCIE_DOWNGRADE")) is Action.ISOLATE
    assert decide(p, inc("NCCL_TIMEOUT")) is Action.SIGNAL  # a hang is the job's: no drain
    assert decide(p, inc("PROGRESS_STALL")) is Action.SIGNAL
    assert decide(p, inc("THERMAL")) is Action.NONE


def test_drain_reason_is_ours_and_safe():
    r = drain_reason(Incident(id='x"; rm -rf /', firing=True, level="P0", host="n", event_type="GPU_LOST", gpu=2))
    assert r.startswith("sentinel: GPU_LOST gpu 2 incident x_; rm -rf /") and '"' not in r and ours(r)
    assert not ours("NHC: fan") and not ours("") and not ours(None)


def test_breaker_latches_until_reset():
    b = Breaker(max_nodes=2, window_s=60)
    assert b.admit(0) and b.admit(1) and not b.admit(2) and b.latched
    assert not b.admit(1000)  # latched: the window passing does not close it
    b.reset()
    assert b.admit(1000)


def conf(**over):
    d = {"key_id": "gw", "secret_env": "S"}
    d.update(over)
    return d


@pytest.mark.parametrize(
    "data,says",
    [
        ({"secret_env": "S"}, "key_id is required"),
        ({"key_id": "gw"}, "the secret is required: set secret_env"),
        (conf(mode="on"), "mode must be one of off, dry_run, enforce (got 'on')"),
        (conf(slurm={"checkpoint_signal": "KILL"}), "slurm.checkpoint_signal 'KILL' is not a signal a job can trap"),
        (conf(slurm={"checkpoint_grace_s": -1}), "slurm.checkpoint_grace_s must be between 0 and 86400"),
        (conf(breaker={"max_nodes": 0}), "breaker.max_nodes must be between 1 and 100000"),
        (conf(policy={"xids": {"79": "reboot"}}), "policy.xids.79 must be one of isolate, signal, none"),
        (conf(policy={"xids": {"abc": "none"}}), "policy.xids: 'abc' is not an XID number"),
        (conf(policy={"self_clearing": ["thermal"]}), "policy.self_clearing must be a list of event types"),
        (conf(slurm={"scontrl": "x"}), "unknown key slurm.scontrl: did you mean scontrol?"),
        (conf(mdoe="enforce"), "unknown key mdoe: did you mean mode?"),
        (conf(slurm=[]), "[slurm] must be a table"),
        (conf(slurm={"timeout_s": "15"}), "slurm.timeout_s must be a number"),
        (conf(slurm={"backoff_initial_s": 10, "backoff_max_s": 5}), "slurm.backoff_max_s must be >= slurm.backoff_"),
        (conf(host=""), "host must be a non-empty string"),
        (conf(announce={"url": "gateway:9100"}), "announce.url must be the gateway's http:// or https:// URL"),
        (conf(secret="x"), "unknown key secret"),
    ],
)
def test_config_errors_are_one_line(data, says):
    with pytest.raises(ConfigError) as e:
        from_dict(data, env={"S": SECRET})
    assert says in str(e.value) and "\n" not in str(e.value)


def test_defaults_change_nothing_and_state_goes_under_xdg_state_home():
    c = from_dict(conf(), env={"S": SECRET, "XDG_STATE_HOME": "/tmp/xdg"})
    assert c.mode == "off" and c.state_dir == "/tmp/xdg/sentinel-remedy"
    assert (c.checkpoint_signal, c.checkpoint_grace_s, c.max_restarts_per_job) == ("USR1", 120, 3)
    assert (c.scontrol, c.scancel, c.squeue) == ("scontrol", "scancel", "squeue")
    assert from_dict(conf(), env={"S": SECRET}).state_dir == "/var/lib/sentinel-remedy"
    c = from_dict(conf(policy={"xids": {"43": "isolate"}, "self_clearing": ["PCIE_DOWNGRADE"]}), env={"S": SECRET})
    assert decide(c.policy, inc(xid=43)) is Action.ISOLATE and c.policy.self_clearing == {"PCIE_DOWNGRADE"}


def run_cli(*args, env=None, timeout=30):
    import os

    return subprocess.run(
        [sys.executable, "-m", "host_client.remedy.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, **(env or {})),
    )


def test_check_config_and_its_errors(tmp_path):
    f = tmp_path / "remedy.toml"
    f.write_text('key_id = "gw"\nsecret_env = "S"\n')
    r = run_cli("--config", str(f), "--check-config", env={"S": SECRET})
    assert r.returncode == 0 and "is valid (mode off" in r.stdout
    f2 = tmp_path / "enforce.toml"
    f2.write_text('key_id = "gw"\nsecret_env = "S"\nmode = "enforce"\n[slurm]\nscontrol = "/nonexistent/scontrol"\n')
    r = run_cli("--config", str(f2), "--check-config", env={"S": SECRET})
    assert r.returncode == 0
    assert (
        r.stderr
        == "sentinel-remedy: warning: scontrol '/nonexistent/scontrol' is not found on PATH ([slurm] scontrol)\n"
    )
    r = run_cli("--config", str(f), "--check-config", env={"S": ""})
    assert (r.returncode, r.stderr) == (2, "sentinel-remedy: secret_env: environment variable S is not set or empty\n")
    f.write_text("key_id = \n")
    r = run_cli("--config", str(f), "--check-config")
    assert r.returncode == 2 and r.stderr.startswith("sentinel-remedy: %s is not valid TOML" % f)
    assert r.stderr.count("\n") == 1
    r = run_cli("--config", str(tmp_path / "none.toml"))
    assert r.returncode == 2 and "cannot read" in r.stderr and "Traceback" not in r.stderr


@pytest.fixture
def daemon(tmp_path):
    port, gw_port = free_port(), free_port()
    f = tmp_path / "remedy.toml"
    f.write_text(
        'key_id = "gw"\nsecret_env = "S"\nport = %d\nmode = "enforce"\nstate_dir = "%s"\n'
        '[slurm]\nscontrol = "/nonexistent/scontrol"\nsqueue = "/nonexistent/squeue"\n'
        '[announce]\nurl = "http://127.0.0.1:%d"\n' % (port, tmp_path / "state", gw_port)
    )
    procs = []

    def start():
        import os

        with open(tmp_path / "log", "ab") as out:
            p = subprocess.Popen(
                [sys.executable, "-m", "host_client.remedy.cli", "--config", str(f)],
                env=dict(os.environ, S=SECRET),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        procs.append(p)
        wait_port(port, 20, alive=running(p, str(tmp_path / "log")))
        return p

    d = type("Daemon", (), {})()
    d.port, d.conf, d.log, d.gw_port, d.start = port, f, tmp_path / "log", gw_port, start
    d.proc = start()
    yield d
    for p in procs:
        p.terminate()
        p.wait(10)


def post(port, path, body, secret=SECRET, key_id="gw"):
    req = AlarmClient("http://127.0.0.1:%d" % port, key_id, secret).sign(path, body)
    r = urllib.request.Request(req.url, req.body, req.headers)
    try:
        with urllib.request.urlopen(r, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def body(**over):
    b = wire(
        msg_id="m%d" % time.monotonic_ns(),
        incident="A03:gpu-worker-08:GPU_LOST",
        firing=True,
        level="P0",
        rack="A03",
        host="gpu-worker-08",
        event_type="GPU_LOST",
        gpu=-1,
    )
    b.update(over)
    return b


def test_front_refuses_what_is_not_the_gateways(daemon):
    port, log, p = daemon.port, daemon.log, daemon.proc
    assert post(port, PATH_INCIDENT, body(), secret="not-the-secret-000000")[0] == 401
    assert post(port, PATH_INCIDENT, body(), key_id="who")[0] == 401
    status, a = post(port, PATH_INCIDENT, body(host="gpu-worker-08 State=DOWN"))
    assert (status, a["error"]) == (422, "bad_field") and "host must be a node name" in a["message"]
    assert post(port, PATH_INCIDENT, body(state="maybe"))[0] == 422
    assert post(port, PATH_INCIDENT, body(detail="x" * 9000))[0] == 413
    status, a = post(port, PATH_INCIDENT, body())
    assert (status, a) == (200, {"ok": True, "queued": True, "mode": "enforce"})
    # the daemon cannot reach scontrol: it says so in one line, keeps running, and retries
    end = time.monotonic() + 10
    while time.monotonic() < end and "isolation_failed" not in log.read_text():
        time.sleep(0.05)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    failed = [x for x in lines if x["event"] == "isolation_failed"]
    assert failed[0]["why"] == "/nonexistent/scontrol not found (set [slurm] scontrol to its path)"
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        page = r.read().decode()
    assert 'sentinel_remedy_actions_total{kind="drain",result="failed"} 1' in page
    assert "sentinel_remedy_isolations_retrying 1" in page
    with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port, timeout=5) as r:
        h = json.loads(r.read())
    assert h["ok"] and h["retrying"] == ["A03:gpu-worker-08:GPU_LOST"]
    assert p.poll() is None and "Traceback" not in log.read_text() and SECRET not in log.read_text()


def test_operator_commands_through_the_running_daemon(daemon):
    f = daemon.conf
    r = run_cli("--config", str(f), "reset-breaker", env={"S": SECRET})
    assert (r.returncode, r.stdout) == (0, "sentinel-remedy: breaker closed\n")
    r = run_cli("--config", str(f), "resume", "gpu-worker-08", env={"S": SECRET})
    assert r.returncode == 1
    assert (
        r.stderr
        == "sentinel-remedy: resume failed: /nonexistent/scontrol not found (set [slurm] scontrol to its path)\n"
    )
    audit = [json.loads(x) for x in (f.parent / "state" / "audit.jsonl").read_text().splitlines()]
    assert [(a["action"], a["result"]) for a in audit] == [("reset_breaker", "ok"), ("resume", "failed")]


def test_beat_on_checkpoint_names_a_missing_signal_and_clears_once_read():
    import os
    import signal

    from host_client.beat import on_checkpoint

    with pytest.raises(ValueError, match="no signal SIGNOPE"):
        on_checkpoint("NOPE")
    old = signal.getsignal(signal.SIGUSR2)
    try:
        req = on_checkpoint("SIGUSR2")
        assert not req.requested()
        os.kill(os.getpid(), signal.SIGUSR2)
        assert req.requested() and not req.requested() and req.count == 1
    finally:
        signal.signal(signal.SIGUSR2, old)


def test_the_shipped_example_and_unit_are_what_the_docs_say():
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from host_client.remedy.config import load_config

    c = load_config(os.path.join(root, "examples", "remedy.toml"), env={"SENTINEL_REMEDY_SECRET": SECRET})
    assert c.mode == "dry_run" and c.port == 9130 and c.max_nodes == 3
    unit = open(os.path.join(root, "deploy", "sentinel-remedy.service")).read()
    assert "ExecStart=/opt/gpu-sentinel/.venv/bin/sentinel-remedy --config /etc/sentinel/remedy.toml\n" in unit
    assert "PrivateUsers=" not in unit  # munge authenticates the process by its real uid


def test_announcements_the_gateway_did_not_take_survive_a_restart(daemon):
    from testkit.terminal import LoopbackTerminal

    assert post(daemon.port, PATH_INCIDENT, body())[0] == 200  # scontrol missing: "isolation failed", gateway down
    state = daemon.conf.parent / "state" / "state.json"

    def outbox():
        try:
            return json.loads(state.read_text()).get("outbox")
        except (OSError, ValueError):
            return None

    end = time.monotonic() + 10
    while time.monotonic() < end and not outbox():
        time.sleep(0.05)
    ((url, alert),) = outbox()
    assert alert["annotations"]["summary_en"].startswith("isolation failed: /nonexistent/scontrol not found")
    daemon.proc.terminate()
    daemon.proc.wait(10)
    with LoopbackTerminal({}, port=daemon.gw_port) as gateway:  # records every POST: the gateway is back
        daemon.start()
        end = time.monotonic() + 15
        while time.monotonic() < end and not gateway.received:
            time.sleep(0.05)
        (_t, path, sent), *_ = gateway.received
    assert path == "/api/v1/alertmanager" and url == "http://127.0.0.1:%d" % daemon.gw_port
    assert sent["alerts"][0]["annotations"]["summary_en"] == alert["annotations"]["summary_en"]
