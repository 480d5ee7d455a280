"""docs/DEPLOY.md's plain-host steps, run as written in a clean temporary directory: the two marked shell blocks
with their paths redirected (PREFIX, ETC, UNITS under tmp; SRC a copy of this checkout; SECRETS the directory
holding step 1's secrets), the lines that change the machine itself left out (useradd, systemctl). The service
user `sentinel` is played by `nobody` when the suite runs as root (the block's --check-config runs as that user,
through setpriv, against the files the block installed for it); otherwise the owners are the test's own user. The
result must be a gateway (and a probe) that passes --check-config, files with the documented modes, a venv holding
only the extra each part needs, and units that `systemd-analyze verify` accepts (where it is installed)."""

import os
import re
import shutil
import stat
import subprocess
import sys

import pytest
from deploy_live import ROOT
from opcheck import NOBODY, remove, shared_tmp

DOC = os.path.join(ROOT, "docs", "DEPLOY.md")


def block(name):
    """The ```sh block right after the marker <!-- plain-host: NAME ... -->."""
    with open(DOC) as f:
        text = f.read()
    m = re.search(r"<!-- plain-host: %s\b[^>]*-->\s*```sh\n(.*?)```" % re.escape(name), text, re.S)
    assert m, "docs/DEPLOY.md has no plain-host block %r" % name
    return m.group(1)


AS_ROOT = os.geteuid() == 0
SECRETS = "SECRETS=$HOME/sentinel-secrets"
SETPRIV = "setpriv --reuid=sentinel --regid=sentinel --init-groups "


def redirect(script, tmp, src, secrets):
    """The block as the test runs it; every rewrite must apply, so the docs keep a form this test understands."""
    lines = script.rstrip("\n").split("\n")
    first = lines[0]
    for var, path in (
        ("SRC", "$PWD"),
        ("PREFIX", "/opt/gpu-sentinel"),
        ("ETC", "/etc/sentinel"),
        ("UNITS", "/etc/systemd/system"),
    ):
        assert "%s=%s" % (var, path) in first, (var, first)
    assert SECRETS in script
    first = first.replace("SRC=$PWD", "SRC=%s" % src)
    for var, path in (("PREFIX", "/opt/gpu-sentinel"), ("ETC", "/etc/sentinel"), ("UNITS", "/etc/systemd/system")):
        first = first.replace("%s=%s" % (var, path), "%s=%s%s" % (var, tmp, path))
    out = ["set -euo pipefail", first.replace(SECRETS, "SECRETS=%s" % secrets)]
    skipped = []
    # the service user: nobody (and its group) when root can switch to it, else this user, who is not root anyway
    service = (NOBODY, NOBODY) if AS_ROOT else (os.getuid(), os.getgid())
    for ln in lines[1:]:
        if re.match(r"(useradd|systemctl) ", ln):
            skipped.append(ln.split()[0])
            continue
        ln = ln.replace(SECRETS, "SECRETS=%s" % secrets)
        ln = re.sub(r"-o root -g root", "-o %d -g %d" % (os.getuid(), os.getgid()), ln)
        ln = re.sub(r"-o root -g sentinel", "-o %d -g %d" % (os.getuid(), service[1]), ln)
        if SETPRIV in ln:
            skipped.append("setpriv")
            ln = ln.replace(
                SETPRIV,
                "setpriv --reuid=%d --regid=%d --clear-groups " % service if AS_ROOT else "",
            )
        out.append(ln)
    return "\n".join(out) + "\n", skipped


def copy_checkout(dst):
    """The tracked and new files of this checkout (not .venv, node_modules or build output); without git (an
    unpacked tarball) the tree minus those."""
    try:
        files = (
            subprocess.run(
                ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
            )
            .stdout.decode()
            .split("\0")
        )
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "node_modules", "build", "__pycache__", ".hypothesis", ".pytest_cache", ".ruff_cache"}
        files = [
            os.path.relpath(os.path.join(d, f), ROOT)
            for d, dirs, fs in os.walk(ROOT)
            if not dirs.__setitem__(slice(None), [x for x in dirs if x not in skip and not x.endswith(".egg-info")])
            for f in fs
            if f != ".git"
        ]
    for rel in filter(None, files):
        s = os.path.join(ROOT, rel)
        if os.path.isfile(s):
            os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
            shutil.copy2(s, os.path.join(dst, rel))


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    d = tmp_path_factory.mktemp("checkout") / "gpu-sentinel"
    copy_checkout(str(d))
    return str(d)


TOKEN = "tok-" + "7b2d" * 10


@pytest.fixture
def host_tmp(tmp_path):
    """The install's root: a directory the service user can enter (pytest's tmp_path is root's 0700 under root)."""
    if not AS_ROOT:
        yield tmp_path
        return
    import pathlib

    d = shared_tmp()
    try:
        yield pathlib.Path(d)
    finally:
        remove(d)


def run_block(name, tmp, src):
    work = tmp / "work"
    secrets = tmp / "sentinel-secrets"
    script, skipped = redirect(block(name), str(tmp), src, str(secrets))
    (tmp / "etc" / "systemd" / "system").mkdir(parents=True)  # what every systemd host has
    work.mkdir()
    secrets.mkdir(mode=0o700)
    (secrets / "machine-room.secret").write_text("a3f1" * 16 + "\n")
    (secrets / "office.secret").write_text("9c0e" * 16 + "\n")
    (secrets / "ingest.token").write_text(TOKEN + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH", "SENTINEL_"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    p = subprocess.run(["bash", "-c", script], cwd=str(work), env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, "%s\n--- stdout\n%s\n--- stderr\n%s" % (script, p.stdout[-3000:], p.stderr[-3000:])
    return p, skipped


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def installed(prefix):
    py = os.path.join(prefix, ".venv", "bin", "python")
    out = subprocess.run([py, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True)
    return {ln.split("==")[0].lower() for ln in out.stdout.split()}


def verify_unit(unit, tmp):
    """systemd-analyze verify on the installed unit, its absolute paths pointed at the test's install."""
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze is not installed")
    text = open(unit).read()
    assert "/opt/gpu-sentinel/.venv/bin/" in text and "/etc/sentinel/" in text
    text = text.replace("/opt/gpu-sentinel", "%s/opt/gpu-sentinel" % tmp).replace(
        "/etc/sentinel", "%s/etc/sentinel" % tmp
    )
    copy = tmp / "verify" / os.path.basename(unit)
    copy.parent.mkdir()
    copy.write_text(text)
    p = subprocess.run([exe, "verify", str(copy)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    # the hardening the docs report stays in place
    p = subprocess.run([exe, "security", "--offline=true", str(copy)], capture_output=True, text=True, timeout=120)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", p.stdout)
    return float(m.group(1)) if m else None


def test_plain_host_gateway_steps_give_a_gateway_that_passes_check_config(host_tmp, src):
    tmp_path = host_tmp
    p, skipped = run_block("gateway", tmp_path, src)
    assert skipped == ["useradd", "setpriv", "systemctl"]
    etc, prefix = tmp_path / "etc" / "sentinel", str(tmp_path / "opt" / "gpu-sentinel")
    # the check ran as the service user, with the files and the venv the block made for it
    assert "configuration OK" in p.stderr
    assert '"ingest_auth": "bearer token required (1 token(s): env SENTINEL_INGEST_TOKEN)"' in p.stdout
    secrets = ("a3f1" * 16, "9c0e" * 16, TOKEN)
    assert not any(x in p.stdout + p.stderr for x in secrets)  # no secret printed
    assert (mode(etc), mode(etc / "gateway.toml"), mode(etc / "gateway.env")) == (0o750, 0o640, 0o600)
    if AS_ROOT:
        assert os.stat(etc / "gateway.toml").st_gid == NOBODY and os.stat(etc / "gateway.env").st_uid == 0
    assert (etc / "gateway.env").read_text() == (
        "SENTINEL_SECRET_MACHINE_ROOM=%s\nSENTINEL_SECRET_OFFICE=%s\nSENTINEL_INGEST_TOKEN=%s\n" % secrets
    )
    # the venv is the system Python's, which the service user can run (not one under /root)
    assert os.path.realpath(os.path.join(prefix, ".venv", "bin", "python")).startswith("/usr/")
    # only the gateway's extra: its HTTP parser, not the emulator's window or server, nor the probes' NVML
    pkgs = installed(prefix)
    assert {"gpu-sentinel-alarm", "httptools"} <= pkgs
    assert not pkgs & {"pygame", "pyttsx3", "nvidia-ml-py", "pytest", "flask", "waitress"}
    # the installed gateway checks the installed file again, as the unit's ExecStartPre does
    env = dict(
        os.environ,
        SENTINEL_SECRET_MACHINE_ROOM="a3f1" * 16,
        SENTINEL_SECRET_OFFICE="9c0e" * 16,
        SENTINEL_INGEST_TOKEN=TOKEN,
    )
    q = subprocess.run(
        [os.path.join(prefix, ".venv", "bin", "sentinel-gateway"), "--check-config", "-c", str(etc / "gateway.toml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert q.returncode == 0, q.stderr
    q = subprocess.run(
        [os.path.join(prefix, ".venv", "bin", "sentinel-gateway"), "--check-config", "-c", str(etc / "gateway.toml")],
        env={"PATH": os.environ["PATH"], "SENTINEL_INGEST_TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert q.returncode == 2 and "SENTINEL_SECRET_MACHINE_ROOM" in q.stderr  # no secret, no start: named
    q = subprocess.run(
        [os.path.join(prefix, ".venv", "bin", "sentinel-gateway"), "--check-config", "-c", str(etc / "gateway.toml")],
        env=dict(env, SENTINEL_INGEST_TOKEN=""),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert q.returncode == 2 and "SENTINEL_INGEST_TOKEN" in q.stderr  # the example is authenticated by default
    score = verify_unit(str(tmp_path / "etc" / "systemd" / "system" / "sentinel-gateway.service"), tmp_path)
    assert score is None or score <= 2.0, score
    print("systemd-analyze security sentinel-gateway.service: %s" % score)


def test_plain_host_probe_steps_give_a_probe_that_passes_check_config(host_tmp, src):
    tmp_path = host_tmp
    p, skipped = run_block("probe", tmp_path, src)
    assert skipped == ["systemctl"]
    etc, prefix = tmp_path / "etc" / "sentinel", str(tmp_path / "opt" / "gpu-sentinel")
    assert "configuration OK: rack A03" in p.stdout and "gateway http://10.0.0.5:8080" in p.stdout
    assert "ingest token file %s" % (etc / "ingest.token") in p.stdout and TOKEN not in p.stdout + p.stderr
    assert mode(etc / "probe.toml") == 0o644 and mode(etc / "ingest.token") == 0o600
    pkgs = installed(prefix)
    assert {"gpu-sentinel-alarm", "nvidia-ml-py"} <= pkgs and not pkgs & {"flask", "waitress", "pygame"}
    score = verify_unit(str(tmp_path / "etc" / "systemd" / "system" / "sentinel-probe.service"), tmp_path)
    assert score is None or score <= 3.5, score
    print("systemd-analyze security sentinel-probe.service: %s" % score)


def test_the_example_gateway_is_authenticated_as_the_alertmanager_snippet_expects():
    """The example listens on 0.0.0.0, so ingest needs a token; Alertmanager's receivers send one (Bearer, from a
    file), and the probes' example has the key to send it."""
    import yaml

    from host_client.gateway.config import load_config

    env = {"SENTINEL_SECRET_MACHINE_ROOM": "a3f1" * 16, "SENTINEL_SECRET_OFFICE": "9c0e" * 16}
    cfg = load_config(os.path.join(ROOT, "examples", "gateway.toml"), env=dict(env, SENTINEL_INGEST_TOKEN=TOKEN))
    assert cfg.host == "0.0.0.0" and len(cfg.ingest_tokens) == 1
    am = yaml.safe_load(open(os.path.join(ROOT, "deploy", "alertmanager", "alertmanager.yml")))
    for r in am["receivers"]:
        for w in r.get("webhook_configs", []):
            if w["url"].endswith("/api/v1/alertmanager"):
                auth = w["http_config"]["authorization"]
                assert auth["type"] == "Bearer" and auth["credentials_file"].startswith("/etc/alertmanager/")
    assert re.search(r"^token_file = ", open(os.path.join(ROOT, "examples", "probe.toml")).read(), re.M)


def test_units_name_the_paths_the_docs_install():
    for unit in ("sentinel-gateway.service", "sentinel-probe.service"):
        text = open(os.path.join(ROOT, "deploy", unit)).read()
        assert "ExecStartPre=/opt/gpu-sentinel/.venv/bin/%s --check-config" % unit.split(".")[0] in text
    assert sys.version_info >= (3, 10)
