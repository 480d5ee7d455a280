"""From an unacknowledged P0's deadline to the pager: the escalation path, with the shipped intervals and tuned ones.

    .venv/bin/python bench/bench_escalation.py [--trials N]

examples/gateway.toml (addresses changed, escalate_after_s 5), two real emulators (headless, no voice),
Debian's prometheus with deploy/prometheus (its rules) and the real Alertmanager with deploy/alertmanager (its
escalation route to the pager, here a webhook sink). Each trial sends a P0 for a new node; the clock starts at its
deadline (5 s after the first terminal shows it) and stops when SentinelP0NotAcknowledged for it reaches the pager.
Two settings:
  shipped  scrape_interval / evaluation_interval 15 s (deploy/prometheus/prometheus.yml), group_wait 0 s (the
           escalation route's own, deploy/alertmanager/alertmanager.yml)
  tuned    1 s / 1 s
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "firmware", "lib")]

from deploy_live import (  # noqa: E402
    INGEST_TOKEN,
    Sink,
    alertmanager_config,
    emulator_status,
    post,
    prometheus_config,
    start_alertmanager,
    start_emulator,
    start_example_gateway,
    start_prometheus,
    stop,
)

ESCALATE_S = 5
P0_TYPES = ("XID_FATAL", "NCCL_TIMEOUT", "GPU_LOST", "PROGRESS_STALL")


def run(setting, scrape_s, trials):
    pager, deadman = Sink(), Sink()
    procs = []
    delays = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            room, room_url, room_cfg = start_emulator(os.path.join(tmp, "room"), key_id="gpu_cluster_sentinel")
            procs.append(room)
            office, office_url, office_cfg = start_emulator(os.path.join(tmp, "office"), key_id="office")
            procs.append(office)
            gw, gw_url = start_example_gateway(
                tmp,
                room=(room_url, room_cfg),
                office=(office_url, office_cfg),
                also=[("escalate_after_s = 300 ", "escalate_after_s = %d " % ESCALATE_S)],
            )
            procs.append(gw)
            am, am_url = start_alertmanager(
                tmp, alertmanager_config(tmp, gw_url, gw_url, deadman.url, pager_url=pager.url)
            )
            procs.append(am)
            prom, _prom_url = start_prometheus(
                tmp,
                prometheus_config(
                    tmp,
                    scrape_s=scrape_s,
                    eval_s=scrape_s,
                    am_address=am_url.split("//")[1],
                    gateway_addresses=[gw_url.split("//")[1]],
                    dcgm_addresses=[],
                    terminal_addresses={"machine-room": room_url.split("//")[1], "office": office_url.split("//")[1]},
                ),
            )
            procs.append(prom)
            for i in range(trials):
                node = "bench-%s-%d" % (setting, i)
                # a P0 type per trial: three racks with one fault within a minute would be one cluster-wide summary
                ev = {"cluster_rack": "A%02d" % i, "node_host": node, "event_type": P0_TYPES[i % 4], "gpu_index": 0}
                post(gw_url + "/api/v1/gpu_event", json.dumps(ev), token=INGEST_TOKEN)
                end = time.monotonic() + 30
                while time.monotonic() < end:
                    if any(node in a["key"] for a in emulator_status(room_url)["active"]):
                        break
                    time.sleep(0.05)
                else:
                    print("  %s trial %d: the P0 was not shown within 30 s" % (setting, i))
                    continue
                deadline = time.monotonic() + ESCALATE_S
                end = deadline + 120
                while time.monotonic() < end:
                    if any(
                        a["labels"].get("alertname") == "SentinelP0NotAcknowledged"
                        and a["labels"].get("node_host") == node
                        for b in pager.bodies
                        for a in b["alerts"]
                    ):
                        delays.append(time.monotonic() - deadline)
                        break
                    time.sleep(0.05)
                else:
                    print("  %s trial %d: no escalation within 120 s of the deadline" % (setting, i))
                print("  %s trial %d/%d: %.1f s" % (setting, i + 1, trials, delays[-1] if delays else float("nan")))
        finally:
            for p in reversed(procs):
                stop(p)
            pager.close()
            deadman.close()
    return delays


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=3, help="at most 4 (one P0 type each)")
    args = ap.parse_args(argv)
    args.trials = max(1, min(args.trials, len(P0_TYPES)))
    rows = []
    for setting, scrape_s in (("tuned", 1), ("shipped", 15)):
        print("%s: scrape and evaluation every %d s, %d trials" % (setting, scrape_s, args.trials))
        d = run(setting, scrape_s, args.trials)
        rows.append((setting, d))
    print()
    print("%-8s %8s %8s %8s  (seconds from the deadline to the pager)" % ("setting", "min", "median", "max"))
    for setting, d in rows:
        if d:
            print("%-8s %8.1f %8.1f %8.1f" % (setting, min(d), statistics.median(d), max(d)))
        else:
            print("%-8s %8s" % (setting, "none"))


if __name__ == "__main__":
    main()
