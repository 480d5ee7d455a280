"""sentinel-remedy: isolate a faulty node in Slurm and bring its jobs back from their checkpoint (docs/REMEDY.md).

    sentinel-remedy --config remedy.toml                 run the daemon (deploy/sentinel-remedy.service)
    sentinel-remedy --config remedy.toml --check-config  validate the configuration and exit
    sentinel-remedy --config remedy.toml resume NODE     resume a node sentinel-remedy drained
    sentinel-remedy --config remedy.toml reset-breaker   close the latched blast-radius breaker

Exit codes: 0 done, 1 the action was refused or failed, 2 configuration or start-up error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import uuid

from host_client.errors import ConfigError, SentinelError
from host_client.logs import FORMATS, setup
from host_client.transport import HTTPTransport, describe, listen_error

from .announce import Announcer
from .config import load_config
from .slurm import SlurmBackend
from .worker import Remedy, log

DEFAULT_CONFIG = "/etc/sentinel/remedy.toml"
PROG = "sentinel-remedy"


def _parser():
    p = argparse.ArgumentParser(prog=PROG, description="Acts on GPU Sentinel's P0 incidents in Slurm")
    p.add_argument("-c", "--config", help="TOML file (default %s, or $SENTINEL_REMEDY_CONFIG)" % DEFAULT_CONFIG)
    p.add_argument("--check-config", action="store_true", help="validate the configuration and exit")
    p.add_argument("--log-format", default="json", choices=FORMATS, help="stderr log: json lines (default) or text")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    sub = p.add_subparsers(dest="command")
    r = sub.add_parser("resume", help="resume a node this daemon drained (its reason starts with sentinel:)")
    r.add_argument("node")
    sub.add_parser("reset-breaker", help="close the latched blast-radius breaker")
    return p


def build(cfg):
    env = dict(os.environ)
    if cfg.slurm_conf:
        env["SLURM_CONF"] = cfg.slurm_conf
    backend = SlurmBackend(
        scontrol=cfg.scontrol, scancel=cfg.scancel, squeue=cfg.squeue, timeout_s=cfg.slurm_timeout_s, env=env
    )
    announcer = Announcer(url=cfg.announce_url, token=cfg.announce_token, timeout_s=cfg.announce_timeout_s, log=log)
    return Remedy(cfg, backend, announcer)


def _operator(cfg, path, body):
    """Ask the running daemon (signed, like the gateway's feed); when none answers, act here on the state file."""
    from host_client.client import AlarmClient

    client = AlarmClient("http://%s:%d" % (_connect_host(cfg.host), cfg.port), cfg.key_id, cfg.secret, timeout=30)
    req = client.sign(path, dict(body, id=uuid.uuid4().hex[:16]))
    try:
        r = HTTPTransport().post(req.url, req.headers, req.body, 60)
    except SentinelError:
        return None
    try:
        a = json.loads(r.body.decode("utf-8"))
    except ValueError:
        a = {}
    if r.status != 200:
        return False, "the daemon refused: %s" % a.get("message", "HTTP %d" % r.status)
    return bool(a.get("ok")), str(a.get("message", ""))


def _connect_host(host):
    return "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host == "::" else host


def main(argv=None):
    args = _parser().parse_args(argv)
    setup("sentinel.remedy", fmt=args.log_format, level=args.log_level)
    path = args.config or os.environ.get("SENTINEL_REMEDY_CONFIG") or DEFAULT_CONFIG
    try:
        cfg = load_config(path)
    except ConfigError as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 2
    if args.check_config:
        print(
            "%s: %s is valid (mode %s, listen %s:%d, state %s)"
            % (PROG, path, cfg.mode, cfg.host, cfg.port, cfg.state_dir)
        )
        for key in ("scontrol", "squeue", "scancel"):
            tool = getattr(cfg, key)
            if cfg.mode != "off" and shutil.which(tool) is None:
                # a warning, not an error: the daemon runs and says "isolation failed" until the tool is there
                print("%s: warning: %s %r is not found on PATH ([slurm] %s)" % (PROG, key, tool, key), file=sys.stderr)
        return 0
    if args.command in ("resume", "reset-breaker"):
        from .server import PATH_RESET, PATH_RESUME

        if args.command == "resume":
            res = _operator(cfg, PATH_RESUME, {"node": args.node})
        else:
            res = _operator(cfg, PATH_RESET, {})
        if res is None:  # no daemon: the same action on the state file, under no other writer
            try:
                remedy = build(cfg)
            except (OSError, ValueError) as e:
                print("%s: %s" % (PROG, describe(e) if isinstance(e, OSError) else e), file=sys.stderr)
                return 2
            res = remedy.resume(args.node) if args.command == "resume" else remedy.reset_breaker()
        ok, message = res
        print("%s: %s" % (PROG, message), file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 1
    return serve(cfg)


def serve(cfg):
    from waitress.server import create_server

    from .server import make_app

    try:
        remedy = build(cfg)
    except ValueError as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 2
    try:
        server = create_server(make_app(remedy, cfg), host=cfg.host, port=cfg.port, threads=4, ident=PROG)
    except OSError as e:
        print("%s: %s" % (PROG, listen_error(cfg.host, cfg.port, e, "host/port")), file=sys.stderr)
        return 2
    remedy.announcer.start()
    remedy.start()

    def stop(*_):
        raise SystemExit(0)  # waitress's run() ends its loop and its task threads on SystemExit

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log(
        "remedy_started",
        listen="%s:%s" % (cfg.host, server.effective_port),  # type: ignore[attr-defined]
        mode=cfg.mode,
        state_dir=cfg.state_dir,
    )
    try:
        server.run()
    finally:
        remedy.stop()
        remedy.announcer.stop()
        log("remedy_stopped")
    return 0


if __name__ == "__main__":  # python -m host_client.remedy.cli
    sys.exit(main())
