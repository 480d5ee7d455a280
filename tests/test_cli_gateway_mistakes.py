"""sentinel-gateway and an operator's mistakes (issue 26), through the real entry point: a port in use, an address
that is not this host's, a state_dir or secret the gateway's user cannot use, a second gateway on a state_dir. Each
is one line on stderr naming the thing and the fix, exit 3 (cannot start) or 2 (configuration), no traceback, and
nothing written to the state_dir; the gateway that holds the state_dir keeps serving."""

import json
import os
import socket
import subprocess

import pytest
from deploy_live import get, post, start_gateway, stop, wait_http
from opcheck import one_line, remove, run, script, shared_tmp, unprivileged

from testkit.net import free_port

SECRET = "9c0e" * 16
GW = script("sentinel-gateway", "host_client.gateway.cli")


def config(d, *, port, state_dir, host="127.0.0.1", secret_file=None):
    path = os.path.join(d, "gateway.toml")
    secret = 'secret_file = "%s"' % secret_file if secret_file else 'secret_env = "SENTINEL_SECRET_EMU"'
    with open(path, "w") as f:
        f.write(
            '[gateway]\nhost = "%s"\nport = %d\nstate_dir = "%s"\nlog_format = "text"\n\n'
            '[terminals.emu]\nurl = "http://127.0.0.1:9"\nkey_id = "emu"\n%s\n' % (host, port, state_dir, secret)
        )
    os.chmod(path, 0o644)
    return path


def gateway(cfg, *args, as_nobody=False):
    cmd = GW + ["-c", cfg, *args]
    return run(unprivileged(cmd) if as_nobody else cmd, env={"SENTINEL_SECRET_EMU": SECRET})


def test_port_in_use_is_one_line_exit_3_and_nothing_written(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    state = tmp_path / "state"
    try:
        p = gateway(config(str(tmp_path), port=port, state_dir=str(state)))
    finally:
        taken.close()
    line = one_line(p, 3)
    assert "127.0.0.1:%d" % port in line and "port is in use" in line and "--port" in line
    assert "gateway_started" not in p.stderr
    assert not state.exists()  # not even the directory


def test_address_not_of_this_host_is_one_line_exit_3(tmp_path):
    state = tmp_path / "state"
    p = gateway(config(str(tmp_path), port=free_port(), state_dir=str(state), host="192.0.2.1"))  # TEST-NET-1
    line = one_line(p, 3)
    assert "192.0.2.1" in line and "address not available" in line and "--host" in line
    assert not state.exists()


def test_a_port_out_of_range_on_the_command_line_is_a_usage_error(tmp_path):
    p = gateway(config(str(tmp_path), port=free_port(), state_dir=str(tmp_path / "s")), "--port", "99999")
    assert p.returncode == 2 and "99999 is not a port" in p.stderr and "Traceback" not in p.stderr


def test_state_dir_the_user_cannot_write_is_one_line_exit_3():
    d = shared_tmp()
    try:
        state = os.path.join(d, "state")
        os.mkdir(state, 0o755)  # root's: the unprivileged gateway cannot create its lock file there
        cfg = config(d, port=free_port(), state_dir=state)
        p = gateway(cfg, as_nobody=True)
        line = one_line(p, 3)
        assert "cannot use state_dir %s" % state in line and "Permission denied" in line and "user" in line
        assert os.listdir(state) == []
        # --check-config says it before systemd starts the daemon
        p = gateway(cfg, "--check-config", as_nobody=True)
        line = one_line(p, 2)
        assert "state_dir %s is not writable" % state in line
    finally:
        remove(d)


def test_secret_file_the_user_cannot_read_is_one_line_exit_2():
    d = shared_tmp()
    try:
        secret = os.path.join(d, "emu.secret")
        with open(secret, "w") as f:
            f.write(SECRET)
        os.chmod(secret, 0o600)  # root's
        state = os.path.join(d, "state")
        p = gateway(config(d, port=free_port(), state_dir=state, secret_file=secret), as_nobody=True)
        line = one_line(p, 2)
        assert "cannot read secret_file %s: Permission denied (this user, uid" % secret in line
        assert "chown or chmod it" in line
        assert SECRET not in p.stderr
        assert not os.path.exists(state)
    finally:
        remove(d)


def test_a_second_gateway_on_the_same_state_dir_says_so_and_the_first_keeps_serving(tmp_path):
    first, url = start_gateway(tmp_path, "http://127.0.0.1:9", "emu", SECRET)
    try:
        state = tmp_path / "gw-state"
        before = sorted(os.listdir(state))
        (tmp_path / "second").mkdir()
        cfg = config(str(tmp_path / "second"), port=free_port(), state_dir=str(state))
        p = gateway(cfg)
        line = one_line(p, 3)
        assert "state_dir %s is in use by another gateway (pid %d)" % (state, first.pid) in line
        assert sorted(os.listdir(state)) == before  # the second wrote nothing there
        assert first.poll() is None
        status, text = get(url + "/healthz")
        assert status == 200 and json.loads(text)["ok"] is True
        ev = {"event_type": "XID_FATAL", "cluster_rack": "A03", "node_host": "gpu-worker-08", "gpu_index": 5, "xid": 79}
        assert post(url + "/api/v1/gpu_event", json.dumps(ev))[0] == 200
    finally:
        stop(first)
    # once the first is gone, the state_dir is free again
    p = gateway(cfg, "--check-config")
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("server", ["epoll"])  # the one front since issue 23
def test_the_front_serves_on_the_socket_the_cli_bound(tmp_path, server):
    port = free_port()
    cfg = config(str(tmp_path), port=port, state_dir=str(tmp_path / "state"))
    with open(cfg) as f:
        text = f.read().replace('log_format = "text"\n', 'log_format = "text"\nserver = "%s"\n' % server)
    with open(cfg, "w") as f:
        f.write(text)
    proc = subprocess.Popen(
        GW + ["-c", cfg],
        env=dict(os.environ, SENTINEL_SECRET_EMU=SECRET),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_http("http://127.0.0.1:%d/healthz" % port, proc)
        assert (tmp_path / "state" / "gateway.lock").read_text().strip() == str(proc.pid)
    finally:
        stop(proc)


def test_a_terminal_url_whose_port_does_not_parse_is_refused_by_check_config_and_the_daemon(tmp_path):
    cfg = config(str(tmp_path), port=free_port(), state_dir=str(tmp_path / "state"))
    with open(cfg) as f:
        text = f.read().replace('url = "http://127.0.0.1:9"', 'url = "http://127.0.0.1:87x5"')
    with open(cfg, "w") as f:
        f.write(text)
    for args in (["--check-config"], []):
        line = one_line(gateway(cfg, *args), 2)
        assert "terminals.emu.url 'http://127.0.0.1:87x5': the port is not a number" in line
    assert not (tmp_path / "state").exists()


def test_log_lines_are_json_with_an_iso_utc_time_and_a_rejection_names_its_client(tmp_path):
    """--log-format json over the config's text: each stderr line one JSON object, ts ISO-8601 UTC; each
    event_rejected line names the address the bad body came from, whichever check refused it."""
    import http.client
    import re
    import subprocess
    import sys

    port = free_port()
    cfg = config(str(tmp_path), port=port, state_dir=str(tmp_path / "state"))
    env = dict(os.environ, SENTINEL_SECRET_EMU=SECRET)
    proc = subprocess.Popen(
        [sys.executable, "-m", "host_client.gateway.cli", "-c", cfg, "--log-format", "json"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_http("http://127.0.0.1:%d/healthz" % port, proc)
        # each way a body is refused, from a connection of its own: the service's checks (an unknown type, a batch
        # too big, a webhook that is not one) and the front's (not JSON, over max_body)
        sent = [
            ("/api/v1/gpu_event", b'{"event_type": "NO_SUCH_TYPE"}', 422, "gpu_event"),
            ("/api/v1/gpu_event", b"[" + b",".join([b"{}"] * 1001) + b"]", 422, "gpu_event"),
            ("/api/v1/alertmanager", b'{"alerts": 5}', 422, "alertmanager"),
            ("/api/v1/grafana", b"not json", 400, "grafana"),
            ("/api/v1/gpu_event", b"x" * (1 << 20), 413, "gpu_event"),
        ]
        mine = []
        for path, body, status, source in sent:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("POST", path, body, {"Content-Type": "application/json"})
            mine.append(("%s:%d" % c.sock.getsockname()[:2], source))
            assert c.getresponse().status == status, (path, body[:40])
            c.close()
    finally:
        stop(proc)
    lines = [ln for ln in proc.stderr.read().splitlines() if ln.strip()]
    recs = [json.loads(ln) for ln in lines]  # every line is JSON
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["ts"]) for r in recs), lines
    assert [r["event"] for r in recs if r.get("event") in ("gateway_started", "gateway_stopped")] == [
        "gateway_started",
        "gateway_stopped",
    ]
    rejected = [r for r in recs if r.get("event") == "event_rejected"]
    assert [(r["client"], r["source"]) for r in rejected] == mine
    assert all(r["severity"] == "info" for r in rejected)
