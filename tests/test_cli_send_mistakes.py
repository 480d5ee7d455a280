"""sentinel-send and an operator's mistakes (issue 26), through the real entry point over loopback: a terminal
that is not running, one that accepts and never answers, a zero or negative timeout, a URL that is not one, a
secret file the user cannot read. Each ends with one line naming the thing and the fix, the documented exit code
(2 usage, 3 unreachable) and no traceback; every retry is said on stderr as it happens."""

import os
import re
import socket
import urllib.request

import pytest
from opcheck import one_line, remove, run, script, shared_tmp, unprivileged

from testkit.net import free_port
from testkit.terminal import LoopbackTerminal

SEND = script("sentinel-send", "host_client.cli")
SECRET = "5e7d" * 16


@pytest.fixture
def secret_file(tmp_path):
    p = tmp_path / "terminal.secret"
    p.write_text(SECRET + "\n")
    return str(p)


def send(url, secret_file, *extra, **kw):
    cmd = SEND + ["--url", url, "--key-id", "k1", "--secret-file", secret_file, "--preset", "p1", "--text", "t"]
    return run(cmd + list(extra), **kw)


def test_a_terminal_that_is_not_running_is_named_with_is_it_running(secret_file):
    url = "http://127.0.0.1:%d" % free_port()
    p = send(url, secret_file, "--retries", "0")
    line = one_line(p, 3)
    assert line.startswith(url) and "connection refused (1 try): is it running?" in line


def test_a_terminal_that_never_answers_times_out_saying_each_try(secret_file):
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)  # the kernel completes the connections; nobody ever reads or answers
    url = "http://127.0.0.1:%d" % mute.getsockname()[1]
    try:
        p = send(url, secret_file, "--timeout", "0.3", "--retries", "2")
    finally:
        mute.close()
    assert p.returncode == 3 and "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 3, p.stderr
    assert re.fullmatch(r"sentinel-send: try 2/3 after \d+\.\d s: timed out", lines[0]), lines
    assert re.fullmatch(r"sentinel-send: try 3/3 after \d+\.\d s: timed out", lines[1]), lines
    assert "timed out (3 tries of 0.3 s each): is it running, and is this its address?" in lines[2]


def test_retries_of_a_busy_terminal_are_said_and_the_alarm_arrives(secret_file):
    with LoopbackTerminal({"k1": SECRET.encode()}, fail_first=2) as term:
        p = send(term.url, secret_file)
        assert p.returncode == 0, p.stderr
        assert len(term.accepted) == 1
    lines = p.stderr.strip().splitlines()
    assert [re.sub(r"after \d+\.\d s", "after X s", ln) for ln in lines] == [
        "sentinel-send: try 2/4 after X s: answered 503 busy",
        "sentinel-send: try 3/4 after X s: answered 503 busy",
    ]
    assert "delivered (P1, 3 attempts)" in p.stdout


@pytest.mark.parametrize("timeout", ["0", "-1", "-0.5"])
def test_zero_or_negative_timeout_is_a_usage_error(secret_file, timeout):
    p = send("http://127.0.0.1:%d" % free_port(), secret_file, "--timeout", timeout)
    line = one_line(p, 2)
    assert "--timeout must be more than 0 seconds" in line


def test_negative_retries_is_a_usage_error(secret_file):
    line = one_line(send("http://127.0.0.1:9", secret_file, "--retries", "-1"), 2)
    assert "--retries must be 0 or more" in line


@pytest.mark.parametrize(
    "url,says",
    [
        ("10.0.0.5:8765", "must start with http:// or https://"),
        ("http://127.0.0.1:87x5", "the port is not a number"),
        ("http://:8765", "has no host name"),
        ("http://127.0.0.1:0", "port 0"),
    ],
)
def test_a_url_that_is_not_one_is_a_usage_error(secret_file, url, says):
    line = one_line(send(url, secret_file), 2)
    assert says in line and "--url" in line


def test_a_secret_file_the_user_cannot_read_is_a_usage_error():
    d = shared_tmp()
    try:
        path = os.path.join(d, "terminal.secret")
        with open(path, "w") as f:
            f.write(SECRET)
        os.chmod(path, 0o600)
        cmd = SEND + ["--url", "http://127.0.0.1:9", "--key-id", "k1", "--secret-file", path, "--ack"]
        p = run(unprivileged(cmd))
        line = one_line(p, 2)
        assert "cannot read secret file %s: Permission denied" % path in line and SECRET not in p.stderr
        assert "chown or chmod it, or run as its owner" in line
    finally:
        remove(d)


def test_a_key_id_without_its_secret_is_a_usage_error_not_the_emulators_secret(tmp_path):
    """SENTINEL_URL and SENTINEL_KEY_ID set, SENTINEL_SECRET forgotten: the local emulator's secret (another key
    id's) is not taken quietly to earn a 401 bad_signature; one line says what is missing."""
    from emulator import config as emu_config

    emu_config.load(str(tmp_path / "gpu-sentinel" / "emulator.json"))  # a local emulator's file, as a laptop has
    with LoopbackTerminal({"box-7": SECRET.encode()}) as term:
        env = {"XDG_CONFIG_HOME": str(tmp_path), "SENTINEL_URL": term.url, "SENTINEL_KEY_ID": "box-7"}
        p = run(SEND + ["--preset", "p1", "--text", "t"], env=env)
        assert term.alarms() == []  # nothing signed with the wrong secret went out
    line = one_line(p, 2)
    assert line.startswith("sentinel-send: key id 'box-7' (--key-id or SENTINEL_KEY_ID) has no secret")
    assert "set SENTINEL_SECRET or SENTINEL_SECRET_FILE" in line


def test_ack_says_how_long_the_mute_lasts_from_the_terminal(tmp_path, secret_file):
    """Against the emulator (its signed HTTP front and status page): the ACK's line says the mute's length."""
    import json

    pytest.importorskip("emulator.harness")
    from emulator.harness import Harness

    with Harness(str(tmp_path / "emu"), terminal={"mute_s": 600}) as h:
        sf = tmp_path / "emu.secret"
        sf.write_text(h.cfg["secret"])
        base = SEND + ["--url", h.url, "--key-id", h.cfg["key_id"], "--secret-file", str(sf)]
        p = run(base + ["--ack"])
        assert p.returncode == 0, p.stderr
        assert re.fullmatch(
            r"%s/api/v1/ack: ok, muted for 10 min \(until \d\d:\d\d\); --unmute ends it\n" % re.escape(h.url), p.stdout
        )
        assert json.loads(urllib.request.urlopen(h.url + "/api/v1/status", timeout=5).read())["mute"]["active"]
        p = run(base + ["--ack", "--key", "A03:w8"])
        assert p.returncode == 0, p.stderr
        assert "ok, incident A03:w8 silenced for the terminal's mute_s (15 min unless configured" in p.stdout
        # the terminal names who acknowledged: this command, not "api"
        assert run(base + ["--preset", "p0", "--text", "GPU 7 fell off the bus", "--key", "A03:w9"]).returncode == 0
        assert run(base + ["--ack", "--key", "A03:w9"]).returncode == 0
        status = json.loads(urllib.request.urlopen(h.url + "/api/v1/status", timeout=5).read())
        (row,) = [r for r in status["active"] if r["key"] == "A03:w9"]
        assert row["acknowledged_by"] == "sentinel-send"
