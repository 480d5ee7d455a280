"""Metric change to light through Prometheus, next to the probe's direct path.

    .venv/bin/python bench/bench_prometheus.py [--quick]

Prometheus path: a dcgm-exporter-format page served here (tests/fixtures/deploy/), Debian's prometheus with the
shipped deploy/prometheus config and rules, the real Alertmanager with the shipped deploy/alertmanager routes,
the real sentinel-gateway and the real emulator CLI (headless, no voice). Clock starts when the page's XID gauge
for a GPU changes to a fatal XID; it stops when the emulator's accepted-P0 counter (its /metrics) goes up.
Two settings:
  shipped  scrape_interval / evaluation_interval 15 s (deploy/prometheus/prometheus.yml), group_wait 5 s
           (deploy/alertmanager/alertmanager.yml), Prometheus's own defaults otherwise
  tuned    1 s / 1 s, group_wait 0 s
Neither includes dcgm-exporter's own collection interval (its -c flag, 30 s by default) between the GPU and its
page: on a real node add up to that much (or run it with -c 1000).

Probe path: the real sentinel-probe following a kernel log, the same gateway and emulator; the clock starts when
the XID line is written, one new GPU incident per trial. (bench/bench_probes.py measures the probe alone, to a
sink.)

The gateway runs with grouping off and a 0 s debounce so each trial's incident is news (both add no wait to a
first alarm; they only decide what follows it). Trials start at a random phase of the scrape cycle.
"""

import os
import random
import re
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "firmware", "lib")]

from deploy_live import (  # noqa: E402
    ALERTMANAGER,
    PROMETHEUS,
    DcgmExporter,
    Sink,
    alertmanager_config,
    get,
    prometheus_config,
    start_alertmanager,
    start_emulator,
    start_gateway,
    start_probe,
    start_prometheus,
    stop,
)

GATEWAY_EXTRA = "[grouping]\nenabled = false\n\n[debounce]\nwindow_s = 0\n"
FATAL = (79, 48, 62, 64, 74, 95, 119, 120)  # fatal to the probe and to the dcgm rules alike


def p0_count(emu_url):
    text = get(emu_url + "/metrics")[1]
    m = re.search(r'^sentinel_alarms_total\{level="P0"\} (\d+)', text, re.M)
    return int(m.group(1))


def wait_p0(emu_url, before, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if p0_count(emu_url) > before:
            return time.monotonic()
        time.sleep(0.02)
    return None


def stats(xs):
    return "mean %6.2f s  min %6.2f s  max %6.2f s  (n=%d)" % (statistics.mean(xs), min(xs), max(xs), len(xs))


def room(tmp, procs):
    """The emulator (its CLI, no voice) and a gateway delivering to it; their processes go into procs."""
    emu, emu_url, emu_cfg = start_emulator(os.path.join(tmp, "emu"))
    procs.append(emu)
    gw, gw_url = start_gateway(tmp, emu_url, emu_cfg["key_id"], emu_cfg["secret"], extra_toml=GATEWAY_EXTRA)
    procs.append(gw)
    return emu_url, gw_url


def prometheus_path(scrape_s, eval_s, group_wait, trials, timeout):
    tmp = tempfile.mkdtemp(prefix="bench-prom-")
    dcgm, deadman = DcgmExporter(), Sink()
    procs = []
    try:
        emu_url, gw_url = room(tmp, procs)
        am, am_url = start_alertmanager(
            tmp, alertmanager_config(tmp, gw_url, gw_url, deadman.url, group_wait=group_wait)
        )
        procs.append(am)
        prom, prom_url = start_prometheus(
            tmp,
            prometheus_config(
                tmp,
                scrape_s=scrape_s,
                eval_s=eval_s,
                am_address=am_url.split("//")[1],
                gateway_addresses=[gw_url.split("//")[1]],
                dcgm_addresses=[dcgm.address],
                terminal_addresses=[emu_url.split("//")[1]],
            ),
        )
        procs.append(prom)
        # every target scraped at least twice, so the rules see the XID gauge at 0 before it changes
        end = time.monotonic() + 4 * scrape_s + 30
        while dcgm.scrapes < 2 and time.monotonic() < end:
            time.sleep(0.1)
        time.sleep(eval_s)
        out = []
        for i in range(trials):
            time.sleep(random.uniform(0, scrape_s))
            before = p0_count(emu_url)
            dcgm.set("DCGM_FI_DEV_XID_ERRORS", i % 8, FATAL[i % len(FATAL)], "bench")
            t0 = time.monotonic()
            t1 = wait_p0(emu_url, before, timeout)
            if t1 is None:
                print("  trial %d: no P0 within %.0f s" % (i, timeout), flush=True)
                continue
            out.append(t1 - t0)
            print("  trial %d: %.2f s" % (i, t1 - t0), flush=True)
        return out
    finally:
        for p in reversed(procs):
            stop(p)
        dcgm.close()
        deadman.close()


def probe_path(trials):
    """XID lines for the replayed node's four GPUs (bus ids from tests/fixtures/probes/nvml_replay.json), a new
    node name every four trials: each trial is a new incident (the gateway derives the alarm id from the incident,
    so a second XID on the same GPU would be the same alarm, answered as a duplicate)."""
    buses = ("18", "2a", "3a", "5d")
    tmp = tempfile.mkdtemp(prefix="bench-probe-")
    procs = []
    probe = None
    try:
        emu_url, gw_url = room(tmp, procs)
        out = []
        for i in range(trials):
            if i % len(buses) == 0:
                stop(probe)
                node = os.path.join(tmp, "node%d" % (i // len(buses)))
                os.makedirs(node)
                probe, _purl = start_probe(node, gw_url, xid_hold_s=0, host="gpu-worker-%02d" % (i // len(buses)))
                kern = os.path.join(node, "kern.log")
                time.sleep(1.0)
            time.sleep(random.uniform(0.2, 1.0))
            before = p0_count(emu_url)
            line = "[ %d.0] NVRM: Xid (PCI:0000:%s:00): %d, pid=1, name=python3, bench\n" % (
                100 + i,
                buses[i % len(buses)],
                FATAL[i % len(FATAL)],
            )
            with open(kern, "a") as f:
                f.write(line)
            t0 = time.monotonic()
            t1 = wait_p0(emu_url, before, 10)
            if t1 is None:
                print("  trial %d: no P0 within 10 s" % i, flush=True)
                continue
            out.append(t1 - t0)
        return out
    finally:
        stop(probe)
        for p in reversed(procs):
            stop(p)


def main(argv):
    for b in (PROMETHEUS, ALERTMANAGER):
        if not os.path.exists(b):
            print("%s is not installed (tools/install-system-deps.sh)" % b)
            return 1
    quick = "--quick" in argv
    print(__doc__.split("\n\n")[0])
    print("\nprobe path (sentinel-probe -> gateway -> emulator), XID line written -> P0 on the emulator")
    probe = probe_path(5 if quick else 10)
    print("\ntuned Prometheus path (scrape 1 s, evaluation 1 s, group_wait 0 s)")
    tuned = prometheus_path(1, 1, "0s", 4 if quick else 8, 60)
    print("\nshipped Prometheus path (scrape 15 s, evaluation 15 s, group_wait 5 s)")
    shipped = prometheus_path(15, 15, None, 2 if quick else 5, 120)
    print("\n%-58s %s" % ("metric change -> light on the emulator", ""))
    print("%-58s %s" % ("probe: XID line in the kernel log", stats(probe)))
    print("%-58s %s" % ("Prometheus, tuned (1 s / 1 s / group_wait 0 s)", stats(tuned)))
    print("%-58s %s" % ("Prometheus, shipped (15 s / 15 s / group_wait 5 s)", stats(shipped)))
    print("(+ dcgm-exporter's collection interval, 30 s by default, before the page changes on a real node)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
