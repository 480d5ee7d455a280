"""Nobody in the room (issue 25), with real servers and the shipped configuration: examples/gateway.toml (machine-room
and office, one ack_group) with its addresses changed and escalate_after_s set to 5 s, two real emulators,
deploy/prometheus (rules as shipped, 1 s scrape and evaluation) and deploy/alertmanager (routes and receivers as
shipped, 1 s group timers; the pager a webhook sink).

A P0 reaches both terminals and nobody acknowledges it: 5 s later SentinelP0NotAcknowledged reaches the pager
with the incident's rack, node, type and terminal. ACK is pressed on machine-room: within 2 s office has the same
incident acknowledged (its own signed ACK from the gateway), the escalations resolve at the pager, and /metrics
holds the time to acknowledge. A new P0 still speaks on both terminals."""

import json
import os
import re
import time

import pytest
from deploy_live import (
    ALERTMANAGER,
    INGEST_TOKEN,
    PROMETHEUS,
    Sink,
    emulator_status,
    get,
    post,
    start_emulator,
    start_example_gateway,
    start_watchers,
    stop,
    wait_status,
)

from host_client import AlarmClient

for _b in (PROMETHEUS, ALERTMANAGER):
    if not os.path.exists(_b):
        pytest.skip("%s is not installed (tools/install-system-deps.sh installs it)" % _b, allow_module_level=True)

KEY = "A03:gpu-worker-08:NCCL_TIMEOUT"


def escalations(pager, status):
    return [
        a
        for b in pager.bodies
        for a in b["alerts"]
        if a["labels"].get("alertname") == "SentinelP0NotAcknowledged" and a["status"] == status
    ]


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return time.monotonic(), v
        time.sleep(0.05)
    raise AssertionError("not within %.0f s: %s" % (timeout, what))


def acked(url, key):
    st = emulator_status(url)
    return key in st["mute"]["acknowledged"] and st


def test_an_unacknowledged_p0_escalates_and_an_ack_on_one_terminal_closes_it_everywhere(tmp_path):
    pager, deadman = Sink(), Sink()
    procs = []
    try:
        wav = {"room": tmp_path / "room-wav", "office": tmp_path / "office-wav"}
        room, room_url, room_cfg = start_emulator(
            tmp_path / "room", key_id="gpu_cluster_sentinel", wav_dir=str(wav["room"])
        )
        procs.append(room)
        office, office_url, office_cfg = start_emulator(
            tmp_path / "office", key_id="office", wav_dir=str(wav["office"])
        )
        procs.append(office)
        gw, gw_url = start_example_gateway(
            tmp_path,
            room=(room_url, room_cfg),
            office=(office_url, office_cfg),
            also=[("escalate_after_s = 300 ", "escalate_after_s = 5 ")],
        )
        procs.append(gw)
        watchers = start_watchers(
            tmp_path,
            gateway_url=gw_url,
            fallback_url=gw_url,
            deadman_url=deadman.url,
            pager_url=pager.url,
            terminals={"machine-room": room_url, "office": office_url},
        )
        procs += [p for p, _u in watchers]

        # a P0 for rack A03: the example's route sends it to both terminals
        ev = {"cluster_rack": "A03", "node_host": "gpu-worker-08", "event_type": "NCCL_TIMEOUT"}
        assert post(gw_url + "/api/v1/gpu_event", json.dumps(ev), token=INGEST_TOKEN)[0] == 200
        for url in (room_url, office_url):
            wait_status(url, lambda s: any(a["key"] == KEY and a["level"] == "P0" for a in s["active"]), 10)
        t_shown = time.monotonic()

        # nobody acknowledges: the escalation reaches the pager with the incident's labels
        t_esc, found = wait_for(lambda: escalations(pager, "firing"), 60, "escalation at the pager")
        print(
            "P0 shown -> escalation at the pager: %.1f s (escalate_after_s 5; scrape, evaluation, group_wait 1 s)"
            % (t_esc - t_shown)
        )
        by_terminal = {a["labels"]["terminal"]: a["labels"] for a in found}
        lab = by_terminal.get("machine-room") or next(iter(by_terminal.values()))
        assert (lab["rack"], lab["node_host"], lab["event_type"], lab["incident"]) == (
            "A03",
            "gpu-worker-08",
            "NCCL_TIMEOUT",
            KEY,
        )
        assert lab["severity"] == "critical" and lab["sentinel_route"] == "escalation"
        # never to a terminal: the terminals show only the P0 itself
        for url in (room_url, office_url):
            assert [a["key"] for a in emulator_status(url)["active"] if a["level"] == "P0"] == [KEY]

        # ACK on machine-room, as its button does; office hears of it through the gateway
        AlarmClient(room_url, "gpu_cluster_sentinel", room_cfg["secret"]).ack()
        t_ack = time.monotonic()
        assert acked(room_url, KEY)
        t_office, st = wait_for(lambda: acked(office_url, KEY), 5, "office acknowledged")
        print("ACK on machine-room -> office acknowledged: %.2f s" % (t_office - t_ack))
        assert t_office - t_ack <= 2.0
        assert [a for a in st["active"] if a["key"] == KEY][0]["acknowledged"]
        assert st["speech"]["speaking"] is None or st["speech"]["speaking"].get("key") != KEY

        # the escalation resolves at the pager
        t_res, _ = wait_for(lambda: escalations(pager, "resolved"), 30, "escalation resolved at the pager")
        print("ACK -> escalation resolved at the pager: %.1f s" % (t_res - t_ack))

        # time to acknowledge and what is open, in /metrics
        m = get(gw_url + "/metrics")[1]
        assert re.search(r'sentinel_gateway_ack_seconds_count\{terminal="machine-room",level="P0"\} 1\b', m), m
        assert re.search(r'sentinel_gateway_acks_total\{terminal="office",via="group"\} 1\b', m), m
        assert re.search(r'sentinel_gateway_p0_unacknowledged\{terminal="machine-room"\} 0\b', m), m
        assert "sentinel_gateway_p0_escalation{" not in m
        after = float(re.search(r'sentinel_gateway_ack_seconds_sum\{terminal="machine-room",level="P0"\} (\S+)', m)[1])
        assert 5.0 <= after <= (t_ack - t_shown) + 3.0

        # a new P0 (another rack, so not folded into a summary) still speaks on both terminals: a new WAV each
        before = {name: set(d.glob("*.wav")) for name, d in wav.items()}
        ev2 = {"cluster_rack": "A04", "node_host": "gpu-worker-09", "event_type": "NCCL_TIMEOUT"}
        assert post(gw_url + "/api/v1/gpu_event", json.dumps(ev2), token=INGEST_TOKEN)[0] == 200
        for name, d in wav.items():
            wait_for(
                lambda d=d, name=name: [p for p in set(d.glob("*.wav")) - before[name] if p.stat().st_size > 1000],
                20,
                "the new P0 spoken on %s" % name,
            )
    finally:
        for p in reversed(procs):
            stop(p)
        pager.close()
        deadman.close()
