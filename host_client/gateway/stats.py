"""A lane's counters, as named attributes: what /metrics publishes per terminal (service.py writes them).

Each dataclass field is one label value of its metric family, so adding a counter here adds it to /metrics; the
family names and label values are listed in docs/GATEWAY.md and are kept stable for the Prometheus rules.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass(slots=True)
class IncidentCounts:
    """sentinel_gateway_incidents_total{fate=...}: what became of each incident a lane took."""

    alone: int = 0  # went out as its own alarm
    folded: int = 0  # folded into a summary
    attached: int = 0  # a debounced GPU added to the alarm already standing for its node
    delivered: int = 0
    expired: int = 0  # its alarm passed its deadline undelivered
    dropped: int = 0  # its alarm was dropped by a full queue
    refused: int = 0  # the terminal refused its alarm (4xx)
    dead: int = 0  # its alarm was dead-lettered (a failure retrying cannot fix)

    def items(self):
        return [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]


@dataclass(slots=True)
class AlarmCounts:
    """sentinel_gateway_alarms_total{outcome=...}: what became of each alarm (queued item) a lane sent."""

    delivered: int = 0
    duplicate: int = 0  # delivered, and the terminal said it had it already (a retry, or another gateway's copy)
    expired: int = 0
    dropped_full: int = 0
    refused: int = 0
    dead_letter: int = 0
    retries: int = 0
    replaced: int = 0  # an unsent summary replaced by a newer one

    def items(self):
        return [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]


@dataclass(slots=True)
class Latency:
    """sentinel_gateway_delivery_latency_seconds: from alarm queued to the terminal's answer."""

    buckets: list = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        self.total += seconds
        self.count += 1
        i = 0
        while i < len(LATENCY_BUCKETS) and seconds > LATENCY_BUCKETS[i]:
            i += 1
        self.buckets[i] += 1


@dataclass(slots=True)
class LaneStats:
    incidents: IncidentCounts = field(default_factory=IncidentCounts)
    alarms: AlarmCounts = field(default_factory=AlarmCounts)
    heartbeats_ok: int = 0
    heartbeats_failed: int = 0
    latency: Latency = field(default_factory=Latency)

    def copy(self) -> LaneStats:
        """A consistent copy for a scrape (take it under the lane's lock)."""
        return LaneStats(
            incidents=dataclasses.replace(self.incidents),
            alarms=dataclasses.replace(self.alarms),
            heartbeats_ok=self.heartbeats_ok,
            heartbeats_failed=self.heartbeats_failed,
            latency=Latency(list(self.latency.buckets), self.latency.total, self.latency.count),
        )
