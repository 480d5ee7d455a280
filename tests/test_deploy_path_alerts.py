"""Alerts about the alarm path never ride the path they are about (issue 25), with real servers and the shipped
configuration: examples/gateway.toml (its two terminals, machine-room and office, each the other's fallback) with
only addresses, ports and the state directory changed, two real emulators standing for the two terminals,
deploy/prometheus (scrape config and rules as shipped, short intervals) and deploy/alertmanager (routes and
receivers as shipped; one gateway, so the second gateway's receiver answers nothing; the pager a webhook sink).

Terminal machine-room dies. SentinelTerminalScrapeDown fires for it (its shipped `for: 2m`); Alertmanager sends
it to the pager and, as an alert about a terminal, to the gateway too, which delivers it to office, never to
machine-room itself (nothing about machine-room waits in machine-room's queue)."""

import os
import re
import time

import pytest
from deploy_live import (
    ALERTMANAGER,
    PROMETHEUS,
    Sink,
    free_port,
    get,
    start_emulator,
    start_example_gateway,
    start_watchers,
    stop,
    wait_status,
)

for _b in (PROMETHEUS, ALERTMANAGER):
    if not os.path.exists(_b):
        pytest.skip("%s is not installed (tools/install-system-deps.sh installs it)" % _b, allow_module_level=True)


def pager_alerts(sink, alertname):
    return [a for b in sink.bodies for a in b["alerts"] if a["labels"].get("alertname") == alertname]


def test_a_dead_terminal_is_told_to_the_other_terminal_and_the_pager_never_to_itself(tmp_path):
    pager, deadman = Sink(), Sink()
    procs = []
    try:
        room, room_url, room_cfg = start_emulator(tmp_path / "room", key_id="gpu_cluster_sentinel")
        procs.append(room)
        office, office_url, office_cfg = start_emulator(tmp_path / "office", key_id="office")
        procs.append(office)
        gw, gw_url = start_example_gateway(tmp_path, room=(room_url, room_cfg), office=(office_url, office_cfg))
        procs.append(gw)
        # one gateway: the second gateway's receiver points at a port nothing answers on
        no_second = "http://127.0.0.1:%d" % free_port()
        watchers = start_watchers(
            tmp_path,
            gateway_url=gw_url,
            fallback_url=no_second,
            deadman_url=deadman.url,
            pager_url=pager.url,
            terminals={"machine-room": room_url, "office": office_url},
        )
        procs += [p for p, _u in watchers]

        stop(room)  # the machine room's terminal dies
        t0 = time.monotonic()
        # office hears it (the gateway routed the alert about machine-room to machine-room's fallback) ...
        about = "Terminal machine-room"
        t1, st = wait_status(
            office_url, lambda s: any(a["text"].startswith(about) and a["level"] == "P0" for a in s["active"]), 200
        )
        print("machine-room dead -> P0 on office: %.1f s (the rule's for: 2m, scrape and evaluation 1 s)" % (t1 - t0))
        # ... and so does the pager, a receiver that is no terminal
        end = time.monotonic() + 30
        while time.monotonic() < end and not pager_alerts(pager, "SentinelTerminalScrapeDown"):
            time.sleep(0.2)
        (a, *_) = pager_alerts(pager, "SentinelTerminalScrapeDown")
        assert a["labels"]["terminal"] == "machine-room" and a["status"] == "firing"
        # nothing about machine-room was handed to machine-room (other alerts, e.g. the absent probes', may wait
        # there: they are about the racks it watches)
        # (the queue's file is written once something is queued for it)
        path = os.path.join(str(tmp_path), "gw-state", "pending-machine-room.json")
        queued = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        assert "SentinelTerminal" not in queued and about not in queued, queued
        metrics = get(gw_url + "/metrics")[1]
        assert re.search(r'sentinel_gateway_alarms_total\{terminal="office",outcome="delivered"\} [1-9]', metrics), (
            metrics
        )
    finally:
        for p in reversed(procs):
            stop(p)
        pager.close()
        deadman.close()
