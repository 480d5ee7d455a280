"""host_client against a real terminal handler on loopback HTTP."""

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from host_client import (
    Ack,
    AlarmClient,
    AuthError,
    ConfigError,
    RefusedError,
    ServerError,
    TransportError,
    preset,
    send_many,
)
from host_client.cli import main as cli_main
from host_client.config import resolve
from testkit.terminal import LoopbackTerminal

KEYS = {"ops": "s3cret-for-tests"}


def client(url, **kw):
    kw.setdefault("backoff_initial_s", 0.001)
    return AlarmClient(url, "ops", "s3cret-for-tests", **kw)


@pytest.mark.parametrize(
    "name,text,level",
    [
        ("p0", "训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁，全环算力挂起", "P0"),
        ("p1", "算力水准预警，机架 A03 节点 gpu-worker-08 NVLink 降速", "P1"),
        ("normal", None, "NORMAL"),
    ],
)
def test_presets_delivered_and_verified(name, text, level):
    with LoopbackTerminal(KEYS) as t:
        ack = client(t.url).send(preset(name, text, key="A03:gpu-worker-08"))
        assert isinstance(ack, Ack) and ack.status == 200 and not ack.duplicate and ack.level == level
        got = t.accepted[0].alarm
        assert got.level == ["NORMAL", "P1", "P0"].index(level)
        assert got.key == "A03:gpu-worker-08"
        assert got.text == (text or "训练集群已恢复正常")


def test_retry_after_5xx_then_success():
    with LoopbackTerminal(KEYS, fail_first=2) as t:
        ack = client(t.url).send(preset("p0", "x"))
        assert ack.attempts == 3 and len(t.accepted) == 1


def test_lost_answer_retry_is_a_duplicate_not_a_second_alarm():
    with LoopbackTerminal(KEYS, drop_first=1) as t:
        ack = client(t.url).send(preset("p0", "x"))
        assert ack.duplicate and ack.attempts == 2
        assert len(t.accepted) == 1


def test_gives_up_after_retries_on_5xx():
    with LoopbackTerminal(KEYS, fail_first=10) as t, pytest.raises(ServerError) as e:
        client(t.url, retries=2).send(preset("p0", "x"))
    assert e.value.status == 503


def test_401_is_never_retried_and_secret_not_in_message():
    with LoopbackTerminal({"ops": "another-secret"}) as t:
        with pytest.raises(AuthError) as e:
            client(t.url).send(preset("p0", "x"))
        assert len(t.answers) == 1
        assert e.value.code == "bad_signature"
        assert "s3cret" not in str(e.value) and "another-secret" not in str(e.value)


def test_invalid_alarm_refused_locally_with_the_terminals_words():
    with pytest.raises(RefusedError) as e:
        client("http://127.0.0.1:9").send(preset("p0", "x" * 500))
    assert e.value.code == "invalid_field" and "400" in e.value.message


def test_connection_refused_is_retried_then_transport_error():
    sleeps = []
    c = AlarmClient("http://127.0.0.1:9", "ops", "s", retries=2, sleep=sleeps.append)
    with pytest.raises(TransportError):
        c.send(preset("p0", "x"))
    assert len(sleeps) == 2 and all(0 <= s <= 2.0 for s in sleeps)


def test_fan_out_reports_each_terminal():
    with LoopbackTerminal(KEYS) as a, LoopbackTerminal(KEYS) as b:
        dead = client("http://127.0.0.1:9", retries=0)
        res = send_many([client(a.url), dead, client(b.url)], preset("p0", "x"))
        assert [r.ok for r in res] == [True, False, True]
        assert isinstance(res[1].error, TransportError)
        assert a.accepted[0].alarm.id == b.accepted[0].alarm.id  # one id: idempotent on every terminal


def test_ack_and_heartbeat():
    with LoopbackTerminal(KEYS) as t:
        c = client(t.url)
        assert c.ack(key="k1").answer["kind"] == "ack"
        assert c.ack(long=True).answer["kind"] == "ack"
        assert c.heartbeat(30).answer["kind"] == "heartbeat"
        assert [r.kind for r in t.accepted] == ["ack", "ack", "heartbeat"]
        assert t.accepted[1].ack["long"] is True and t.accepted[2].heartbeat["interval"] == 30


def test_repr_hides_secret():
    assert "s3cret" not in repr(client("http://x")) + repr(client("http://x").target)


def test_config_precedence_and_errors(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('url = "http://file"\nkey_id = "fk"\nsecret = "fs"\n')
    t = resolve(config=str(f), env={})
    assert (t.url, t.key_id, t.secret) == ("http://file", "fk", b"fs")
    t = resolve(url="http://arg", config=str(f), env={"SENTINEL_KEY_ID": "ek"})
    assert (t.url, t.key_id) == ("http://arg", "ek")
    sf = tmp_path / "secret"
    sf.write_text("from-file\n")
    assert resolve(url="http://a", key_id="k", secret_file=str(sf), env={}).secret == b"from-file"
    bad = tmp_path / "bad.json"
    bad.write_text('{"url": "http://x", "secret": "TOPSECRET",}')
    with pytest.raises(ConfigError) as e:
        resolve(config=str(bad), env={})
    assert "malformed" in str(e.value) and "TOPSECRET" not in str(e.value)
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    with pytest.raises(ConfigError, match="missing key id, secret"):
        resolve(url="http://x", config=str(empty), env={})
    with pytest.raises(ConfigError, match="http"):
        resolve(url="ftp://x", key_id="k", secret="s", env={})


def test_emulator_config_is_found_by_default(tmp_path, monkeypatch):
    d = tmp_path / "gpu-sentinel"
    d.mkdir()
    (d / "emulator.json").write_text(json.dumps({"url": "http://127.0.0.1:8765", "key_id": "local", "secret": "abc"}))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for k in ("SENTINEL_URL", "SENTINEL_KEY_ID", "SENTINEL_SECRET", "SENTINEL_SECRET_FILE", "SENTINEL_CONFIG"):
        monkeypatch.delenv(k, raising=False)
    t = resolve()
    assert (t.url, t.key_id) == ("http://127.0.0.1:8765", "local")


def _cli_env(t, tmp_path):
    cfg = tmp_path / "term.json"
    cfg.write_text(json.dumps({"url": t.url, "key_id": "ops", "secret": "s3cret-for-tests"}))
    os.chmod(cfg, stat.S_IRUSR | stat.S_IWUSR)
    return str(cfg)


def test_cli_sends_preset_and_exit_codes(tmp_path, capsys):
    with LoopbackTerminal(KEYS) as t:
        cfg = _cli_env(t, tmp_path)
        assert cli_main(["--config", cfg, "--preset", "p0", "--text", "通信死锁", "--key", "A03"]) == 0
        assert t.accepted[-1].alarm.key == "A03"
        assert (
            cli_main(
                [
                    "--config",
                    cfg,
                    "--text",
                    "custom",
                    "--color",
                    "#123456",
                    "--light",
                    "breath",
                    "--audio",
                    "none",
                    "--level",
                    "P1",
                ]
            )
            == 0
        )
        a = t.accepted[-1].alarm
        assert (a.color, a.light_mode, a.audio_mode, a.level) == ((0x12, 0x34, 0x56), "breath", "none", 1)
        assert cli_main(["--config", cfg, "--ack"]) == 0
        assert cli_main(["--config", cfg, "--text", "x", "--color", "red"]) == 2
        assert cli_main(["--config", cfg, "--text", "x", "--repeat", "99", "--audio", "cycle"]) == 1
        assert cli_main(["--config", str(tmp_path / "missing.json"), "--preset", "p1", "--text", "x"]) == 2
        assert (
            cli_main(
                [
                    "--url",
                    "http://127.0.0.1:9",
                    "--key-id",
                    "k",
                    "--secret-file",
                    cfg,
                    "--retries",
                    "0",
                    "--preset",
                    "p1",
                    "--text",
                    "x",
                ]
            )
            == 3
        )
    err = capsys.readouterr().err
    assert "s3cret-for-tests" not in err


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_cli_dry_run_prints_a_curl_command_that_works(tmp_path):
    with LoopbackTerminal(KEYS) as t:
        cfg = _cli_env(t, tmp_path)
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "host_client.cli",
                "--config",
                cfg,
                "--preset",
                "p0",
                "--text",
                "干跑 dry run",
                "--dry-run",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out.startswith("curl ") and "s3cret" not in out
        assert not t.accepted
        r = subprocess.run(out, shell=True, capture_output=True, text=True)
        assert json.loads(r.stdout)["ok"] is True
        assert t.accepted[0].alarm.text == "干跑 dry run"


def test_cli_help_is_clear():
    r = subprocess.run([sys.executable, "-m", "host_client.cli", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--dry-run" in r.stdout and "exit status" in r.stdout


def test_one_config_error_on_the_host_side():
    # The gateway's, the probes' and the emulator's config errors are the client's: one except catches them all.
    from emulator.config import ConfigError as emulator_error
    from host_client.errors import SentinelError
    from host_client.gateway.config import ConfigError as gateway_error
    from host_client.probes.config import ConfigError as probes_error

    assert gateway_error is probes_error is emulator_error is ConfigError
    assert issubclass(ConfigError, SentinelError) and issubclass(ConfigError, ValueError)


def test_every_public_exception_of_host_client_is_in_the_tree():
    # One except catches whatever any part of the host side raises on purpose: walk every module of the package
    # (the gateway's and the probes' too) and check each public exception class it defines.
    import importlib
    import inspect
    import pkgutil

    import host_client
    from host_client.errors import SentinelError

    found = {}
    for info in pkgutil.walk_packages(host_client.__path__, "host_client."):
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == info.name
                and not name.startswith("_")
            ):
                found[info.name + "." + name] = obj
    outside = sorted(k for k, cls in found.items() if not issubclass(cls, SentinelError))
    assert outside == []
    # The walk really reached the gateway and the probes (an import error would have failed it above).
    for name in (
        "host_client.gateway.events.EventError",
        "host_client.gateway.ingest.BodyError",
        "host_client.probes.gpu_source.SourceError",
        "host_client.errors.AuthError",
    ):
        assert name in found
    # Their old bases stay: code that caught ValueError still does.
    from host_client.gateway.events import EventError
    from host_client.gateway.ingest import BodyError

    assert issubclass(EventError, ValueError) and issubclass(BodyError, ValueError)
