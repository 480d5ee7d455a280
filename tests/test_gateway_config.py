"""Configuration: the example file, precise errors, secrets never shown; --check-config."""

import json
import os
import subprocess
import sys

import pytest

from host_client.gateway.cli import main
from host_client.gateway.config import Config, ConfigError, load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "gateway.toml")
ENV = {
    "SENTINEL_SECRET_MACHINE_ROOM": "room-secret-123",
    "SENTINEL_SECRET_OFFICE": "office-secret-456",
    "SENTINEL_INGEST_TOKEN": "example-ingest-token-0123456789",
}


def base(**terminal):
    t = {"url": "http://127.0.0.1:9", "key_id": "k", "secret_env": "S"}
    t.update(terminal)
    return {"terminals": {"room": t}}


def test_example_config_loads():
    c = load_config(EXAMPLE, env=ENV)
    assert set(c.terminals) == {"machine-room", "office"}
    assert c.terminals["machine-room"].secret.reveal() == b"room-secret-123"
    assert c.route({"rack": "A03", "event_type": "NCCL_TIMEOUT"}) == ["machine-room", "office"]
    assert c.route({"rack": "Z99", "event_type": "THERMAL"}) == ["machine-room"]
    assert "room-secret-123" not in json.dumps(c.describe())


def test_secret_from_file(tmp_path):
    (tmp_path / "s").write_text("from-file\n")
    c = Config.from_dict(base(secret_env=None, secret_file=str(tmp_path / "s")), env={})
    assert c.terminals["room"].secret.reveal() == b"from-file"
    assert "from-file" not in repr(c.terminals["room"].secret)


def test_the_slow_client_bounds_default_and_are_taken():
    c = Config.from_dict({})
    assert (c.head_timeout_s, c.body_timeout_s, c.max_connections, c.max_partial_body_bytes) == (
        10.0,
        30.0,
        None,  # below RLIMIT_NOFILE, worked out at start (server.descriptor_room)
        4 << 20,
    )
    c = Config.from_dict(
        {
            "gateway": {
                "head_timeout_s": 2,
                "body_timeout_s": 5.5,
                "max_connections": 500,
                "max_partial_body_bytes": 1 << 20,
            }
        }
    )
    assert (c.head_timeout_s, c.body_timeout_s, c.max_connections, c.max_partial_body_bytes) == (2.0, 5.5, 500, 1 << 20)


@pytest.mark.parametrize(
    "d,msg",
    [
        ({"gatway": {}}, "unknown section [gatway]"),
        (
            {"gateway": {"prot": 1}},
            "unknown key gateway.prot: did you mean port? (known: body_timeout_s, head_timeout_s,",
        ),
        (
            {"routes": [{"terminal": ["room"]}]},
            "unknown key routes[0].terminal: did you mean terminals? (known: racks, labels",
        ),
        ({"gateway": {"port": "80"}}, "gateway.port must be an integer"),
        ({"gateway": {"language": "fr"}}, "gateway.language must be one of zh, en"),
        # removed with issue 23: the C sender, the WSGI front and its thread count
        ({"gateway": {"native_send": True}}, "gateway.native_send was removed with the C answer sender"),
        ({"gateway": {"server": "waitress"}}, 'gateway.server = "waitress" was removed with the WSGI front'),
        ({"gateway": {"server": "wsgi"}}, 'gateway.server = "wsgi" was removed with the WSGI front'),
        ({"gateway": {"threads": 4}}, "gateway.threads was removed with the WSGI front"),
        ({"gateway": {"head_timeout_s": 0}}, "gateway.head_timeout_s must be >= 0.1"),
        ({"gateway": {"body_timeout_s": "30"}}, "gateway.body_timeout_s must be a number"),
        ({"gateway": {"max_connections": 8}}, "gateway.max_connections must be >= 16"),
        ({"gateway": {"max_connections": 1.5}}, "gateway.max_connections must be an integer"),
        ({"gateway": {"max_partial_body_bytes": 1000}}, "gateway.max_partial_body_bytes must be >= 65536"),
        ({"debounce": {"window_s": -1}}, "debounce.window_s must be >= 0"),
        ({"delivery": {"deadline_s": {"P3": 1}}}, "P0, P1, NORMAL"),
        ({"delivery": {"backoff_initial_s": 5, "backoff_max_s": 1}}, "backoff_max_s must be >="),
        (base(secret="inline!"), "never in the configuration"),
        (base(secret_file="x"), "exactly one of secret_env or secret_file"),
        (base(secret_env="NOPE"), "environment variable NOPE is not set"),
        (base(url="ftp://x"), "url must be an http"),
        (base(key_id=""), "key_id is required"),
        (dict(base(), routes=[{"racks": ["A*"], "terminals": ["ghost"]}]), "terminal 'ghost'"),
        (dict(base(), routes=[{"racks": ["A*"]}]), "must name at least one terminal"),
        ({"templates": {"en": {"THERMAL": "%s %s"}}}, "templates.en.THERMAL uses % fields; name them instead"),
        (
            {"templates": {"en": {"THERMAL": "{rack} {gpu_idx}"}}},
            "templates.en.THERMAL names an unknown field {gpu_idx}",
        ),
        ({"templates": {"zh": {"THERMAL": "{rack} {}"}}}, "templates.zh.THERMAL is not a valid template"),
        ({"templates": {"zh": {"THERMAL": "{rack"}}}, "templates.zh.THERMAL is not a valid template"),
        ({"templates": {"en": {"THERMAL": "{util:d}"}}}, "templates.en.THERMAL does not format"),
        ({"alertmanager": {"levels": {"critical": "P9"}}}, "alertmanager.levels.critical"),
    ],
)
def test_errors_name_the_key(d, msg):
    with pytest.raises(ConfigError) as e:
        Config.from_dict(d, env={"S": "sekrit-value"})
    assert msg in str(e.value)
    assert "sekrit-value" not in str(e.value)


def test_bad_toml(tmp_path):
    p = tmp_path / "g.toml"
    p.write_text("[gateway\nport=1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(str(p))


def test_check_config_cli(capsys, monkeypatch):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    assert main(["--config", EXAMPLE, "--check-config"]) == 0
    out = capsys.readouterr()
    d = json.loads(out.out)
    assert d["terminals"][0]["secret"].startswith("Secret(from env")
    assert "room-secret-123" not in out.out + out.err
    monkeypatch.delenv("SENTINEL_SECRET_OFFICE")
    assert main(["--config", EXAMPLE, "--check-config"]) == 2
    assert "SENTINEL_SECRET_OFFICE is not set" in capsys.readouterr().err


def test_console_script_runs_as_module():
    env = dict(os.environ, **ENV)
    r = subprocess.run(
        [sys.executable, "-m", "host_client.gateway.cli", "-c", EXAMPLE, "--check-config"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr


# ---- alerts about the alarm path (issue 25): never delivered to the terminal they are about ----------------------


def two_rooms(**room):
    d = base(**room)
    d["terminals"]["office"] = {"url": "http://127.0.0.1:8", "key_id": "o", "secret_env": "S"}
    return d


def test_a_terminal_that_falls_back_to_itself_is_refused_with_the_fix():
    with pytest.raises(ConfigError) as e:
        Config.from_dict(two_rooms(fallback=["room"]), env={"S": "x"})
    assert str(e.value).startswith("terminals.room.fallback names room itself")
    assert "name a different one" in str(e.value)
    with pytest.raises(ConfigError, match=r"terminals.room.fallback names terminal 'nowhere'"):
        Config.from_dict(two_rooms(fallback="nowhere"), env={"S": "x"})
    with pytest.raises(ConfigError, match="terminals.room.fallback must be a name or a list of names"):
        Config.from_dict(two_rooms(fallback=3), env={"S": "x"})


def test_an_alert_about_a_terminal_is_routed_around_it():
    c = Config.from_dict(two_rooms(), env={"S": "x"})
    assert c.route({"alertname": "X"}) == ["office", "room"]  # the default: every terminal
    # about room: every routed terminal but room
    assert c.route({"alertname": "SentinelTerminalUnreachable", "terminal": "room"}) == ["office"]
    d = two_rooms(fallback=["office"])
    d["routing"] = {"default": ["room"]}
    c = Config.from_dict(d, env={"S": "x"})
    assert c.route({"alertname": "X"}) == ["room"]
    # routed only to the terminal it is about: its fallback instead
    assert c.route({"alertname": "SentinelTerminalUnreachable", "terminal": "room"}) == ["office"]
    # a label naming no terminal of this gateway changes nothing
    assert c.route({"alertname": "X", "terminal": "elsewhere"}) == ["room"]


def test_an_alert_about_the_only_terminal_is_unrouted_here():
    c = Config.from_dict(base(), env={"S": "x"})
    assert c.route({"alertname": "SentinelTerminalUnreachable", "terminal": "room"}) == []


def test_the_example_config_gives_each_terminal_another_path():
    c = load_config(EXAMPLE, env=ENV)
    for name in c.terminals:
        labels = {"alertname": "SentinelTerminalUnreachable", "terminal": name, "rack": "A03"}
        assert name not in c.route(labels) and c.route(labels)


def test_escalation_and_ack_group_keys_are_checked():
    c = load_config(EXAMPLE, env=ENV)
    assert c.escalate_after({"rack": "A03"}) == 300.0
    assert c.ack_group_of("office") == ["machine-room", "office"]
    d = two_rooms(ack_group="on call")
    with pytest.raises(ConfigError, match="terminals.room.ack_group must be letters"):
        Config.from_dict(d, env={"S": "x"})
    d = two_rooms()
    d["routing"] = {"escalate_after_s": 0}
    with pytest.raises(ConfigError, match="routing.escalate_after_s"):
        Config.from_dict(d, env={"S": "x"})
    d = two_rooms()
    d["routes"] = [{"racks": ["B*"], "terminals": ["office"], "escalate_after_s": 30}]
    c = Config.from_dict(d, env={"S": "x"})
    assert c.escalate_after({"rack": "B01"}) == 30.0 and c.escalate_after({"rack": "A01"}) == 300.0
    assert c.ack_group_of("room") == []


def test_the_daemon_refuses_a_terminal_that_falls_back_to_itself_in_one_line(tmp_path):
    cfg = tmp_path / "gateway.toml"
    text = open(EXAMPLE).read().replace('fallback = ["office"]', 'fallback = ["machine-room"]', 1)
    cfg.write_text(text)
    for args in (["--check-config"], []):
        p = subprocess.run(
            [sys.executable, "-m", "host_client.gateway.cli", "-c", str(cfg)] + args,
            capture_output=True,
            text=True,
            env=dict(os.environ, **ENV),
            timeout=30,
        )
        assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
        assert "terminals.machine-room.fallback names machine-room itself" in p.stderr, p.stderr


def test_a_template_may_name_the_component_of_a_fabric_type():
    # issue 35: {component} is one of vocabulary.FIELDS, so an override of a fabric type may say the port
    c = Config.from_dict({"templates": {"en": {"IB_PORT_DOWN": "Rack {rack} node {host}: port {component} down"}}})
    assert c.templates["en"]["IB_PORT_DOWN"] == "Rack {rack} node {host}: port {component} down"
    with pytest.raises(ConfigError, match=r"names an unknown field \{port\}; known: .*\{component\}"):
        Config.from_dict({"templates": {"en": {"IB_PORT_DOWN": "{host} {port}"}}})
