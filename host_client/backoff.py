"""The one back-off rule of the host side: the client's retries, the gateway's delivery, the probe's sender."""

from __future__ import annotations

import random
from collections.abc import Callable


def backoff_delay(attempt: int, first_s: float, max_s: float, rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait before retry number `attempt` (1 for the first retry).

    Exponential (first_s doubling up to max_s) with jitter between half and all of that step, so a room of senders
    does not retry in lock step and none retries at once.
    """
    step = min(max_s, first_s * (2 ** min(max(attempt, 1) - 1, 30)))
    return step * (0.5 + rand() / 2)
