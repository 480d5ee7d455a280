"""The ACK ledger under state_dir (host_client/gateway/ledger.py), the incident history (history.py) and its CLI
(incidents_cli.py): what a restart keeps, a damaged ledger read as far as it goes, a P0 opened (and on disk) before
its 200, and GET /api/v1/incidents, `sentinel-gateway incidents` and `sentinel-gateway ack KEY` against a real
gateway process and a real emulator over loopback; the terminal's page says who acknowledged (the CLI, a member of
the ACK group)."""

import json
import logging
import os
import subprocess
import sys
import time

import pytest
from deploy_live import ROOT, emulator_status, get, start_emulator, start_gateway, stop, wait_status

from host_client.gateway.config import Config
from host_client.gateway.ledger import FILE
from host_client.gateway.service import TAKEN, Gateway
from testkit.net import free_port

KEY = "A03:gpu-worker-08:NCCL_TIMEOUT"
EV = {"cluster_rack": "A03", "node_host": "gpu-worker-08", "event_type": "NCCL_TIMEOUT"}
TOKEN = "ledger-test-ingest-token-0123456789"


def config(state_dir, url, escalate_after_s=60):
    return Config.from_dict(
        {
            "gateway": {"state_dir": str(state_dir)},
            "delivery": {"status_poll_s": 0.2, "backoff_initial_s": 0.05, "backoff_max_s": 0.2},
            "routing": {"escalate_after_s": escalate_after_s},
            "terminals": {"room": {"url": url, "key_id": "k", "secret_env": "S", "timeout_s": 0.5}},
        },
        env={"S": "x" * 32},
    )


def dead_url():
    return "http://127.0.0.1:%d" % free_port()  # nothing listens there


def open_lines(state_dir):
    with open(os.path.join(str(state_dir), FILE)) as f:
        return [json.loads(line) for line in f if '"t":"open"' in line]


def test_a_p0_is_open_on_disk_before_its_200_and_escalates_unseen_with_its_deadline_through_a_restart(tmp_path):
    url = dead_url()
    gw = Gateway(config(tmp_path, url, escalate_after_s=2))
    gw.start()
    try:
        assert gw.gpu_event(dict(EV))[0] == TAKEN
        (rec,) = open_lines(tmp_path)  # written before the answer
        assert (rec["terminal"], rec["key"], rec["shown"]) == ("room", KEY, False)
        deadline = rec["deadline"]
        assert "sentinel_gateway_p0_escalation{" not in gw.metrics_text()
    finally:
        gw.stop()
    # a new gateway on the same state_dir (as after kill -9: the file is what was on disk)
    gw2 = Gateway(config(tmp_path, url, escalate_after_s=2))
    try:
        ((o, shown),) = gw2.acks.deadlines()
        assert o.deadline == deadline and not o.shown and shown == "none"
        time.sleep(max(0.0, deadline - time.time()) + 0.1)
        m = gw2.metrics_text()
        assert (
            'sentinel_gateway_p0_escalation{terminal="room",incident="%s",rack="A03",node_host="gpu-worker-08",'
            'event_type="NCCL_TIMEOUT",shown="none"} 1' % KEY
        ) in m, m
        assert "sentinel_gateway_p0_deadline_timestamp_seconds{" in m
    finally:
        gw2.stop()


def test_a_damaged_ledger_is_one_log_line_and_the_rest_is_kept(tmp_path, caplog):
    url = dead_url()
    gw = Gateway(config(tmp_path, url))
    gw.start()
    try:
        assert gw.gpu_event(dict(EV))[0] == TAKEN
        assert gw.gpu_event(dict(EV, cluster_rack="B07", node_host="gpu-worker-09"))[0] == TAKEN
    finally:
        gw.stop()
    path = os.path.join(str(tmp_path), FILE)
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    # one record damaged, a line of garbage, and the file torn in its last line
    first = next(i for i, ln in enumerate(lines) if b'A03:gpu-worker-08:NCCL_TIMEOUT"' in ln and b'"t":"open"' in ln)
    lines[first] = lines[first].replace(b'"deadline":', b'"deadline":"soon",')
    damaged = b"\n".join(lines[:-2] + [b"\x00\xffnot json", lines[-2][: len(lines[-2]) // 2]])
    with open(path, "wb") as f:
        f.write(damaged)
    with caplog.at_level(logging.INFO, logger="sentinel.gateway"):
        gw2 = Gateway(config(tmp_path, url))
    try:
        bad = [r for r in caplog.records if r.getMessage() == "ack_ledger_damaged"]
        assert len(bad) == 1 and bad[0].fields["skipped"] >= 2, [r.getMessage() for r in caplog.records]
        keys = {o.key for o, _shown in gw2.acks.deadlines()}
        assert "B07:gpu-worker-09:NCCL_TIMEOUT" in keys and KEY not in keys
        assert gw2.health()["ok"]
    finally:
        gw2.stop()


def cli(cfg_path, *args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "host_client.gateway.cli", "-c", cfg_path, *args],
        env=dict(os.environ, **(env or {})),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_incidents_over_http_and_the_cli_and_an_ack_from_the_cli_reaches_the_terminal(tmp_path, monkeypatch):
    monkeypatch.setenv("LEDGER_TEST_TOKEN", TOKEN)
    emu, emu_url, emu_cfg = start_emulator(tmp_path / "emu")
    gw = None
    try:
        gw, gw_url = start_gateway(
            tmp_path,
            emu_url,
            emu_cfg["key_id"],
            emu_cfg["secret"],
            extra_toml='[ingest]\ntoken_env = "LEDGER_TEST_TOKEN"\n',
        )
        cfg_path = str(tmp_path / "gateway.toml")
        env = {"SENTINEL_SECRET_EMU": emu_cfg["secret"]}
        # the history is the ingest token's, like ingest
        import urllib.error
        import urllib.request

        with pytest.raises(urllib.error.HTTPError) as e:
            get(gw_url + "/api/v1/incidents")
        assert e.value.code == 401
        req = urllib.request.Request(
            gw_url + "/api/v1/gpu_event",
            json.dumps(EV).encode(),
            {"Content-Type": "application/json", "Authorization": "Bearer " + TOKEN},
        )
        assert urllib.request.urlopen(req, timeout=5).status == 200
        wait_status(emu_url, lambda s: any(a["key"] == KEY for a in s["active"]), 10)

        r = cli(cfg_path, "incidents", "--open", env=env)
        assert r.returncode == 0, r.stderr
        assert KEY in r.stdout and "OPEN" in r.stdout and "shown" in r.stdout, r.stdout

        r = cli(cfg_path, "ack", KEY, env=env)
        assert r.returncode == 0, r.stderr
        assert "acknowledged on emu" in r.stdout, r.stdout
        st = emulator_status(emu_url)
        assert KEY in st["mute"]["acknowledged"]
        assert [a["acknowledged_by"] for a in st["active"] if a["key"] == KEY] == ["cli"]

        r = cli(cfg_path, "incidents", "--json", env=env)
        (inc,) = [x for x in json.loads(r.stdout)["incidents"] if x["key"] == KEY]
        assert inc["acknowledged"]["emu"]["via"] == "cli" and not inc["open"] and "emu" in inc["shown"]
        assert cli(cfg_path, "incidents", "--open", env=env).stdout.strip() == "no incidents"
        # an incident that is not open: one line, exit 1
        r = cli(cfg_path, "ack", "Z99:nowhere:XID_FATAL", env=env)
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and "not open" in r.stderr, r.stderr
    finally:
        stop(gw)
        stop(emu)
    log = gw.stderr.read().decode()
    acks = [ln for ln in log.splitlines() if "p0_acknowledged" in ln]
    assert acks and all('via="cli"' in ln for ln in acks), acks
    assert 'via="button"' not in log


def test_a_group_ack_tells_the_other_member_whose_button_it_was(tmp_path):
    """Two real emulators in one ack_group behind a real gateway process: ACK on room (as its button does) reaches
    office through the gateway, and office's page says it was room's: acknowledged_by "group:room"."""
    from deploy_live import wait_http

    from host_client.client import AlarmClient

    room, room_url, room_cfg = start_emulator(tmp_path / "room", key_id="room")
    office, office_url, office_cfg = start_emulator(tmp_path / "office", key_id="office")
    gw = None
    try:
        port = free_port()
        cfg_path = tmp_path / "gateway.toml"
        terminals = "".join(
            '[terminals.%s]\nurl = "%s"\nkey_id = "%s"\nsecret_env = "S_%s"\nack_group = "on-call"\n\n'
            % (name, url, name, name.upper())
            for name, url in (("room", room_url), ("office", office_url))
        )
        cfg_path.write_text(
            '[gateway]\nhost = "127.0.0.1"\nport = %d\nstate_dir = "%s"\n\n'
            "[delivery]\nrate_interval_s = 0\nstatus_poll_s = 0.2\n\n"
            '[routing]\ndefault = ["room", "office"]\n\n%s' % (port, tmp_path / "gw-state", terminals)
        )
        env = dict(os.environ, S_ROOM=room_cfg["secret"], S_OFFICE=office_cfg["secret"])
        gw = subprocess.Popen(
            [sys.executable, "-m", "host_client.gateway.cli", "-c", str(cfg_path)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        gw_url = "http://127.0.0.1:%d" % port
        wait_http(gw_url + "/healthz", gw)
        import urllib.request

        req = urllib.request.Request(
            gw_url + "/api/v1/gpu_event", json.dumps(EV).encode(), {"Content-Type": "application/json"}
        )
        assert urllib.request.urlopen(req, timeout=5).status == 200
        for url in (room_url, office_url):
            wait_status(url, lambda s: any(a["key"] == KEY for a in s["active"]), 10)

        AlarmClient(room_url, "room", room_cfg["secret"]).ack()
        _t, st = wait_status(office_url, lambda s: KEY in s["mute"]["acknowledged"], 10)
        assert [a["acknowledged_by"] for a in st["active"] if a["key"] == KEY] == ["group:room"]
    finally:
        stop(gw)
        stop(office)
        stop(room)


def test_a_storm_is_one_tally_per_type_and_evicts_none_of_the_nights_incidents():
    """A storm of 1,500 nodes folds into summaries: the history keeps each folded incident as a count on one
    "folded:<TYPE>" record, so tonight's earlier P0 is still listed after thousands of them (it holds 1,000)."""
    cfg = Config.from_dict(
        {"terminals": {"room": {"url": "http://127.0.0.1:9", "key_id": "k", "secret_env": "S"}}},
        env={"S": "s"},
    )
    gw = Gateway(cfg, clients={"room": object()})
    first = dict(EV, cluster_rack="Z99", node_host="gpu-worker-01", event_type="XID_FATAL", gpu_index=2)
    assert gw.gpu_event(first)[0] == TAKEN
    for i in range(3000):
        node = i % 1500
        ev = dict(EV, cluster_rack="R%03d" % (node % 50), node_host="gpu-node-%05d" % node, gpu_index=i % 8)
        assert gw.gpu_event(ev)[0] == TAKEN
    items = {r["key"]: r for r in gw.history.listing()}
    assert "Z99:gpu-worker-01:XID_FATAL:gpu2" in items
    tally = items["folded:%s" % EV["event_type"]]
    assert tally["folded"] > 1000 and not tally["open"]
    assert len(items) < 200  # a few racks' own alarms and one tally, not thousands
