"""firmware/deploy.py without a board: the exact file set, the exact mpremote/esptool invocations in order, the
dry run, --help, and the errors a user meets (no board, several boards, bad config, failing step)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "0123456789abcdef0123456789abcdef"


def _load():
    spec = importlib.util.spec_from_file_location("deploy", os.path.join(ROOT, "firmware", "deploy.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """One real mpy-cross build for the module; the other tests reuse it (compiling 40+ files takes seconds)."""
    mod = _load()
    d = str(tmp_path_factory.mktemp("board"))
    return d, mod.compile_all(mod.board_files(), d, log=lambda s: None)


@pytest.fixture
def deploy(compiled, monkeypatch):
    mod = _load()
    build_dir, built = compiled
    monkeypatch.setattr(mod, "compile_all", lambda files, d, log=print: list(built))
    mod.BUILD_FOR_TESTS = build_dir
    return mod


@pytest.fixture
def cfg(tmp_path):
    with open(os.path.join(ROOT, "firmware", "config.example.json"), encoding="utf-8") as f:
        d = json.load(f)
    d["keys"] = {"gw": SECRET}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(d))
    return str(p)


def _expected_board_paths():
    out = {"boot.py", "main.py", "lib/microdot/__init__.mpy", "lib/microdot/microdot.mpy"}
    for pkg in ("sentinel_core", "sentinel_fw"):
        for n in os.listdir(os.path.join(ROOT, "firmware", "lib", pkg)):
            if n.endswith(".py"):
                out.add("lib/%s/%s.mpy" % (pkg, n[:-3]))
    return out


class Recorder:
    def __init__(self, fail_at=None):
        self.calls = []
        self.fail_at = fail_at

    def __call__(self, argv):
        self.calls.append(argv)
        rc = 1 if self.fail_at is not None and len(self.calls) - 1 == self.fail_at else 0
        return subprocess.CompletedProcess(argv, rc)


def _run(deploy, args, tmp_path, runner=None, ports=(("/dev/ttyUSB0", "CP210x"),)):
    lines = []
    rc = deploy.main(
        args + ["--build-dir", deploy.BUILD_FOR_TESTS], runner=runner or Recorder(), ports=list(ports), log=lines.append
    )
    return rc, "\n".join(lines)


def test_help_is_clear():
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "firmware", "deploy.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0
    for word in (
        "mpy-cross",
        "mpremote",
        "--port",
        "--config",
        "--dry-run",
        "--flash",
        "--reset-state",
        "/config.json",
        "ESP32",
    ):
        assert word in r.stdout, word


def test_file_set_is_every_board_file_compiled(compiled):
    built = compiled[1]
    assert {dst for _, dst in built} == _expected_board_paths()
    for local, dst in built:
        with open(local, "rb") as f:
            head = f.read(2)
        if dst.endswith(".mpy"):
            assert head == b"M\x06", (dst, head)  # .mpy format 6: MicroPython >= 1.23
        else:
            assert local.endswith(".py")


def test_exact_invocations_in_order(deploy, cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(deploy.time, "sleep", lambda s: None)
    rec = Recorder()
    rc, out = _run(deploy, ["--config", cfg], tmp_path, rec)
    assert rc == 0, out
    mp = deploy.mpremote_cmd() + ["connect", "/dev/ttyUSB0"]
    b = deploy.BUILD_FOR_TESTS
    assert rec.calls == [
        mp + ["exec", "--no-follow", deploy.ENTER_SAFE],
        mp + ["exec", deploy.WIPE],
        mp + ["fs", "cp", "-r", os.path.join(b, "lib"), ":"],
        mp + ["fs", "cp", os.path.join(b, "boot.py"), ":boot.py"],
        mp + ["fs", "cp", os.path.join(b, "main.py"), ":main.py"],
        mp + ["fs", "cp", cfg, ":config.json"],
        mp + ["exec", deploy.LEAVE_SAFE],
        mp + ["reset"],
    ]
    # Progress: every step announced with its number.
    assert "[1/9] restart the board in safe mode" in out and "[9/9] reset the board" in out
    assert "copy /lib (%d files)" % (len(_expected_board_paths()) - 2) in out


def test_dry_run_prints_files_and_commands_and_touches_nothing(deploy, cfg, tmp_path):
    rec = Recorder()
    rc, out = _run(deploy, ["--dry-run", "--config", cfg], tmp_path, rec)
    assert rc == 0 and rec.calls == []
    for p in _expected_board_paths():
        assert "/" + p in out, p
    assert "mpremote connect /dev/ttyUSB0 fs cp -r" in out and "sleep 4" in out
    assert SECRET not in out


def test_dry_run_without_a_board_uses_a_placeholder(deploy, cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(deploy, "find_ports", list)
    rc, out = _run(deploy, ["--dry-run", "--config", cfg], tmp_path, ports=())
    assert rc == 0 and "connect '<PORT>'" in out


def test_no_board_is_a_clear_error(deploy, cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(deploy, "find_ports", list)
    rec = Recorder()
    rc, out = _run(deploy, ["--config", cfg], tmp_path, rec, ports=())
    assert rc == 2 and "no ESP32 board found" in out and "--port" in out and rec.calls == []


def test_several_boards_need_a_choice(deploy, cfg, tmp_path):
    rc, out = _run(
        deploy, ["--config", cfg], tmp_path, ports=(("/dev/ttyUSB0", "CP210x"), ("/dev/ttyACM0", "Espressif USB"))
    )
    assert rc == 2 and "several boards" in out and "/dev/ttyACM0" in out


def test_bad_config_refused_before_anything_runs(deploy, tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"wifi": {"ssid": "x"}, "keys": {"gw": "short-secret"}, "light": {"fps": 0}}))
    rec = Recorder()
    rc, out = _run(deploy, ["--config", str(p)], tmp_path, rec)
    assert rc == 2 and "would not boot" in out and "light.fps" in out and "keys.gw" in out
    assert "short-secret" not in out and rec.calls == []


def test_missing_config_explains(deploy, tmp_path):
    rc, out = _run(deploy, ["--config", str(tmp_path / "none.json")], tmp_path)
    assert rc == 2 and "config.example.json" in out and "--no-config" in out


def test_no_config_skips_the_config_copy(deploy, tmp_path, monkeypatch):
    monkeypatch.setattr(deploy.time, "sleep", lambda s: None)
    rec = Recorder()
    rc, out = _run(deploy, ["--no-config", "--port", "/dev/ttyACM3", "--reset-state"], tmp_path, rec)
    assert rc == 0, out
    assert not any(":config.json" in c for c in rec.calls)
    assert any(deploy.WIPE_STATE in c for c in rec.calls)
    assert all(c[c.index("connect") + 1] == "/dev/ttyACM3" for c in rec.calls)


def test_flash_step_uses_esptool_with_the_chips_offset(deploy, cfg, tmp_path):
    image = tmp_path / "ESP32_GENERIC_S3.bin"
    image.write_bytes(b"\xe9" + bytes(100))
    rec = Recorder()
    rc, out = _run(deploy, ["--config", cfg, "--flash", str(image), "--chip", "esp32s3"], tmp_path, rec)
    assert rc == 0, out
    esp = [sys.executable, "-m", "esptool", "--chip", "esp32s3", "--port", "/dev/ttyUSB0"]
    assert rec.calls[0] == esp + ["erase_flash"]
    assert rec.calls[1] == esp + ["--baud", "460800", "write_flash", "-z", "0x0", str(image)]
    # A fresh image has no app running: no safe-mode restart, straight to the copy.
    assert rec.calls[2][-2:] == ["exec", deploy.WIPE]


def test_flash_offset_for_plain_esp32_from_the_config(deploy, cfg, tmp_path):
    image = tmp_path / "fw.bin"
    image.write_bytes(b"\xe9")
    rc, out = _run(deploy, ["--config", cfg, "--flash", str(image), "--dry-run"], tmp_path)
    assert rc == 0 and "write_flash -z 0x1000" in out and "--chip esp32 " in out


def test_missing_flash_image(deploy, cfg, tmp_path):
    rc, out = _run(deploy, ["--config", cfg, "--flash", str(tmp_path / "nope.bin")], tmp_path)
    assert rc == 2 and "micropython.org/download" in out


def test_failing_step_stops_with_a_hint(deploy, cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(deploy.time, "sleep", lambda s: None)
    rec = Recorder(fail_at=2)
    rc, out = _run(deploy, ["--config", cfg], tmp_path, rec)
    assert rc == 2 and len(rec.calls) == 3
    assert "step failed (copy /lib" in out and "another program" in out


def test_each_mpy_carries_its_module_name_not_the_build_path(compiled):
    # The board interns the embedded source name for good: the module's dotted name is interned anyway.
    deploy = _load()
    assert deploy.source_name("lib/sentinel_core/render.py") == "sentinel_core.render"
    assert deploy.source_name("lib/microdot/__init__.py") == "microdot"
    _, built = compiled
    for local, dst in built:
        if dst.endswith(".mpy"):
            with open(local, "rb") as f:
                data = f.read()
            assert ROOT.encode() not in data, dst
            assert deploy.source_name(dst[:-4] + ".py").encode() in data, dst


def test_compile_error_names_the_file(tmp_path):
    deploy = _load()
    bad = tmp_path / "bad.py"
    bad.write_text("match x:\n    case 1:\n        pass\n")
    with pytest.raises(deploy.DeployError) as e:
        deploy.compile_all([(str(bad), "lib/sentinel_fw/bad.py")], str(tmp_path / "b"), log=lambda s: None)
    assert "bad.py" in str(e.value)


def test_frozen_image_copies_only_the_top_files(tmp_path, monkeypatch):
    mod = _load()
    monkeypatch.setattr(mod.time, "sleep", lambda s: None)
    rec = Recorder()
    lines = []
    rc = mod.main(
        ["--frozen", "--no-config", "--port", "/dev/ttyUSB0", "--build-dir", str(tmp_path / "b")],
        runner=rec,
        ports=[],
        log=lines.append,
    )
    assert rc == 0, lines
    copies = [c for c in rec.calls if "cp" in c]
    assert [c[-1] for c in copies] == [":boot.py", ":main.py"]
    # The old /lib copies are still removed: frozen modules come first on sys.path, but a stale copy confuses.
    assert any(deploy_wipe in c for c in rec.calls for deploy_wipe in [mod.WIPE])


def test_manifest_freezes_every_board_package():
    text = open(os.path.join(ROOT, "firmware", "manifest.py"), encoding="utf-8").read()
    for pkg in ("sentinel_core", "sentinel_fw", "microdot"):
        assert 'package("%s"' % pkg in text, pkg
    assert 'include("$(PORT_DIR)/boards/manifest.py")' in text


def test_lost_connection_during_the_safe_mode_restart_is_expected(deploy, cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(deploy.time, "sleep", lambda s: None)
    rec = Recorder(fail_at=0)
    rc, out = _run(deploy, ["--config", cfg], tmp_path, rec)
    assert rc == 0, out
    assert "expected" in out and rec.calls[-1][-1] == "reset"
