"""What the HTTP front says of itself (connections, sheds, timeouts, accept failures): the one value the loop
(server.py) hands the application, which gives it to /healthz (service.py) and /metrics (metrics.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FrontStatus:
    connections: int  # client connections held open
    accept_failures: int  # times accept() was paused for want of descriptors or memory
    accept_failing: bool  # paused now
    accept_error: str | None  # why, while paused
    shed: int = 0  # connections closed to make room at max_connections
    head_timeouts: int = 0  # requests whose head did not arrive within head_timeout_s
    body_timeouts: int = 0  # ... whose body did not arrive within body_timeout_s
    partial_refused: int = 0  # 503s: all incomplete bodies together over max_partial_body_bytes
    max_connections: int = 0
