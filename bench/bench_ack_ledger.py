"""The acknowledgement loop, one gateway and an HA pair: from a P0's deadline to the pager, and from the ACK press to
the pages resolved, with real Prometheus and Alertmanager (deploy/, 1 s scrape, evaluation and group timers).

    .venv/bin/python bench/bench_ack_ledger.py [--trials N]

examples/gateway.toml (addresses changed, escalate_after_s 5), two real emulators (machine-room and office, one ACK
group), the pager a webhook sink (tests/ack_world.py). Each trial sends a P0 for a new node (to both gateways of
the pair: a probe sending to both); the deadline is 5 s after the gateway took it; nobody presses until the pager
has it for both terminals; then ACK on machine-room, and the clock stops when both pages are resolved. For the pair
it also counts the ACKs office took per press (1: the pair sent the group ACK once).
"""

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "firmware", "lib")]

from ack_world import World, example_gateway  # noqa: E402
from deploy_live import INGEST_TOKEN, emulator_status, get, post, start_emulator, stop  # noqa: E402

from host_client import AlarmClient  # noqa: E402

ESCALATE_S = 5
P0_TYPES = ("XID_FATAL", "NCCL_TIMEOUT", "GPU_LOST", "PROGRESS_STALL")


def acks_taken(url):
    m = re.search(r'sentinel_accepted_total\{kind="ack"\} (\d+)', get(url + "/metrics")[1])
    return int(m.group(1)) if m else 0


def wait(pred, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return time.monotonic()
        time.sleep(0.05)
    return None


def run(world, tmp, pair, trials):
    procs = []
    out = {"deadline_to_page": [], "press_to_resolved": [], "office_acks": []}
    try:
        room, room_url, room_cfg = start_emulator(
            os.path.join(tmp, "room"), port=world.room_port, key_id="gpu_cluster_sentinel"
        )
        office, office_url, office_cfg = start_emulator(
            os.path.join(tmp, "office"), port=world.office_port, key_id="office"
        )
        procs += [room, office]
        urls = []
        for second in (False, True) if pair else (False,):
            d = os.path.join(tmp, "gw2" if second else "gw1")
            os.makedirs(d)
            gw, url = example_gateway(world, d, (room_url, room_cfg), (office_url, office_cfg), second=second)
            procs.append(gw)
            urls.append(url)
        for i in range(trials):
            node = "bench-%s-%d" % ("pair" if pair else "one", i)
            kind = P0_TYPES[i % len(P0_TYPES)]
            ev = {"cluster_rack": "A%02d" % (30 + i), "node_host": node, "event_type": kind, "gpu_index": 0}
            t_taken = time.monotonic()
            for url in urls:
                _status, body = post(url + "/api/v1/gpu_event", json.dumps(ev), token=INGEST_TOKEN)
            key = json.loads(body)["key"]  # the incident key the gateway gave it (with the GPU)
            t_page = wait(lambda key=key: {p[0] for p in world.pages(key, "firing")} >= {"machine-room", "office"}, 60)
            if t_page is None:
                print("  trial %d: no page within 60 s" % i)
                continue
            out["deadline_to_page"].append(t_page - t_taken - ESCALATE_S)
            before = acks_taken(office_url)
            AlarmClient(room_url, "gpu_cluster_sentinel", room_cfg["secret"]).ack()
            t_press = time.monotonic()
            t_res = wait(lambda key=key: {p[0] for p in world.pages(key, "resolved")} >= {"machine-room", "office"}, 60)
            if t_res is None or key not in emulator_status(office_url)["mute"]["acknowledged"]:
                print("  trial %d: not resolved within 60 s" % i)
                continue
            out["press_to_resolved"].append(t_res - t_press)
            time.sleep(2.5)  # every gateway has read office's page since
            out["office_acks"].append(acks_taken(office_url) - before)
            print(
                "  trial %d/%d: deadline -> page %.1f s, press -> resolved %.1f s, ACKs office took %d"
                % (
                    i + 1,
                    trials,
                    out["deadline_to_page"][-1],
                    out["press_to_resolved"][-1],
                    out["office_acks"][-1],
                )
            )
    finally:
        for p in reversed(procs):
            stop(p)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=3, help="at most 4 (one P0 type each)")
    args = ap.parse_args(argv)
    trials = max(1, min(args.trials, len(P0_TYPES)))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "watchers"))
        world = World(os.path.join(tmp, "watchers"))
        try:
            for pair in (False, True):
                name = "HA pair" if pair else "one gateway"
                print("%s: %d trials" % (name, trials))
                d = os.path.join(tmp, name.replace(" ", "-"))
                os.makedirs(d)
                rows.append((name, run(world, d, pair, trials)))
        finally:
            world.close()
    print()
    print("%-12s %-22s %6s %6s %6s" % ("setup", "figure", "min", "median", "max"))
    for name, out in rows:
        for fig, unit in (("deadline_to_page", "s"), ("press_to_resolved", "s"), ("office_acks", "")):
            v = out[fig]
            if v:
                fmt = "%-12s %-22s %6.1f %6.1f %6.1f" if unit else "%-12s %-22s %6d %6d %6d"
                print(
                    fmt
                    % (
                        name,
                        fig.replace("_", " ") + (" (s)" if unit else " /press"),
                        min(v),
                        statistics.median(v),
                        max(v),
                    )
                )
            else:
                print("%-12s %-22s %6s" % (name, fig, "none"))


if __name__ == "__main__":
    main()
