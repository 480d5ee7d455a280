"""The gateway process's set-up, which the CLI applies (cli.py): the garbage collector before serving, the
descriptor limit that bounds connections, and the C heap handed back after a flood."""

from __future__ import annotations

import gc

FD_HEADROOM = 64  # descriptors kept below RLIMIT_NOFILE beside the connections (state files, pipes, epoll, logs)


def prepare_heap() -> None:
    """Everything built at start lives to the end: out of the collector's way, and collections rarer, since a
    request allocates a few hundred short-lived objects and creates no cycles."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 50)


_TRIM: list = []


def give_back_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing): after a flood of
    connections, what they held is free but scattered, and stays in the process's RSS until trimmed."""
    if not _TRIM:
        try:
            import ctypes  # only once a flood has passed
            import ctypes.util

            _TRIM.append(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim)
        except (OSError, AttributeError):  # not glibc
            _TRIM.append(None)
    if _TRIM[0] is not None:
        _TRIM[0](0)


def descriptor_room(terminals: int = 0) -> int:
    """Connections the process can hold open: the soft RLIMIT_NOFILE less room for everything else it opens."""
    try:
        import resource  # POSIX only
    except ImportError:  # pragma: no cover - not POSIX
        return 10_000
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1_000_000
    return max(16, soft - FD_HEADROOM - 4 * terminals)
