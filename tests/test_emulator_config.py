"""The emulator's per-user config: first start, permissions, refusal of weak secrets beyond loopback, and the
contract with the host_client CLI (it reads url, key_id and secret from the same file)."""

import json
import os
import stat
import subprocess
import sys

import pytest

from emulator import config as cfgmod

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RFC_SECRET = "AI#TrainSecureHMACSecretKey2026"


@pytest.fixture
def xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv(cfgmod.ENV_PATH, raising=False)
    return tmp_path


def test_default_path_follows_xdg(xdg):
    assert cfgmod.default_path() == os.path.join(str(xdg), "gpu-sentinel", "emulator.json")


def test_explicit_env_path_wins(tmp_path):
    env = {"XDG_CONFIG_HOME": "/nowhere", cfgmod.ENV_PATH: str(tmp_path / "x.json")}
    assert cfgmod.default_path(env) == str(tmp_path / "x.json")


def test_first_start_creates_private_file_with_random_secret(xdg):
    cfg, path, created, warnings = cfgmod.load()
    assert created and warnings == []
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path) as f:
        stored = json.load(f)
    assert stored["url"] == "http://127.0.0.1:8765"
    assert stored["key_id"].startswith("emu-") and stored["key_id"] == cfg["key_id"]
    assert len(stored["secret"]) == 64 and int(stored["secret"], 16) >= 0
    assert (cfg["host"], cfg["port"], cfg["width"], cfg["height"]) == ("127.0.0.1", 8765, 16, 16)
    # The second start reads the same identity back.
    cfg2, _, created2, _ = cfgmod.load()
    assert not created2 and cfg2["secret"] == cfg["secret"] and cfg2["key_id"] == cfg["key_id"]


def test_two_first_starts_get_different_secrets(tmp_path):
    a, _, _, _ = cfgmod.load(str(tmp_path / "a.json"))
    b, _, _, _ = cfgmod.load(str(tmp_path / "b.json"))
    assert a["secret"] != b["secret"]


def test_host_client_reads_the_same_file(xdg):
    from host_client.config import resolve

    cfg, _, _, _ = cfgmod.load()
    target = resolve(env={})
    assert target.url == cfg["url"] and target.key_id == cfg["key_id"]
    assert target.secret == cfg["secret"].encode()


def _write(path, obj, mode=0o600):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f)
    os.chmod(path, mode)


def test_refuses_lan_with_the_rfc_secret(tmp_path):
    p = str(tmp_path / "c.json")
    _write(p, {"url": "http://127.0.0.1:8765", "key_id": "gpu_cluster_sentinel", "secret": RFC_SECRET})
    with pytest.raises(cfgmod.ConfigError) as e:
        cfgmod.load(p, {"host": "0.0.0.0"})
    assert "refusing to listen on 0.0.0.0" in str(e.value)
    assert RFC_SECRET not in str(e.value)
    # On loopback only local users can sign: the RFC's secret is allowed there (compatibility tests).
    cfg, _, _, _ = cfgmod.load(p)
    assert cfg["secret"] == RFC_SECRET


@pytest.mark.parametrize("secret", ["short", "changeme", "0123456789abcdef"])
def test_refuses_lan_with_weak_secrets(tmp_path, secret):
    p = str(tmp_path / "c.json")
    _write(p, {"url": "http://127.0.0.1:8765", "key_id": "k", "secret": secret})
    with pytest.raises(cfgmod.ConfigError):
        cfgmod.load(p, {"host": "192.0.2.10"})


def test_lan_with_a_random_secret_is_fine(tmp_path):
    cfg, _, _, _ = cfgmod.load(str(tmp_path / "c.json"), {"host": "0.0.0.0"})
    assert cfg["host"] == "0.0.0.0"
    assert cfgmod.listen_url(cfg) == "http://127.0.0.1:8765"


@pytest.mark.parametrize(
    "host,loop",
    [
        ("127.0.0.1", True),
        ("127.5.6.7", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.1.2.3", False),
        ("example.org", False),
    ],
)
def test_loopback_detection(host, loop):
    assert cfgmod.is_loopback(host) is loop


@pytest.mark.parametrize(
    "key,value,words",
    [
        ("port", 70000, "'port' must be 0..65535"),
        ("port", "8765", "'port' must be int"),
        ("width", 0, "'width' must be 1..64"),
        ("rotation", 45, "'rotation'"),
        ("fps", True, "'fps' must be int"),
        ("terminal", [], "'terminal' must be dict"),
        ("utc_offset_min", 10000, "utc_offset_min"),
    ],
)
def test_bad_values_are_named(tmp_path, key, value, words):
    p = str(tmp_path / "c.json")
    cfgmod.load(p)
    with pytest.raises(cfgmod.ConfigError) as e:
        cfgmod.load(p, {key: value})
    assert words in str(e.value)


def test_malformed_file_is_a_precise_error(tmp_path):
    p = tmp_path / "c.json"
    p.write_text("{not json")
    with pytest.raises(cfgmod.ConfigError) as e:
        cfgmod.load(str(p))
    assert str(p) in str(e.value)


def test_loose_permissions_warn(tmp_path):
    p = str(tmp_path / "c.json")
    cfg, _, _, _ = cfgmod.load(p)
    stored = {"url": cfg["url"], "key_id": cfg["key_id"], "secret": cfg["secret"], "_note": "a comment"}
    _write(p, stored, mode=0o644)
    _, _, _, warnings = cfgmod.load(p)
    assert any("chmod 600" in w for w in warnings)


def test_an_unknown_top_level_key_is_refused_naming_it_and_the_likely_one(tmp_path):
    """As the gateway and the probe refuse theirs: a typo must not leave the default silently in force."""
    p = str(tmp_path / "c.json")
    cfg, _, _, _ = cfgmod.load(p)
    stored = {"url": cfg["url"], "key_id": cfg["key_id"], "secret": cfg["secret"], "prot": 8766}
    _write(p, stored, mode=0o600)
    with pytest.raises(cfgmod.ConfigError) as e:
        cfgmod.load(p)
    assert str(e.value) == "config %s: key 'prot' is not a setting (did you mean 'port'?)" % p


def test_the_emulator_refuses_to_start_on_an_unknown_key_in_one_line_exit_2(tmp_path):
    p = str(tmp_path / "c.json")
    cfg, _, _, _ = cfgmod.load(p)
    stored = {"url": cfg["url"], "key_id": cfg["key_id"], "secret": cfg["secret"], "terminal": {"mute_ss": 60}}
    _write(p, stored, mode=0o600)
    r = subprocess.run(
        [sys.executable, "-m", "emulator", "--headless", "--no-voice", "--config", p, "--run-for", "5"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, SDL_VIDEODRIVER="dummy", SDL_AUDIODRIVER="dummy"),
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("sentinel-emulator: config error: config key 'terminal.mute_ss' is not a setting")
    assert "(did you mean 'terminal.mute_s'?)" in line


@pytest.mark.parametrize("section,key", [("terminal", "mute"), ("terminal", "quiet_star"), ("voice", "speed")])
def test_nested_unknown_keys_are_refused_like_the_box(tmp_path, section, key):
    p = str(tmp_path / "c.json")
    cfg, _, _, _ = cfgmod.load(p)
    stored = {"url": cfg["url"], "key_id": cfg["key_id"], "secret": cfg["secret"], section: {key: 1}}
    _write(p, stored, mode=0o600)
    with pytest.raises(cfgmod.ConfigError) as e:
        cfgmod.load(p)
    assert "'%s.%s' is not a setting" % (section, key) in str(e.value)
    # the known ones pass, and "_" keys are comments
    stored[section] = {"mute_s": 60, "debounce_ms": 20, "_note": "x"} if section == "terminal" else {"rate": 150}
    _write(p, stored, mode=0o600)
    cfgmod.load(p)


def test_send_command_names_the_port_when_overridden(tmp_path):
    cfg, _, _, _ = cfgmod.load(str(tmp_path / "c.json"))
    assert cfgmod.send_command(cfg).startswith('sentinel-send --preset p0 --text "')
    assert "--url" not in cfgmod.send_command(cfg)
    cfg2, _, _, _ = cfgmod.load(str(tmp_path / "c.json"), {"port": 9999})
    assert cfgmod.send_command(cfg2).endswith("--url http://127.0.0.1:9999")


def _run_cli(args, env_home, timeout=60):
    env = dict(os.environ)
    env.update({"XDG_CONFIG_HOME": str(env_home), "SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy"})
    env.pop(cfgmod.ENV_PATH, None)
    return subprocess.run(
        [sys.executable, "-m", "emulator"] + args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_cli_first_start_prints_key_id_and_send_command(tmp_path):
    r = _run_cli(["--headless", "--no-voice", "--no-persist", "--port", "0", "--run-for", "0.5"], tmp_path)
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "gpu-sentinel" / "emulator.json") as f:
        stored = json.load(f)
    assert "first start" in r.stderr
    assert stored["key_id"] in r.stderr
    assert stored["secret"] not in r.stdout + r.stderr
    assert "sentinel-send --preset p0 --text" in r.stdout


def test_cli_refuses_lan_with_the_rfc_secret(tmp_path):
    p = tmp_path / "gpu-sentinel" / "emulator.json"
    _write(str(p), {"url": "http://127.0.0.1:8765", "key_id": "gpu_cluster_sentinel", "secret": RFC_SECRET})
    r = _run_cli(["--headless", "--no-voice", "--host", "0.0.0.0", "--port", "0", "--run-for", "0.2"], tmp_path)
    assert r.returncode == 2
    assert "refusing to listen" in r.stderr and RFC_SECRET not in r.stderr
