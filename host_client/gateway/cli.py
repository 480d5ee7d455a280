"""sentinel-gateway: run the gateway (its own epoll front, or waitress), or check a configuration and exit."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys

from .config import ConfigError, load_config
from .service import JsonFormatter, TextFormatter

DEFAULT_CONFIG = "/etc/sentinel/gateway.toml"


def setup_logging(fmt: str, level: str) -> None:
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    log = logging.getLogger("sentinel.gateway")
    log.handlers[:] = [h]
    log.setLevel(getattr(logging, level.upper()))
    log.propagate = False
    # waitress warns "Task queue depth is N" for every queued request: thousands of lines in a storm, each one a
    # write the busy gateway pays for. Queue depth is in /metrics; only waitress's errors are logged.
    wq = logging.getLogger("waitress")
    wq.handlers[:] = [h]
    wq.setLevel(logging.ERROR)
    wq.propagate = False


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="sentinel-gateway",
        description="GPU Sentinel gateway: GPU events and Alertmanager webhooks in, signed alarms to terminals out.",
    )
    p.add_argument(
        "-c",
        "--config",
        default=os.environ.get("SENTINEL_GATEWAY_CONFIG", DEFAULT_CONFIG),
        help="TOML configuration (default $SENTINEL_GATEWAY_CONFIG or %s)" % DEFAULT_CONFIG,
    )
    p.add_argument(
        "--check-config",
        action="store_true",
        help="validate the configuration, print it (no secrets), exit 0 if valid, 2 if not",
    )
    p.add_argument("--host", help="listen address (overrides gateway.host)")
    p.add_argument("--port", type=int, help="listen port (overrides gateway.port)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    a = p.parse_args(argv)
    try:
        cfg = load_config(a.config)
    except ConfigError as e:
        print("sentinel-gateway: configuration error: %s" % e, file=sys.stderr)
        return 2
    if a.host:
        cfg.host = a.host
    if a.port is not None:
        cfg.port = a.port
    if a.check_config:
        print(json.dumps(cfg.describe(), ensure_ascii=False, indent=2))
        print("configuration OK: %s" % a.config, file=sys.stderr)
        return 0
    setup_logging(cfg.log_format, a.log_level)
    if cfg.server == "epoll":
        return _serve_epoll(cfg)
    return _serve_waitress(cfg)


def _serve_epoll(cfg) -> int:
    from .server import IngestFront
    from .service import Gateway

    gw = Gateway(cfg)
    front = IngestFront(gw, cfg)
    gw.start()

    def on_term(_sig, _frm):
        front.stop()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    try:
        front.run(cfg.host, cfg.port)
    finally:
        gw.stop()
        logging.getLogger("sentinel.gateway").info("gateway_stopped")
    return 0


def _serve_waitress(cfg) -> int:
    import waitress

    from .app import create_app, gateway_of

    app = create_app(cfg)
    gw = gateway_of(app)

    def on_term(_sig, _frm):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    try:
        waitress.serve(app, host=cfg.host, port=cfg.port, threads=cfg.threads, ident="sentinel-gateway", _quiet=True)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        gw.stop()
        logging.getLogger("sentinel.gateway").info("gateway_stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
