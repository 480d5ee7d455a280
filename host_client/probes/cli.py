"""sentinel-probe: the GPU node probe daemon.

    sentinel-probe [-c probe.toml]              run the daemon (systemd: deploy/sentinel-probe.service)
    sentinel-probe --once [-c probe.toml]       run every check once, print a table, exit 1 on findings
    sentinel-probe --check-config -c probe.toml validate the configuration and its sources, and exit
    sentinel-probe [-c probe.toml] status       ask the running daemon (its /status endpoint)

Exit codes: 0 healthy, 1 findings (--once / status), 2 configuration or source error (status: a source the
daemon cannot read).
"""

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from host_client.logs import FORMATS, error_words, log_event
from host_client.logs import setup as setup_log
from host_client.transport import describe, listen_error

from . import config as config_mod
from . import events, follow, gpu_source
from .daemon import Daemon

DEFAULT_CONFIG = "/etc/sentinel/probe.toml"


def _load_config(args):
    path = args.config or os.environ.get("SENTINEL_PROBE_CONFIG")
    if path:
        cfg = config_mod.load(path)
    elif os.path.exists(DEFAULT_CONFIG):
        cfg = config_mod.load(DEFAULT_CONFIG)
    else:
        cfg = config_mod.build({})
    # command-line overrides, validated through the same path as the file
    over = {}
    for key, attr in (("gateway", "gateway"), ("rack", "rack"), ("host", "host")):
        v = getattr(args, attr, None)
        if v:
            over.setdefault("node", {})[key] = v
    if getattr(args, "replay", None):
        over["gpu"] = {"source": "replay", "replay": args.replay}
    if over:
        raw = {s: dict(v) for s, v in cfg.items()}
        for s, v in over.items():
            raw[s].update(v)
        cfg = config_mod.build(raw)
    return cfg


def _parser():
    p = argparse.ArgumentParser(
        prog="sentinel-probe",
        description="GPU node probe for GPU Sentinel",
        epilog="exit codes: 0 healthy, 1 findings (--once, status), 2 configuration or source error",
    )
    p.add_argument(
        "command",
        nargs="?",
        choices=["status"],
        help="status: ask the running daemon (its [status] listen address, or --url) what it sees and which of its "
        "sources it cannot read",
    )
    p.add_argument("--url", help="status: the daemon's status address, default from [status] listen")
    p.add_argument(
        "-c", "--config", help="TOML file (default %s if present, or $SENTINEL_PROBE_CONFIG)" % DEFAULT_CONFIG
    )
    p.add_argument("--once", action="store_true", help="run every check once, print a table, exit 1 on findings")
    p.add_argument(
        "--check-config",
        action="store_true",
        help="validate the configuration and its sources, and exit (2 on an error or a source it cannot read)",
    )
    p.add_argument(
        "--warn-sources",
        action="store_true",
        help="--check-config: a source it cannot read is a warning, exit 0 (a unit's pre-start check: the daemon "
        "then starts and raises PROBE_SOURCE_DOWN until the source works)",
    )
    p.add_argument("--gateway", help="gateway URL (overrides [node] gateway)")
    p.add_argument("--rack", help="cluster rack (overrides [node] rack)")
    p.add_argument("--host", help="node host name (overrides [node] host)")
    p.add_argument("--replay", help="replay recorded NVML readings from this JSON file instead of a GPU")
    p.add_argument("--json", action="store_true", help="--once: one JSON line per row; status: the daemon's JSON")
    p.add_argument(
        "--log-format",
        choices=FORMATS,
        default="json",
        help="json: one JSON object per line on stderr, ISO-8601 UTC time (default); text: for humans",
    )
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    if args.command == "status":
        return status_main(args)
    setup_log("sentinel.probe", fmt=args.log_format, level="debug" if args.verbose else "info")
    try:
        cfg = _load_config(args)
        if not args.once:
            config_mod.ingest_token(cfg)  # a named token that cannot be read stops here, naming it, not later
            config_mod.check_files(cfg)
            if not cfg["node"]["gateway"]:
                raise config_mod.ConfigError("no gateway URL ([node] gateway or --gateway): the daemon needs one")
    except config_mod.ConfigError as e:
        print("sentinel-probe: configuration error: %s" % e, file=sys.stderr)
        return 2
    if args.check_config:
        tok = (
            "env " + cfg["sender"]["token_env"]
            if cfg["sender"]["token_env"]
            else "file " + cfg["sender"]["token_file"]
            if cfg["sender"]["token_file"]
            else "none"
        )
        problems = config_mod.source_problems(cfg)
        for line in problems:
            print(
                "sentinel-probe: source %s: %s" % ("warning" if args.warn_sources else "error", line), file=sys.stderr
            )
        if problems and not args.warn_sources:
            return 2
        print(
            "configuration OK: rack %s, host %s, gateway %s, gpu source %s, xid source %s, %d NCCL log(s), "
            "ingest token %s"
            % (
                cfg["node"]["rack"],
                cfg["node"]["host"],
                cfg["node"]["gateway"] or "(none)",
                cfg["gpu"]["source"],
                cfg["xid"]["source"],
                len(cfg["nccl"]["logs"]),
                tok,
            )
        )
        return 0
    if args.once:
        return run_once(cfg, as_json=args.json)
    return run_daemon(cfg)


def _open_gpu(cfg, *, required):
    g = cfg["gpu"]
    try:
        return gpu_source.open_source(g["source"], replay=g["replay"], smi_binary=g["nvidia_smi"]), None
    except gpu_source.SourceError as e:
        if required:
            raise
        return None, str(e)


def run_daemon(cfg):
    log = logging.getLogger("sentinel.probe")
    try:
        gpu, why = _open_gpu(cfg, required=cfg["gpu"]["source"] not in ("auto",))
    except gpu_source.SourceError as e:
        print("sentinel-probe: %s" % e, file=sys.stderr)
        return 2
    if gpu is None:
        log_event(log, "no_gpu_source", logging.WARNING, reason=why, effect="running the log and progress checks only")
    d = Daemon(cfg, gpu=gpu)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        d.start()
    except OSError as e:
        listen = cfg["status"]["listen"]
        if d.status_server is None and listen and getattr(e, "errno", None) is not None:
            host, port = listen.rsplit(":", 1)
            why = listen_error(host, int(port), e, "[status] listen")
        else:
            why = "cannot start: %s" % error_words(e)
        print("sentinel-probe: %s" % why, file=sys.stderr)
        d.close()
        return 2
    sender = d.sender
    assert sender is not None  # start() made one
    log_event(
        log,
        "probe_started",
        rack=d.identity.rack,
        host=d.identity.host,
        gpus=len(d.devices),
        gpu_source=getattr(gpu, "name", "none"),
        gateway=sender.url,
    )
    stop.wait()
    d.stop.set()  # no new findings while the last ones go out
    if sender.pending():
        log_event(log, "probe_stopping", queued=sender.pending(), effect="2 s to deliver them")
        if not sender.flush(2.0):
            log_event(
                log,
                "probe_stopped_undelivered",
                logging.WARNING,
                undelivered=sender.pending(),
                effect="standing conditions are re-detected at the next start",
            )
    d.close()
    return 0


def run_once(cfg: dict[str, dict[str, Any]], *, as_json=False, out=None):
    """The seed's script, grown up: every check once, a table, exit 1 when anything is wrong."""
    out = out or sys.stdout
    rows = []  # (check, gpu, status, detail)
    findings = []
    try:
        gpu, why = _open_gpu(cfg, required=cfg["gpu"]["source"] not in ("auto",))
    except gpu_source.SourceError as e:
        print("sentinel-probe: %s" % e, file=sys.stderr)
        return 2
    cfg = dict(cfg, status={"listen": ""}, progress=dict(cfg["progress"], enabled=False))
    d = Daemon(cfg, gpu=gpu)
    if gpu is None:
        rows.append(("gpu", "-", "SKIP", why))
    else:
        readings = []
        for i in range(d.checker.rules.confirm):
            if i:
                time.sleep(cfg["gpu"]["interval_s"])
            readings = gpu.sample()
            findings += _fresh(d, d.checker.check(readings, time.monotonic()))
        bad = {f.gpu_index for f in findings}
        devs = {dv["index"]: dv for dv in d.devices}
        for r in readings:
            dv = devs.get(r["index"], {})
            if r["index"] not in bad:
                state = _unconfirmed(r, dv, d.checker)
                detail = "%s Gen%s x%s (max Gen%s x%s) P%s %sC util %s%%" % (
                    dv.get("bus_id") or "",
                    r.get("gen"),
                    r.get("width"),
                    dv.get("max_gen"),
                    dv.get("max_width"),
                    r.get("pstate"),
                    r.get("temp"),
                    r.get("util"),
                )
                if state == "UNCONFIRMED":
                    detail += "; the link reads below its maximum under load in the last reading only: the daemon "
                    detail += "raises PCIE_DOWNGRADE after %d readings in a row" % d.checker.rules.confirm
                rows.append(("gpu", str(r["index"]), state, detail))
        health = getattr(gpu, "health", None)
        if health is not None and cfg["gpu_health"]["enabled"]:  # memory state now (a throttle needs a window)
            findings += d.health_checker.check(health(memory=True), time.monotonic())
        gpu.close()
    rows += _hardware_once(d, findings)
    # kernel log: the ring buffer since boot
    lines, src = _kernel_history(cfg)
    if lines is None:
        rows.append(("xid", "-", "SKIP", src))
    else:
        n = 0
        for line in lines:
            f = d.on_kernel_line(line, time.monotonic())
            if f is not None:
                findings.append(f)
                n += 1
        if not n:
            rows.append(("xid", "-", "OK", "no XID in %s (%d lines)" % (src, len(lines))))
    for path in cfg["nccl"]["logs"]:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                n = 0
                for line in fh:
                    f = d.on_nccl_line(line, path, time.monotonic())
                    if f is not None:
                        findings.append(f)
                        n += 1
            if not n:
                rows.append(("nccl", "-", "OK", "no watchdog timeout or job-killing failure in %s" % path))
        except OSError as e:
            rows.append(("nccl", "-", "SKIP", "%s: %s" % (path, e.strerror)))
    if as_json:  # every row, as the table has them; a finding's row carries the event the daemon would send
        for check, gpu_text, state, detail in rows:
            print(json.dumps({"check": check, "gpu": gpu_text, "status": state, "detail": detail}), file=out)
        for f in findings:
            ev = events.body(d.identity, f, d.checker.last_util.get(f.gpu_index))
            row = {"check": f.event_type, "gpu": str(f.gpu_index) if f.gpu_index >= 0 else "-", "status": "FAIL"}
            print(json.dumps(dict(row, detail=f.detail, event=ev), ensure_ascii=False), file=out)
    else:
        for f in findings:
            rows.append((f.event_type, str(f.gpu_index) if f.gpu_index >= 0 else "-", "FAIL", f.detail))
        _table(rows, out)
    return 1 if findings else 0


def _unconfirmed(r, dv, checker):
    """OK (also a reduced link on an idle GPU: power saving), or UNCONFIRMED when the last reading alone looks
    degraded under load (one sample is not a finding)."""
    rules = checker.rules
    gen, width = r.get("gen"), r.get("width")
    exp_gen = rules.expected_gen or dv.get("max_gen")
    exp_width = rules.expected_width or dv.get("max_width")
    low = (gen is not None and exp_gen and gen < exp_gen) or (width is not None and exp_width and width < exp_width)
    if not low:
        return "OK"
    g = checker._gpus.get(r["index"])
    load = checker.load(g, r) if g is not None else None
    if load is False:
        return "OK"
    if load is None and r.get("pstate") != 0 and not (width is not None and exp_width and width < exp_width):
        return "OK"
    return "UNCONFIRMED"


def _hardware_once(d, findings):
    """One read of the ports, modules and AER totals (issue 35): what one look can judge (a module against its own
    thresholds, a port below its configured rate); rows for the sources, findings appended."""
    rows = []
    if d._fabric_on():
        r = d.read_fabric()
        found = d.fabric_checker.check(
            r["ports"], time.monotonic(), stats=r["stats"], modules=r["modules"], sensors=r["sensors"]
        )
        findings += found
        up = sum(1 for p in r["ports"].values() if p["state"] == "ACTIVE")
        if not found:
            rows.append(
                ("fabric", "-", "OK", "%d ports, %d ACTIVE (%s)" % (len(r["ports"]), up, d.cfg["fabric"]["sysfs_root"]))
            )
        for why in list(r["errors"].values()) + list(d.commands.failures.values()):
            rows.append(("fabric", "-", "SKIP", why))
        for path, why in (r["hwmon_errors"] or {}).items():
            rows.append(("fabric", "-", "SKIP", "%s: %s" % (path, why)))
    return rows  # no row on a node without the source: --once's table stays what it was there


def _fresh(d, findings):
    raised, _ = d.conditions.update("gpu", findings)
    return raised


def _kernel_history(cfg):
    x = cfg["xid"]
    if x["source"] == "none":
        return None, "disabled"
    if x["source"] == "file":
        try:
            with open(x["path"], encoding="utf-8", errors="replace") as fh:
                return fh.readlines(), x["path"]
        except OSError as e:
            return None, "%s: %s" % (x["path"], e.strerror)
    if x["source"] in ("auto", "kmsg"):
        try:
            return follow.read_kmsg_history(x["path"] or "/dev/kmsg"), "/dev/kmsg"
        except OSError as e:
            if x["source"] == "kmsg":
                return None, "/dev/kmsg: %s" % e.strerror
    try:
        p = subprocess.run(
            ["journalctl", "-k", "-b", "-o", "cat", "--no-pager"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "journalctl: %s" % e
    if p.returncode != 0:
        return None, "journalctl exited %d" % p.returncode
    return p.stdout.splitlines(), "journalctl -k -b"


def _table(rows, out):
    head = ("CHECK", "GPU", "STATUS", "DETAIL")
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) if rows else len(head[i]) for i in range(3)]
    fmt = "%-*s  %-*s  %-*s  %s"
    print(fmt % (widths[0], head[0], widths[1], head[1], widths[2], head[2], head[3]), file=out)
    for r in rows:
        print(fmt % (widths[0], r[0], widths[1], r[1], widths[2], r[2], r[3]), file=out)


def status_main(args):
    url = args.url
    if not url:
        try:
            cfg = _load_config(args)
        except config_mod.ConfigError as e:
            print("sentinel-probe: configuration error: %s" % e, file=sys.stderr)
            return 2
        if not cfg["status"]["listen"]:
            print("sentinel-probe: [status] listen is empty: the daemon serves no status", file=sys.stderr)
            return 2
        url = "http://%s/status" % cfg["status"]["listen"]
    elif "/status" not in url:
        url = url.rstrip("/") + "/status"
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            s = json.loads(r.read().decode())
    except (urllib.error.URLError, OSError, ValueError) as e:
        why = e.reason if isinstance(e, urllib.error.URLError) and isinstance(e.reason, OSError) else e
        why = describe(why) if isinstance(why, OSError) else why
        print("sentinel-probe: daemon not reachable at %s: %s: is it running?" % (url, why), file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(s, indent=1))
    else:
        print(
            "rack %s host %s up %ss, %d GPU(s) via %s, %d samples"
            % (s["rack"], s["host"], s["uptime_s"], s["gpus"], s["gpu_source"], s["samples"])
        )
        snd = s["sender"]
        print(
            "gateway %s: sent %d, pending %d, dropped %d%s"
            % (
                snd["url"],
                snd["sent"],
                snd["pending"],
                snd["dropped"],
                ", last error: %s" % snd["last_error"] if snd["last_error"] and snd["pending"] else "",
            )
        )
        for j in s["jobs"]:
            print(
                "job %s rank %s pid %s: %d steps, step time %s s, last %ss ago%s"
                % (
                    j["job"],
                    j["rank"],
                    j["pid"],
                    j["steps"],
                    j["step_time_s"],
                    j["since_last_s"],
                    (" DIED WHILE STALLED" if j.get("dead") else " STALLED") if j["stalled"] else "",
                )
            )
        for h in s.get("sources", []):
            if h["state"] == "down":
                print("source %s %s: DOWN: %s" % (h["kind"], h["name"], h["error"]))
        rows = [(a["event_type"], str(a["gpu_index"]), "ACTIVE", a["detail"] or "") for a in s["active"]]
        if rows:
            _table(rows, sys.stdout)
        else:
            print("no active conditions")
    if any(h["state"] == "down" for h in s.get("sources", [])):
        return 2  # the probe is blind to something: worse than a finding it can see
    return 1 if s["active"] else 0


if __name__ == "__main__":
    sys.exit(main())
