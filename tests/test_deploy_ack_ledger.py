"""The acknowledgement loop when things break (issue 33), with real servers: deploy/prometheus (rules as shipped,
1 s scrape and evaluation) and deploy/alertmanager (routes as shipped, 1 s group timers), one pair of them for the
whole module; the real gateway (examples/gateway.toml, escalate_after_s 5) and real emulators over loopback; the
pager a recording webhook.

- kill -9 of the gateway right after a P0 is shown on both terminals: the deadline passes while it is down and the
  pager hears of it on time; an ACK pressed on machine-room while the gateway is down is read after the restart,
  office is told, and the pages resolve; each (incident, terminal) paged once.
- a P0 whose only terminal is dead from the start pages by its deadline, saying no terminal showed it.
- a terminal whose status page drips one byte a second: the ACK on machine-room still reaches office within 5 s,
  and the dripping terminal's own P0 escalates."""

import json
import os
import subprocess
import sys
import time

import pytest
from ack_world import DripTerminal, World, acked, example_gateway, kill9, p0, wait_for
from deploy_live import (
    ALERTMANAGER,
    INGEST_TOKEN,
    PROMETHEUS,
    ROOT,
    emulator_status,
    post,
    start_emulator,
    start_example_gateway,
    stop,
    wait_status,
)

from host_client import AlarmClient
from testkit.net import free_port

for _b in (PROMETHEUS, ALERTMANAGER):
    if not os.path.exists(_b):
        pytest.skip("%s is not installed (tools/install-system-deps.sh installs it)" % _b, allow_module_level=True)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("watchers"))
    yield w
    w.close()


def test_kill9_after_the_p0_is_shown_it_pages_on_time_once_and_an_ack_pressed_while_down_is_honoured(world, tmp_path):
    key = "A11:gpu-worker-21:NCCL_TIMEOUT"
    procs = []
    try:
        room, room_url, room_cfg = start_emulator(
            tmp_path / "room", port=world.room_port, key_id="gpu_cluster_sentinel"
        )
        office, office_url, office_cfg = start_emulator(tmp_path / "office", port=world.office_port, key_id="office")
        procs += [room, office]
        gw, gw_url = example_gateway(world, tmp_path, (room_url, room_cfg), (office_url, office_cfg))
        procs.append(gw)
        assert post(gw_url + "/api/v1/gpu_event", p0("A11", "gpu-worker-21"), token=INGEST_TOKEN)[0] == 200
        t_taken = time.monotonic()
        for url in (room_url, office_url):
            wait_status(url, lambda s: any(a["key"] == key and a["level"] == "P0" for a in s["active"]), 10)
        time.sleep(1.5)  # a scrape of the gateway since: Prometheus knows the deadlines
        kill9(gw)  # two unacknowledged P0s open, the gateway gone

        # the deadline (taken + 5 s) passes while the gateway is down: Prometheus pages from its last scrape
        t_page, _ = wait_for(
            lambda: {p[0] for p in world.pages(key, "firing")} >= {"machine-room", "office"}, 30, "page"
        )
        print("kill -9 after shown: deadline -> page while the gateway is down: %.1f s" % (t_page - t_taken - 5))
        assert t_page - t_taken >= 5

        # ACK on machine-room while the gateway is down; then the gateway comes back on its state_dir
        AlarmClient(room_url, "gpu_cluster_sentinel", room_cfg["secret"]).ack()
        t_ack = time.monotonic()
        time.sleep(2)  # the page stands meanwhile
        assert not world.pages(key, "resolved"), "the page resolved while nobody had acknowledged it to the gateway"
        gw, gw_url = example_gateway(world, tmp_path, (room_url, room_cfg), (office_url, office_cfg))
        procs.append(gw)
        t_office, _ = wait_for(lambda: acked(office_url, key), 10, "office acknowledged after the restart")
        t_res, _ = wait_for(
            lambda: {p[0] for p in world.pages(key, "resolved")} >= {"machine-room", "office"}, 30, "pages resolved"
        )
        print(
            "ACK pressed while down -> office acknowledged %.1f s, pages resolved %.1f s after the press (2 s of it "
            "the gateway still down)" % (t_office - t_ack, t_res - t_ack)
        )
        # one page per (incident, terminal): one startsAt each, never resolved and fired again
        starts = {}
        for term, started, _st, _l, _a in world.pages(key):
            starts.setdefault(term, set()).add(started)
        assert starts == {"machine-room": starts["machine-room"], "office": starts["office"]}
        assert all(len(v) == 1 for v in starts.values()), starts

        # the history says what happened
        inc = json.loads(
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "host_client.gateway.cli",
                    "-c",
                    str(tmp_path / "gateway.toml"),
                    "incidents",
                    "--json",
                ],
                env=dict(
                    os.environ,
                    SENTINEL_SECRET_MACHINE_ROOM="x",
                    SENTINEL_SECRET_OFFICE="x",
                    SENTINEL_INGEST_TOKEN=INGEST_TOKEN,
                ),
                cwd=ROOT,
                capture_output=True,
                timeout=30,
                check=True,
            ).stdout
        )["incidents"]
        (r,) = [x for x in inc if x["key"] == key]
        assert set(r["shown"]) == {"machine-room", "office"}
        assert r["acknowledged"]["machine-room"]["via"] == "terminal"
        assert r["acknowledged"]["office"]["via"] == "group"
        assert set(r["escalated"]) == {"machine-room", "office"}
    finally:
        for p in reversed(procs):
            stop(p)


def test_a_p0_whose_only_terminal_is_dead_from_the_start_pages_saying_nobody_saw_it(world, tmp_path):
    """Rack Z05 takes the example's default route: machine-room only, and nothing listens on its port."""
    key = "Z05:gpu-worker-31:XID_FATAL"
    procs = []
    try:
        # machine-room's port has nobody on it; office is up but the example's default route skips it
        office, office_url, office_cfg = start_emulator(tmp_path / "office", port=world.office_port, key_id="office")
        procs.append(office)
        gw, gw_url = example_gateway(
            world, tmp_path, ("http://127.0.0.1:%d" % world.room_port, {"secret": "s" * 32}), (office_url, office_cfg)
        )
        procs.append(gw)
        ev = json.dumps(
            {"cluster_rack": "Z05", "node_host": "gpu-worker-31", "event_type": "XID_FATAL", "gpu_index": 0}
        )
        assert post(gw_url + "/api/v1/gpu_event", ev, token=INGEST_TOKEN)[0] == 200
        t0 = time.monotonic()
        t_page, pages = wait_for(lambda: world.pages(key + ":gpu0", "firing"), 30, "page for a P0 nobody saw")
        print("P0 to a dead terminal -> page: %.1f s (escalate_after_s 5)" % (t_page - t0))
        (term, _s, _st, labels, ann) = pages[0]
        assert term == "machine-room" and labels["shown"] == "none"
        assert "no terminal showed it" in ann["summary"] and key in ann["summary"], ann
        assert [a for a in emulator_status(office_url)["active"] if a["key"].startswith("Z05")] == []

        # a P0 for both: machine-room never shows it, office does and dies before anyone acknowledges it
        key2 = "A06:gpu-worker-32:NCCL_TIMEOUT"
        assert post(gw_url + "/api/v1/gpu_event", p0("A06", "gpu-worker-32"), token=INGEST_TOKEN)[0] == 200
        wait_status(office_url, lambda s: any(a["key"] == key2 for a in s["active"]), 10)
        stop(office)
        t_page, _ = wait_for(
            lambda: {p[0] for p in world.pages(key2, "firing")} >= {"machine-room", "office"}, 30, "both pages"
        )
        shown = {p[0]: p[3]["shown"] for p in world.pages(key2, "firing")}
        assert shown == {"machine-room": "false", "office": "true"}, shown
        summary = {p[0]: p[4]["summary"] for p in world.pages(key2, "firing")}
        assert "never reached terminal machine-room" in summary["machine-room"], summary
        assert "not acknowledged on terminal office" in summary["office"], summary
    finally:
        for p in reversed(procs):
            stop(p)


def test_a_status_page_dripping_a_byte_a_second_stalls_nothing(world, tmp_path):
    key = "A03:gpu-worker-41:NCCL_TIMEOUT"
    drip_port = free_port()
    drip = DripTerminal(drip_port)
    procs = []
    try:
        room, room_url, room_cfg = start_emulator(
            tmp_path / "room", port=world.room_port, key_id="gpu_cluster_sentinel"
        )
        office, office_url, office_cfg = start_emulator(tmp_path / "office", port=world.office_port, key_id="office")
        procs += [room, office]
        extra = '\n[terminals.drip]\nurl = "%s"\nkey_id = "drip"\nsecret_env = "SENTINEL_SECRET_OFFICE"\n' % drip.url
        gw, gw_url = start_example_gateway(
            tmp_path,
            room=(room_url, room_cfg),
            office=(office_url, office_cfg),
            port=world.gw_port,
            also=[
                ("escalate_after_s = 300 ", "escalate_after_s = 5 "),
                ("[routing]\n", extra + "\n[routing]\n"),
                ('terminals = ["machine-room", "office"]', 'terminals = ["machine-room", "office", "drip"]'),
            ],
        )
        procs.append(gw)
        assert post(gw_url + "/api/v1/gpu_event", p0("A03", "gpu-worker-41"), token=INGEST_TOKEN)[0] == 200
        for url in (room_url, office_url):
            wait_status(url, lambda s: any(a["key"] == key for a in s["active"]), 10)
        wait_for(lambda: drip.posts >= 1, 10, "the P0 delivered to the dripping terminal")
        time.sleep(1.5)  # the drip's status read is in flight now
        AlarmClient(room_url, "gpu_cluster_sentinel", room_cfg["secret"]).ack()
        t_ack = time.monotonic()
        t_office, _ = wait_for(lambda: acked(office_url, key), 5, "office acknowledged within 5 s")
        print("beside a dripping terminal: ACK on machine-room -> office acknowledged %.2f s" % (t_office - t_ack))
        # the drip terminal's own P0 pages on time; machine-room's and office's do not
        wait_for(lambda: "drip" in {p[0] for p in world.pages(key, "firing")}, 30, "the drip terminal's page")
        assert not {"machine-room", "office"} & {p[0] for p in world.pages(key, "firing")}
    finally:
        for p in reversed(procs):
            stop(p)
        drip.close()


def test_kill9_after_it_paged_the_page_stands_through_the_restart_and_resolves_on_the_ack(world, tmp_path):
    key = "A12:gpu-worker-22:NCCL_TIMEOUT"
    procs = []
    try:
        room, room_url, room_cfg = start_emulator(
            tmp_path / "room", port=world.room_port, key_id="gpu_cluster_sentinel"
        )
        office, office_url, office_cfg = start_emulator(tmp_path / "office", port=world.office_port, key_id="office")
        procs += [room, office]
        gw, gw_url = example_gateway(world, tmp_path, (room_url, room_cfg), (office_url, office_cfg))
        procs.append(gw)
        assert post(gw_url + "/api/v1/gpu_event", p0("A12", "gpu-worker-22"), token=INGEST_TOKEN)[0] == 200
        wait_for(lambda: {p[0] for p in world.pages(key, "firing")} >= {"machine-room", "office"}, 30, "page")
        kill9(gw)
        time.sleep(3)  # down for three scrapes and evaluations
        gw, gw_url = example_gateway(world, tmp_path, (room_url, room_cfg), (office_url, office_cfg))
        procs.append(gw)
        time.sleep(3)  # back for three
        assert not world.pages(key, "resolved"), "the page resolved though nobody acknowledged it"
        AlarmClient(room_url, "gpu_cluster_sentinel", room_cfg["secret"]).ack()
        t_ack = time.monotonic()
        t_res, _ = wait_for(
            lambda: {p[0] for p in world.pages(key, "resolved")} >= {"machine-room", "office"}, 30, "pages resolved"
        )
        print("kill -9 after the page: ACK -> pages resolved %.1f s" % (t_res - t_ack))
        starts = {}
        for term, started, _st, _l, _a in world.pages(key):
            starts.setdefault(term, set()).add(started)
        assert all(len(v) == 1 for v in starts.values()), starts  # paged once each, through the restart
    finally:
        for p in reversed(procs):
            stop(p)


def office_acks(url):
    """ACK requests office took (its own sentinel_accepted_total{kind="ack"}): a group ACK sent twice counts 2."""
    import re

    from deploy_live import get

    m = re.search(r'sentinel_accepted_total\{kind="ack"\} (\d+)', get(url + "/metrics")[1])
    return int(m.group(1)) if m else 0


def test_an_ha_pair_pages_once_and_sends_one_group_ack_per_press(world, tmp_path):
    key = "A13:gpu-worker-23:NCCL_TIMEOUT"
    procs = []
    try:
        room, room_url, room_cfg = start_emulator(
            tmp_path / "room", port=world.room_port, key_id="gpu_cluster_sentinel"
        )
        office, office_url, office_cfg = start_emulator(tmp_path / "office", port=world.office_port, key_id="office")
        procs += [room, office]
        gws = []
        for second in (False, True):
            tmp = tmp_path / ("gw2" if second else "gw1")
            tmp.mkdir()
            gw, url = example_gateway(world, tmp, (room_url, room_cfg), (office_url, office_cfg), second=second)
            procs.append(gw)
            gws.append(url)
        for url in gws:  # a probe sending to both gateways
            assert post(url + "/api/v1/gpu_event", p0("A13", "gpu-worker-23"), token=INGEST_TOKEN)[0] == 200
        wait_for(lambda: {p[0] for p in world.pages(key, "firing")} >= {"machine-room", "office"}, 30, "page")
        before = office_acks(office_url)
        AlarmClient(room_url, "gpu_cluster_sentinel", room_cfg["secret"]).ack()
        t_ack = time.monotonic()
        t_office, _ = wait_for(lambda: acked(office_url, key), 5, "office acknowledged")
        t_res, _ = wait_for(
            lambda: {p[0] for p in world.pages(key, "resolved")} >= {"machine-room", "office"}, 30, "pages resolved"
        )
        time.sleep(2.5)  # both gateways have read office's page since
        sent = office_acks(office_url) - before
        print(
            "HA pair: ACK -> office %.2f s, pages resolved %.1f s; group ACKs office took: %d"
            % (t_office - t_ack, t_res - t_ack, sent)
        )
        assert sent == 1
        starts = {}
        for term, started, _st, _l, _a in world.pages(key):
            starts.setdefault(term, set()).add(started)
        assert sorted(starts) == ["machine-room", "office"] and all(len(v) == 1 for v in starts.values()), starts
    finally:
        for p in reversed(procs):
            stop(p)
