"""sentinel-probe and an operator's mistakes (issue 26), through the real entry point: --check-config refuses what
the daemon would refuse later (a gateway URL without a scheme, a port that does not parse, an unreadable replay
or token file, no gateway at all), each in one line with exit 2, and the daemon itself answers a status port in
use with one line, exit 2, before it makes its progress socket."""

import os
import socket

import pytest
from deploy_live import REPLAY
from opcheck import one_line, remove, run, script, shared_tmp, unprivileged

from testkit.net import free_port

PROBE = script("sentinel-probe", "host_client.probes.cli")


def probe_toml(d, *, gateway="http://127.0.0.1:9", listen="127.0.0.1:0", replay=REPLAY, extra=""):
    path = os.path.join(d, "probe.toml")
    sock = os.path.join(d, "progress.sock")
    with open(path, "w") as f:
        f.write(
            '[node]\nrack = "A03"\nhost = "gpu-worker-08"\ngateway = "%s"\n\n'
            '[gpu]\nsource = "replay"\nreplay = "%s"\n\n[xid]\nsource = "none"\n\n'
            '[progress]\nsocket = "%s"\n\n[status]\nlisten = "%s"\n%s' % (gateway, replay, sock, listen, extra)
        )
    os.chmod(path, 0o644)
    return path


@pytest.mark.parametrize(
    "gateway,says",
    [
        ("10.0.0.5:8080", "[node] gateway must start with http:// or https://"),
        ("http://10.0.0.5:80x0", "the port is not a number"),
        ("http:///api/v1/gpu_event", "has no host name"),
    ],
)
def test_check_config_refuses_a_gateway_url_the_daemon_would_refuse(tmp_path, gateway, says):
    cfg = probe_toml(str(tmp_path), gateway=gateway)
    line = one_line(run(PROBE + ["--check-config", "-c", cfg]), 2)
    assert says in line and "configuration error" in line
    # and the daemon says the same, in the same one line, instead of a ValueError traceback
    assert one_line(run(PROBE + ["-c", cfg], timeout=30), 2) == line


def test_check_config_without_a_gateway_says_the_daemon_needs_one(tmp_path):
    line = one_line(run(PROBE + ["--check-config", "-c", probe_toml(str(tmp_path), gateway="")]), 2)
    assert "no gateway URL ([node] gateway or --gateway)" in line


def test_check_config_refuses_a_status_port_that_does_not_parse(tmp_path):
    line = one_line(run(PROBE + ["--check-config", "-c", probe_toml(str(tmp_path), listen="127.0.0.1:94100")]), 2)
    assert "[status] listen must be host:port (port 0..65535)" in line


def test_check_config_refuses_an_unreadable_replay_and_token_file():
    d = shared_tmp()
    try:
        replay = os.path.join(d, "replay.json")
        with open(REPLAY, "rb") as src, open(replay, "wb") as dst:
            dst.write(src.read())
        os.chmod(replay, 0o600)  # root's
        cfg = probe_toml(d, replay=replay)
        line = one_line(run(unprivileged(PROBE + ["--check-config", "-c", cfg])), 2)
        assert "[gpu] replay: cannot read %s: Permission denied" % replay in line and "chown or chmod it" in line
        token = os.path.join(d, "ingest.token")
        with open(token, "w") as f:
            f.write("t" * 40)
        os.chmod(token, 0o600)
        cfg = probe_toml(d, replay=REPLAY, extra='\n[sender]\ntoken_file = "%s"\n' % token)
        line = one_line(run(unprivileged(PROBE + ["--check-config", "-c", cfg])), 2)
        assert "[sender] token_file: cannot read %s: Permission denied" % token in line and "t" * 40 not in line
    finally:
        remove(d)


def test_a_missing_replay_file_is_refused_by_check_config(tmp_path):
    missing = str(tmp_path / "nope.json")
    line = one_line(run(PROBE + ["--check-config", "-c", probe_toml(str(tmp_path), replay=missing)]), 2)
    assert "[gpu] replay: cannot read %s: No such file or directory" % missing in line


def test_the_daemon_with_its_status_port_in_use_is_one_line_and_makes_no_socket(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        cfg = probe_toml(str(tmp_path), gateway="http://127.0.0.1:%d" % free_port(), listen="127.0.0.1:%d" % port)
        assert run(PROBE + ["--check-config", "-c", cfg]).returncode == 0
        p = run(PROBE + ["-c", cfg], timeout=30)
    finally:
        taken.close()
    line = one_line(p, 2)
    assert "cannot listen on 127.0.0.1:%d: the port is in use" % port in line and "[status] listen" in line
    assert not (tmp_path / "progress.sock").exists()


def test_status_of_a_daemon_that_is_not_running_asks_if_it_is(tmp_path):
    url = "http://127.0.0.1:%d" % free_port()
    line = one_line(run(PROBE + ["status", "--url", url]), 2)
    assert line == "sentinel-probe: daemon not reachable at %s/status: connection refused: is it running?" % url


def test_check_config_refuses_a_zero_sender_timeout(tmp_path):
    cfg = probe_toml(str(tmp_path), extra="\n[sender]\ntimeout_s = 0\n")
    line = one_line(run(PROBE + ["--check-config", "-c", cfg]), 2)
    assert "[sender] timeout_s must be >= 0.05 s, got 0" in line


def test_the_daemon_logs_json_lines_and_an_unreachable_gateway_in_words(tmp_path):
    """The probe's log is the gateway's dialect: JSON lines, ISO-8601 UTC time, an event name; a gateway that is
    down reads "connection refused", never Python's `URLError: <urlopen error [Errno 111] ...>`."""
    import json
    import re
    import signal
    import subprocess
    import time

    gw = "http://127.0.0.1:%d/api/v1/gpu_event" % free_port()  # nobody listens there
    cfg = probe_toml(str(tmp_path), gateway=gw)
    err_path = tmp_path / "stderr"
    with open(err_path, "w") as err:
        p = subprocess.Popen(PROBE + ["-c", cfg], stdout=subprocess.DEVNULL, stderr=err)
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end and '"gateway_unreachable"' not in err_path.read_text():
            time.sleep(0.1)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(15)
    lines = [ln for ln in err_path.read_text().splitlines() if ln.strip()]
    recs = [json.loads(ln) for ln in lines]  # every line is one JSON object
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["ts"]) for r in recs), lines
    assert recs[0]["event"] == "probe_started" and recs[0]["host"] == "gpu-worker-08"
    (down,) = [r for r in recs if r.get("event") == "gateway_unreachable"]
    assert down["error"] == "connection refused" and down["severity"] == "warning" and down["url"] == gw
    assert "Errno" not in err_path.read_text() and "URLError" not in err_path.read_text()
    assert any(r.get("event") == "event_raised" for r in recs)


def test_the_daemon_logs_text_for_humans_when_asked(tmp_path):
    import signal
    import subprocess
    import time

    cfg = probe_toml(str(tmp_path), gateway="http://127.0.0.1:%d" % free_port())
    p = subprocess.Popen(
        PROBE + ["-c", cfg, "--log-format", "text"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    time.sleep(1.5)
    p.send_signal(signal.SIGTERM)
    _out, err = p.communicate(timeout=15)
    first = err.splitlines()[0]
    assert " INFO probe_started " in first and 'host="gpu-worker-08"' in first and not first.startswith("{")
