"""sentinel-emulator as an operator meets it (issue 26), through the real entry point: a port in use or an address
that is not this host's is one line and exit 1 with nothing written; each accepted alarm, ACK and unmute is one
line in its log; SIGHUP turns quiet hours off without a restart; the printed sentinel-send command works from a
shell that only has what `make emulator` leaves (no .venv/bin on PATH), and the URL for another machine is not
127.0.0.1 when it listens on every address."""

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from deploy_live import stop, wait_http
from opcheck import ROOT, one_line, run, script

from emulator import config as emu_config
from testkit.net import free_port

EMU = script("sentinel-emulator", "emulator")
SEND = script("sentinel-send", "host_client.cli")
BIN = os.path.dirname(sys.executable)


def make_config(tmp_path, **terminal):
    """An emulator config as a first start leaves it (random secret, mode 600), quiet hours as given."""
    path = str(tmp_path / "gpu-sentinel" / "emulator.json")
    emu_config.load(path, {})
    with open(path) as f:
        cfg = json.load(f)
    cfg["terminal"] = dict(terminal or {"quiet_enabled": False})
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path, cfg


def env_for(tmp_path, path_without_venv=False):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    env.update({"XDG_CONFIG_HOME": str(tmp_path), "SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy"})
    if path_without_venv:
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if os.path.abspath(p) != BIN)
    return env


def start(tmp_path, *args, env=None):
    port = free_port()
    cmd = EMU + ["--headless", "--no-voice", "--port", str(port), *args]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env or env_for(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_http("http://127.0.0.1:%d/api/v1/status" % port, proc)
    return proc, "http://127.0.0.1:%d" % port


def status(url):
    with urllib.request.urlopen(url + "/api/v1/status", timeout=5) as r:
        return json.loads(r.read())


def finish(proc):
    stop(proc)
    out, err = proc.communicate(timeout=10)
    return out, err


def test_port_in_use_is_one_line_exit_1_and_no_state_written(tmp_path):
    make_config(tmp_path)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        p = run(EMU + ["--headless", "--no-voice", "--port", str(port), "--run-for", "5"], env=env_for(tmp_path))
    finally:
        taken.close()
    line = one_line(p, 1)
    assert "cannot listen on 127.0.0.1:%d: the port is in use" % port in line and "--port" in line
    assert os.listdir(tmp_path / "gpu-sentinel") == ["emulator.json"]  # no emulator-state.json


def test_an_address_not_of_this_host_is_one_line_exit_1(tmp_path):
    make_config(tmp_path)
    p = run(EMU + ["--headless", "--no-voice", "--host", "192.0.2.1", "--run-for", "5"], env=env_for(tmp_path))
    line = one_line(p, 1)
    assert "cannot listen on 192.0.2.1:8765: address not available" in line and "--host" in line


def test_each_accepted_alarm_ack_and_unmute_is_one_line_in_the_log(tmp_path):
    make_config(tmp_path)
    proc, url = start(tmp_path)
    try:
        base = SEND + ["--url", url]
        env = env_for(tmp_path)
        assert (
            run(
                base + ["--preset", "p0", "--text", "XID 79 on gpu-worker-08", "--key", "A03:w8", "--id", "m-1"],
                env=env,
            ).returncode
            == 0
        )
        assert run(base + ["--ack"], env=env).returncode == 0
        assert run(base + ["--unmute"], env=env).returncode == 0
        assert run(base + ["--preset", "normal", "--key", "A03:w8"], env=env).returncode == 0
    finally:
        _, err = finish(proc)
    recs = [json.loads(ln) for ln in err.splitlines() if ln.strip()]  # the log: one JSON object per line
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["ts"]) for r in recs), err
    assert {r["logger"] for r in recs} == {"sentinel.emulator"}
    lines = [r["message"] for r in recs if r.get("message", "").startswith("accepted ")]
    assert lines[:3] == [
        "accepted P0 alarm key A03:w8 id m-1: XID 79 on gpu-worker-08",
        "accepted ACK: mute",
        "accepted unmute: the mute and the acknowledgements end",
    ], err
    assert re.fullmatch(r"accepted NORMAL alarm key A03:w8 id \w+: .+", lines[3]), lines


def test_sighup_turns_quiet_hours_off_without_a_restart(tmp_path):
    now = time.gmtime()
    minute = now.tm_hour * 60 + now.tm_min
    hhmm = lambda m: "%02d:%02d" % ((m % 1440) // 60, m % 60)  # noqa: E731
    # quiet hours from an hour ago to an hour from now, in UTC: in force at start
    path, cfg = make_config(
        tmp_path, quiet_start=hhmm(minute - 60), quiet_end=hhmm(minute + 60), utc_offset_min=0, quiet_enabled=True
    )
    proc, url = start(tmp_path)
    try:
        assert status(url)["quiet"]["active"] is True
        cfg["terminal"]["quiet_enabled"] = False
        with open(path, "w") as f:
            json.dump(cfg, f)
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while status(url)["quiet"]["active"] and time.monotonic() < deadline:
            time.sleep(0.05)
        st = status(url)
        assert st["quiet"]["active"] is False and st["quiet"]["enabled"] is False
        # a bad value on the next reload is refused and the running settings stay
        cfg["terminal"]["quiet_start"] = "25:00"
        with open(path, "w") as f:
            json.dump(cfg, f)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert proc.poll() is None and status(url)["quiet"]["enabled"] is False
    finally:
        _, err = finish(proc)
    assert "reloaded %s: quiet hours off, mute 900 s, speech gap 2 s" % path in err, err
    assert "reload refused, the running settings stay: config quiet_start" in err, err


def test_the_printed_send_command_works_from_a_shell_without_the_venv_on_path(tmp_path):
    """What `make emulator` leaves: make's PATH had .venv/bin (MAKELEVEL set), the operator's shell does not."""
    make_config(tmp_path)
    env = env_for(tmp_path, path_without_venv=True)
    env["MAKELEVEL"] = "1"
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "emulator", "--headless", "--no-voice", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_http("http://127.0.0.1:%d/api/v1/status" % port, proc)
        cmd = proc.stdout.readline().strip()
        assert "--preset p0" in cmd and not cmd.startswith("sentinel-send "), cmd
        shell_env = dict(env)
        del shell_env["MAKELEVEL"]
        p = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=shell_env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (cmd, p.stderr)
        assert status("http://127.0.0.1:%d" % port)["shown"]["level"] == "P0"
    finally:
        finish(proc)
    assert shlex.split(cmd)[0] == os.path.relpath(os.path.join(BIN, "sentinel-send"), ROOT) or cmd.startswith(BIN)


def test_listening_on_every_address_the_remote_url_names_this_host(tmp_path):
    make_config(tmp_path)
    port = free_port()
    p = run(
        EMU + ["--headless", "--no-voice", "--host", "0.0.0.0", "--port", str(port), "--run-for", "1"],
        env=env_for(tmp_path),
    )
    assert p.returncode == 0, p.stderr
    token_lines = [ln.strip() for ln in p.stdout.splitlines() if "?token=" in ln]
    assert token_lines == ["http://%s:%d/?token=%s" % (socket.gethostname(), port, token_lines[0].split("=", 1)[1])]
    assert "127.0.0.1" not in token_lines[0]


def test_on_loopback_no_remote_url_is_offered(tmp_path):
    make_config(tmp_path)
    p = run(EMU + ["--headless", "--no-voice", "--port", str(free_port()), "--run-for", "0.5"], env=env_for(tmp_path))
    assert p.returncode == 0, p.stderr
    assert "?token=" not in p.stdout and "this machine only: --host 0.0.0.0 lets other machines in" in p.stderr


def test_sender_program_is_what_the_operators_shell_can_run(tmp_path):
    bindir = tmp_path / ".venv" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "sentinel-send").write_text("")
    exe, cwd = str(bindir / "python"), str(tmp_path)
    on_path = lambda name: str(bindir / name)  # noqa: E731
    assert emu_config.sender_program(which=on_path, executable=exe, cwd=cwd, environ={}) == "sentinel-send"
    # under make, the PATH is make's own, not the shell's
    under_make = emu_config.sender_program(which=on_path, executable=exe, cwd=cwd, environ={"MAKELEVEL": "1"})
    assert under_make == os.path.join(".venv", "bin", "sentinel-send")
    # from outside the checkout, the absolute path
    elsewhere = str(tmp_path / "elsewhere")
    assert emu_config.sender_program(which=lambda n: None, executable=exe, cwd=elsewhere, environ={}) == str(
        bindir / "sentinel-send"
    )


def test_a_config_the_user_cannot_read_or_create_is_one_line_exit_2():
    from opcheck import remove, shared_tmp, unprivileged

    d = shared_tmp()
    try:
        path = os.path.join(d, "emulator.json")
        emu_config.load(path, {})  # root's, mode 600
        cmd = EMU + ["--headless", "--no-voice", "--config", path, "--run-for", "5"]
        line = one_line(run(unprivileged(cmd)), 2)
        assert line.endswith("config error: cannot read config %s: Permission denied" % path)
        os.chmod(d, 0o755)  # root's directory: nobody cannot create a config in it
        other = os.path.join(d, "other.json")
        line = one_line(run(unprivileged(EMU + ["--headless", "--no-voice", "--config", other, "--run-for", "5"])), 2)
        assert "cannot create config %s: Permission denied" % other in line
        assert not os.path.exists(other)
    finally:
        remove(d)
