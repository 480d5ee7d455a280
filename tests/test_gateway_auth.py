"""Ingest authentication ([ingest] token_env / token_file): over real HTTP on loopback, through the gateway's HTTP
front, every ingest endpoint answers 401 with a precise code for no token, a wrong scheme and a wrong token,
and takes the event with the right one; /healthz and /metrics stay open; the token never shows in an answer, a
log line or --check-config. The probe's sender sends it; a real Alertmanager with http_config.authorization reaches
the gateway, one without is refused."""

import json
import logging
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from deploy_live import stop  # SIGTERM, then SIGKILL after 10 s
from test_gateway_server import Fake, read_answers  # the terminal stand-in that records alarms

from host_client.errors import ConfigError
from host_client.gateway.config import Config
from host_client.gateway.server import IngestFront
from host_client.gateway.service import Gateway

TOKEN = "tok-Zq3v9X2mW8pL4rT6yB1nC5dF7gH0jK"
OLD = "old-token-in-rotation-0123456789ab"
AM = "/usr/bin/prometheus-alertmanager"

EV = {"cluster_rack": "A03", "node_host": "gpu-worker-08", "event_type": "NCCL_TIMEOUT"}
AM_BODY = {
    "version": "4",
    "status": "firing",
    "receiver": "sentinel",
    "groupKey": '{}:{alertname="X"}',
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "GPUXidFatal", "severity": "critical", "rack": "A03", "Hostname": "gpu-worker-08"},
            "annotations": {"summary": "GPU 3 fell off the bus"},
            "startsAt": "2026-12-01T10:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "fingerprint": "a1b2c3d4e5f60718",
        }
    ],
}
GRAFANA_BODY = dict(AM_BODY, version="1")
ENDPOINTS = [("/api/v1/gpu_event", EV), ("/api/v1/alertmanager", AM_BODY), ("/api/v1/grafana", GRAFANA_BODY)]


def config(tmp_path, **ingest):
    (tmp_path / "ingest.token").write_text(OLD + "\n")
    d = {
        "gateway": {"state_dir": str(tmp_path / "state")},
        "ingest": ingest or {"token_env": "SENTINEL_INGEST_TOKEN", "token_file": "ingest.token"},
        "terminals": {"room": {"url": "http://127.0.0.1:9", "key_id": "k", "secret_env": "S"}},
        "delivery": {"rate_interval_s": 0},
    }
    return Config.from_dict(d, env={"S": "s", "SENTINEL_INGEST_TOKEN": TOKEN}, base_dir=str(tmp_path))


class EpollFront:
    def __init__(self, cfg, clients=None):
        self.gw = Gateway(cfg, clients=clients)
        self.gw.start()
        self.front = IngestFront(self.gw, cfg)
        ready = threading.Event()
        self.t = threading.Thread(target=self.front.run, args=("127.0.0.1", 0, ready.set), daemon=True)
        self.t.start()
        assert ready.wait(10)
        self.url = "http://127.0.0.1:%d" % self.front.port

    def close(self):
        self.front.stop()
        self.t.join(5)
        self.gw.stop()


@pytest.fixture
def server(tmp_path):
    fake = Fake()
    s = EpollFront(config(tmp_path), clients={"room": fake})
    s.fake = fake
    yield s
    s.close()


def call(url, body=None, auth=None, method=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    h = {"Content-Type": "application/json"}
    if auth is not None:
        h["Authorization"] = auth
    req = urllib.request.Request(url, data, h, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


@pytest.mark.parametrize("path,body", ENDPOINTS)
@pytest.mark.parametrize(
    "auth,code",
    [
        (None, "auth_required"),
        ("Basic " + TOKEN, "auth_scheme"),
        ("Bearer", "auth_scheme"),
        ("Bearer wrong-token-0123456789abcdef", "auth_invalid"),
        ("Bearer " + TOKEN[:-1], "auth_invalid"),
        ("Bearer " + TOKEN + "x", "auth_invalid"),
    ],
)
def test_refused_without_the_right_token(server, path, body, auth, code, caplog):
    caplog.set_level(logging.DEBUG, logger="sentinel.gateway")
    status, headers, raw = call(server.url + path, body, auth)
    assert status == 401
    assert headers.get("Content-Type") == "application/json"
    assert headers.get("WWW-Authenticate", "").startswith("Bearer")
    ans = json.loads(raw)
    assert ans["ok"] is False and ans["error"] == code and ans["message"]
    assert TOKEN not in raw.decode() and OLD not in raw.decode()
    assert TOKEN[:-1] not in caplog.text and OLD not in caplog.text
    # refused before anything changed: no event counted, nothing queued
    assert not server.gw.events_in
    assert all(not lane.items for lane in server.gw.lanes.values())
    m = call(server.url + "/metrics")[2].decode()
    assert (
        'sentinel_gateway_events_rejected_total{source="%s",code="%s"} 1'
        % (
            {"/api/v1/gpu_event": "gpu_event", "/api/v1/alertmanager": "alertmanager", "/api/v1/grafana": "grafana"}[
                path
            ],
            code,
        )
        in m
    )


@pytest.mark.parametrize("path,body", ENDPOINTS)
@pytest.mark.parametrize("token", [TOKEN, OLD])
def test_taken_with_either_configured_token(server, path, body, token):
    status, _h, raw = call(server.url + path, body, "Bearer " + token)
    assert status == 200, raw
    assert json.loads(raw)["ok"] is True
    assert sum(server.gw.events_in.values()) == 1


def test_scheme_is_case_insensitive_and_open_endpoints(server):
    assert call(server.url + "/api/v1/gpu_event", EV, "bearer  " + TOKEN)[0] == 200
    st, _h, raw = call(server.url + "/healthz")
    assert st == 200 and json.loads(raw)["ok"] is True
    assert call(server.url + "/metrics")[0] == 200
    # wrong method and unknown path keep their own answers (no token needed to learn there is nothing there)
    assert call(server.url + "/api/v1/gpu_event")[0] == 405
    assert call(server.url + "/nowhere")[0] == 404


def test_a_token_is_never_carried_to_the_next_request_on_a_connection(server):
    """A keep-alive connection: the token, and an Expect, of one request are that request's only. A request after
    it without a token is refused 401 (whether it has an Expect or not), and one without an Expect gets no 100."""
    import socket

    body = json.dumps(EV).encode()
    head = b"POST /api/v1/gpu_event HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n"
    expect = b"Expect: 100-continue\r\n"
    token = b"Authorization: Bearer %s\r\n" % TOKEN.encode()
    with socket.create_connection(("127.0.0.1", server.front.port), timeout=10) as s:
        for fields, continued, want in ((token + expect, True, 200), (expect, True, 401), (b"", False, 401)):
            s.sendall(head % (fields, len(body)))
            s.settimeout(0.5)
            try:
                early = s.recv(65536)  # before the body, only a 100 (Continue), and only for an Expect
            except TimeoutError:
                early = b""
            s.settimeout(10)
            assert early == (b"HTTP/1.1 100 Continue\r\n\r\n" if continued else b"")
            s.sendall(body)
            ((status, _head, answer),) = read_answers(s, 1)
            assert status == want, (fields, answer)
            if want == 401:
                assert b"auth_required" in answer


def test_oversized_body_without_token_is_401_not_413(server):
    big = b'{"x":"' + b"a" * 70000 + b'"}'
    status, _h, raw = call(server.url + "/api/v1/gpu_event", big)
    assert status == 401 and json.loads(raw)["error"] == "auth_required"
    status, _h, raw = call(server.url + "/api/v1/gpu_event", big, "Bearer " + TOKEN)
    assert status == 413


def test_open_when_not_configured(tmp_path):
    cfg = Config.from_dict(
        {"terminals": {"room": {"url": "http://127.0.0.1:9", "key_id": "k", "secret_env": "S"}}}, env={"S": "s"}
    )
    assert cfg.ingest_tokens == []
    s = EpollFront(cfg, clients={"room": Fake()})
    try:
        assert call(s.url + "/api/v1/gpu_event", EV)[0] == 200
        assert call(s.url + "/api/v1/gpu_event", EV, "Bearer anything")[0] == 200
    finally:
        s.close()


@pytest.mark.parametrize(
    "ingest,env,files,msg",
    [
        ({"token_env": "NOPE"}, {}, {}, "environment variable NOPE is not set"),
        ({"token_env": "T"}, {"T": "short"}, {}, "at least 16"),
        ({"token_env": "T"}, {"T": "has space in the token 123"}, {}, "at least 16"),
        ({"token_file": "missing.token"}, {}, {}, "cannot read"),
        ({"token_file": "empty.token"}, {}, {"empty.token": "\n"}, "is empty"),
        ({"token_env": 3}, {}, {}, "ingest.token_env must be"),
        ({"token": "x"}, {}, {}, "unknown key ingest.token"),
    ],
)
def test_config_errors_name_the_source_never_the_token(tmp_path, ingest, env, files, msg):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as e:
        Config.from_dict({"ingest": ingest}, env=env, base_dir=str(tmp_path))
    assert msg in str(e.value)
    for v in env.values():
        assert v not in str(e.value)


def test_check_config_says_whether_ingest_auth_is_on(tmp_path):
    (tmp_path / "ingest.token").write_text(TOKEN + "\n")
    toml = tmp_path / "gateway.toml"
    toml.write_text('[ingest]\ntoken_file = "ingest.token"\n')
    p = subprocess.run(
        [sys.executable, "-m", "host_client.gateway.cli", "--check-config", "-c", str(toml)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["ingest_auth"].startswith("bearer token required (1 token(s): file ")
    assert TOKEN not in p.stdout + p.stderr
    toml.write_text("")
    p = subprocess.run(
        [sys.executable, "-m", "host_client.gateway.cli", "--check-config", "-c", str(toml)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0 and json.loads(p.stdout)["ingest_auth"].startswith("off")


def test_probe_sender_sends_the_token(tmp_path):
    from host_client.probes import config as pcfg
    from host_client.probes.sender import Sender

    fake = Fake()
    s = EpollFront(config(tmp_path), clients={"room": fake})
    try:
        tf = tmp_path / "probe.token"
        tf.write_text(TOKEN + "\n")
        cfg = pcfg.build(
            {"node": {"rack": "A03", "host": "gpu-worker-08", "gateway": s.url}, "sender": {"token_file": str(tf)}}
        )
        assert pcfg.ingest_token(cfg) == TOKEN
        good = Sender(s.url + "/api/v1/gpu_event", token=pcfg.ingest_token(cfg), backoff_initial_s=0.05)
        bad = Sender(s.url + "/api/v1/gpu_event", backoff_initial_s=0.05)
        for snd in (good, bad):
            snd.start()
            snd.submit(dict(EV, node_host="gpu-worker-%d" % id(snd)))
        assert good.flush(10)
        end = time.monotonic() + 10
        while time.monotonic() < end and not (good.sent and bad.failures):
            time.sleep(0.05)
        assert good.sent == 1 and good.rejected == 0
        # a refused token is a configuration to fix, not an alarm to drop: kept queued, retried, reason logged
        assert bad.sent == 0 and bad.rejected == 0 and bad.pending() == 1
        assert "HTTP 401" in bad.last_error and "auth_required" in bad.last_error and TOKEN not in bad.last_error
        assert sum(s.gw.events_in.values()) == 1
        for snd in (good, bad):
            snd.close()
    finally:
        s.close()
    with pytest.raises(ConfigError, match="SENTINEL_PROBE_TOKEN is not set"):
        pcfg.ingest_token(
            pcfg.build({"node": {"rack": "A03", "host": "h"}, "sender": {"token_env": "SENTINEL_PROBE_TOKEN"}}), env={}
        )
    toml = tmp_path / "probe.toml"
    toml.write_text('[node]\nrack = "A03"\ngateway = "http://127.0.0.1:9"\n[sender]\ntoken_env = "SENTINEL_PT"\n')
    base = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    cmd = [sys.executable, "-m", "host_client.probes.cli", "--check-config", "-c", str(toml)]
    p = subprocess.run(cmd, env=base, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "SENTINEL_PT is not set" in p.stderr
    p = subprocess.run(cmd, env=dict(base, SENTINEL_PT=TOKEN), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "ingest token env SENTINEL_PT" in p.stdout and TOKEN not in p.stdout + p.stderr


@pytest.mark.skipif(not os.path.exists(AM), reason="prometheus-alertmanager is not installed")
def test_real_alertmanager_with_http_config_authorization(tmp_path):
    from test_gateway_alertmanager_real import post_alert, wait_ready

    from testkit.net import free_port

    fake = Fake()
    s = EpollFront(config(tmp_path), clients={"room": fake})
    port = free_port()
    am_url = "http://127.0.0.1:%d" % port
    (tmp_path / "am.token").write_text(TOKEN + "\n")
    cfg = tmp_path / "am.yml"
    cfg.write_text(
        "route:\n"
        "  receiver: sentinel\n"
        "  group_by: ['...']\n"
        "  group_wait: 1s\n"
        "  group_interval: 1s\n"
        "  repeat_interval: 1h\n"
        "  routes:\n"
        "    - matchers: ['via=\"noauth\"']\n"
        "      receiver: noauth\n"
        "receivers:\n"
        "  - name: sentinel\n"
        "    webhook_configs:\n"
        "      - url: %s/api/v1/alertmanager\n"
        "        send_resolved: true\n"
        "        http_config:\n"
        "          authorization:\n"
        "            type: Bearer\n"
        "            credentials_file: %s\n"
        "  - name: noauth\n"
        "    webhook_configs:\n"
        "      - url: %s/api/v1/alertmanager\n" % (s.url, tmp_path / "am.token", s.url)
    )
    proc = subprocess.Popen(
        [
            AM,
            "--config.file=%s" % cfg,
            "--storage.path=%s" % (tmp_path / "data"),
            "--web.listen-address=127.0.0.1:%d" % port,
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_ready(am_url, proc)
        post_alert(
            am_url,
            {
                "alertname": "GPUXidFatal",
                "severity": "critical",
                "rack": "A03",
                "Hostname": "gpu-worker-08",
                "gpu": "3",
            },
            {"summary": "GPU 3 fell off the bus"},
        )
        post_alert(
            am_url,
            {
                "alertname": "GPUXidFatal",
                "severity": "critical",
                "rack": "A04",
                "Hostname": "gpu-worker-09",
                "gpu": "1",
                "via": "noauth",
            },
            {"summary": "GPU 1 fell off the bus"},
        )
        end = time.monotonic() + 30
        while time.monotonic() < end and not (fake.sent and s.gw.rejected.get(("alertmanager", "auth_required"))):
            time.sleep(0.1)
        assert s.gw.events_in.get(("alertmanager", "firing")) == 1
        assert any("GPU 3 fell off the bus" in str(a.text) for a in fake.sent)
        assert not any("GPU 1" in str(a.text) for a in fake.sent)
        assert s.gw.rejected.get(("alertmanager", "auth_required"), 0) >= 1
    finally:
        stop(proc)
        s.close()
