"""Loopback ports for the servers a test or a bench starts."""

from __future__ import annotations

import socket
import time


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's pick); whoever binds it next gets it."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 20.0, host: str = "127.0.0.1", alive=None) -> None:
    """Return once something accepts on host:port; TimeoutError after timeout. alive: a callable that raises when
    the server being waited for has exited (so a crash is reported at once, not after the timeout)."""
    end = time.monotonic() + timeout
    while True:
        if alive is not None:
            alive()
        try:
            socket.create_connection((host, port), 0.2).close()
            return
        except OSError:
            if time.monotonic() >= end:
                raise TimeoutError("nothing listens on %s:%d after %.0f s" % (host, port, timeout)) from None
            time.sleep(0.05)


def running(proc, log=None):
    """For wait_port's alive: raises once the subprocess proc has exited, with its exit code (and the tail of its
    log file, when given)."""

    def alive():
        if proc.poll() is not None:
            tail = ""
            if log:
                with open(log, encoding="utf-8", errors="replace") as f:
                    tail = ": " + f.read()[-2000:]
            raise RuntimeError("the server exited with %s before it listened%s" % (proc.returncode, tail))

    return alive
