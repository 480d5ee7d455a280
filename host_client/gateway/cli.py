"""sentinel-gateway: run the gateway (its HTTP front, server.py, with the process set-up of process.py), or check a
configuration and exit."""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import logging
import os
import signal
import sys

from host_client.errors import SentinelError
from host_client.logs import FORMATS
from host_client.logs import setup as setup_log
from host_client.transport import listen_error

from .config import ConfigError, load_config

DEFAULT_CONFIG = "/etc/sentinel/gateway.toml"
EXIT_OK, EXIT_CONFIG, EXIT_CANNOT_START = 0, 2, 3
LOCK_NAME = "gateway.lock"

EPILOG = """exit status: 0 stopped cleanly (or --check-config: valid), 2 configuration error,
3 cannot start: the port is in use or the address is not this host's, the state_dir cannot be written, or another
gateway holds the state_dir. Each is one line on stderr naming the thing and the fix; nothing is written to the
state_dir before the port is bound and the state_dir locked.

commands for a running gateway: `incidents [--open] [--json]` (its incident history) and `ack KEY` (acknowledge an
incident on every terminal showing it); `sentinel-gateway incidents -h` says more."""


class CannotStart(SentinelError):
    """The host refuses what the configuration asks for (port, address, state_dir): one line, exit 3."""


def bind(cfg) -> list:
    """The listening sockets the server will use, bound before anything else happens."""
    from .server import listen

    n = cfg.io_loops
    socks = []
    try:
        first = listen(cfg.host, cfg.port, reuse_port=n > 1)
        socks.append(first)
        port = first.getsockname()[1]
        for _ in range(n - 1):
            socks.append(listen(cfg.host, port, reuse_port=True))
    except OSError as e:
        for s in socks:
            s.close()
        raise CannotStart(listen_error(cfg.host, cfg.port, e, "--host/--port or gateway.host/port")) from None
    return socks


def lock_state_dir(state_dir):
    """Hold state_dir/gateway.lock (flock) for the life of the process, so two gateways never share one state_dir.
    Returns the open lock file (keep it), or raises CannotStart."""
    fix = "the gateway's user must own it (systemd's StateDirectory= does this) or choose another gateway.state_dir"
    try:
        os.makedirs(state_dir, exist_ok=True)
        fd = os.open(os.path.join(state_dir, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise CannotStart("cannot use state_dir %s: %s; %s" % (state_dir, e.strerror or e, fix)) from None
    f = os.fdopen(fd, "r+")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = f.read().strip()
        f.close()
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise CannotStart(
                "state_dir %s is in use by another gateway%s; stop it, or give this one its own gateway.state_dir"
                % (state_dir, " (pid %s)" % holder if holder.isdigit() else "")
            ) from None
        raise CannotStart("cannot lock state_dir %s: %s" % (state_dir, e.strerror or e)) from None
    f.seek(0)
    f.truncate()
    f.write("%d\n" % os.getpid())
    f.flush()
    return f


def check_state_dir(state_dir):
    """--check-config: a state_dir that exists must be a directory this user can write (one that does not is
    created at start)."""
    if state_dir and os.path.exists(state_dir):
        if not os.path.isdir(state_dir):
            raise ConfigError("gateway.state_dir %s is not a directory" % state_dir)
        if not os.access(state_dir, os.W_OK | os.X_OK):
            raise ConfigError(
                "gateway.state_dir %s is not writable by this user (uid %d): chown it to the gateway's user"
                % (state_dir, os.getuid())
            )


def setup_logging(fmt: str, level: str) -> None:
    setup_log("sentinel.gateway", fmt=fmt, level=level)


def main(argv=None) -> int:
    from .incidents_cli import subcommand

    argv = sys.argv[1:] if argv is None else list(argv)
    sub = subcommand(argv)  # `incidents`, `ack KEY`: a running gateway's history (incidents_cli.py)
    if sub is not None:
        return sub
    p = argparse.ArgumentParser(
        prog="sentinel-gateway",
        description="GPU Sentinel gateway: GPU events and Alertmanager webhooks in, signed alarms to terminals out.",
        epilog=EPILOG,
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
    p.add_argument("--port", type=_port, help="listen port (overrides gateway.port)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.add_argument(
        "--log-format",
        choices=FORMATS,
        help="json: one JSON object per line, ISO-8601 UTC time (the default, for journald and log shippers); "
        "text: for humans (overrides gateway.log_format)",
    )
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
        try:
            check_state_dir(cfg.state_dir)
        except ConfigError as e:
            print("sentinel-gateway: configuration error: %s" % e, file=sys.stderr)
            return EXIT_CONFIG
        print(json.dumps(cfg.describe(), ensure_ascii=False, indent=2))
        print("configuration OK: %s" % a.config, file=sys.stderr)
        return 0
    # the order matters: the port, then the state_dir's lock, and only then the Gateway, which writes its queues
    try:
        socks = bind(cfg)
        cfg.port = socks[0].getsockname()[1]  # port 0: the one the kernel chose, for the log
        try:
            lock = lock_state_dir(cfg.state_dir) if cfg.state_dir else None
        except CannotStart:
            for s in socks:
                s.close()
            raise
    except CannotStart as e:
        print("sentinel-gateway: %s" % e, file=sys.stderr)
        return EXIT_CANNOT_START
    setup_logging(a.log_format or cfg.log_format, a.log_level)
    try:
        return _serve(cfg, socks)
    finally:
        if lock is not None:
            lock.close()


def _port(v):
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a port number" % v) from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError("%d is not a port (0..65535)" % n)
    return n


def _serve(cfg, socks) -> int:
    from .process import give_back_memory, prepare_heap
    from .server import IngestFront
    from .service import Gateway

    gw = Gateway(cfg)
    front = IngestFront(gw, cfg, after_flood=give_back_memory)
    gw.start()
    prepare_heap()

    def on_term(_sig, _frm):
        front.stop()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    try:
        front.run(cfg.host, cfg.port, socks=socks)
    finally:
        gw.stop()
        logging.getLogger("sentinel.gateway").info("gateway_stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
