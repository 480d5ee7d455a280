"""What of sentinel-remedy's state survives a restart: the nodes it drained, the jobs it signalled and requeued
(with their restart counts), the isolations still to retry, and the breaker. One JSON file, replaced atomically."""

from __future__ import annotations

import json
import os

from host_client import atomic_file

from .actions import Breaker

VERSION = 1


class State:
    def __init__(self, breaker: Breaker):
        self.breaker = breaker
        self.drained: dict = {}  # node -> {"incident", "reason", "fault", "at"}
        self.jobs: dict = {}  # job id -> {"node", "incident", "restarts", "requeue_at", "watch", "host_alert"}
        self.retry: dict = {}  # incident id -> {"incident": wire-ish dict, "attempt", "next_at", "announced"}
        self.seen: dict = {}  # incident id -> time handled (idempotence across a gateway's retries), bounded
        self.outbox: list = []  # [url, alert] announcements the gateway had not taken at the last save

    def to_json(self) -> dict:
        return {
            "version": VERSION,
            "drained": self.drained,
            "jobs": self.jobs,
            "retry": self.retry,
            "seen": self.seen,
            "outbox": self.outbox,
            "breaker": self.breaker.to_json(),
        }

    def load(self, d: dict):
        if not isinstance(d, dict) or d.get("version") != VERSION:
            raise ValueError("not a sentinel-remedy state file of version %d" % VERSION)
        self.drained = dict(d.get("drained", {}))
        self.jobs = dict(d.get("jobs", {}))
        self.retry = dict(d.get("retry", {}))
        self.seen = dict(d.get("seen", {}))
        self.outbox = [list(x) for x in d.get("outbox", []) if isinstance(x, list) and len(x) == 2]
        self.breaker.load(d.get("breaker", {}))


class StateFile:
    def __init__(self, path: str):
        self.path = path

    def load(self, state: State) -> bool:
        """Fill state from the file; False when there is none yet. ValueError (one line) when unreadable."""
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as e:
            raise ValueError("state file %s unreadable: %s" % (self.path, e)) from None
        state.load(data)
        return True

    def save(self, state: State):
        d = os.path.dirname(self.path) or "."
        os.makedirs(d, exist_ok=True)
        atomic_file.replace(self.path, json.dumps(state.to_json(), ensure_ascii=False, sort_keys=True).encode("utf-8"))
