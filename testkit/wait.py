"""Waiting in tests for something another process or thread does."""

from __future__ import annotations

import time


def until(pred, timeout: float = 30.0, *, every: float = 0.05):
    """pred()'s first true value, asked every `every` seconds; AssertionError after timeout seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError("timed out after %.0f s" % timeout)
