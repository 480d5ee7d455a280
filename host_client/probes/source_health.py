"""The probe's own eyes: every source it reads registers here and says whether it works.

A source (the kernel log, an NCCL log, the GPU readings, the progress socket, a fabric counter) that cannot be
opened or stops producing leaves the room blind to the faults it would show. Each source holds a ``SourceHealth``
and calls ``ok()`` / ``down(why)`` as it learns; the daemon turns the registry into one standing finding
(PROBE_SOURCE_DOWN, node-wide, P1) that names every source down, logs each change once (``source_down`` at ERROR
with the source, its kind and the error; ``source_up`` at INFO when it works again), shows it in /status and
``sentinel-probe status`` and exports it as ``sentinel_probe_source_up``. The finding clears (RECOVERED) once every
source works again.

A new source registers with ``Registry.register(name, kind)``: ``kind`` is a ``vocabulary.SOURCE_KINDS`` name (the
words the room hears), ``name`` tells two sources of a kind apart (a path, a pattern).
"""

import logging
import threading
import time

from host_client import vocabulary
from host_client.logs import log_event

from . import events

log = logging.getLogger("sentinel.probe")


class SourceHealth:
    """One source's state: "ok", "down" (with why) or "unknown" (not read yet)."""

    __slots__ = ("name", "kind", "state", "why", "since", "_registry")

    def __init__(self, registry, name, kind):
        self._registry = registry
        self.name = name
        self.kind = kind
        self.state = "unknown"
        self.why = None
        self.since = None

    def ok(self):
        if self.state != "ok":
            self._registry._change(self, "ok", None)

    def down(self, why):
        if self.state != "down" or self.why != why:
            self._registry._change(self, "down", str(why))

    def words(self, language="en"):
        return vocabulary.source_words(self.kind, language)


class Registry:
    def __init__(self, wall=time.time):
        self._wall = wall
        self._lock = threading.Lock()
        self._sources = {}  # name -> SourceHealth, in registration order
        self.changes = 0  # bumped on every change: the daemon re-evaluates its finding when it moves

    def register(self, name, kind):
        if kind not in vocabulary.SOURCE_KINDS:
            raise ValueError("unknown source kind %r (vocabulary.SOURCE_KINDS)" % (kind,))
        with self._lock:
            h = self._sources.get(name)
            if h is None:
                h = self._sources[name] = SourceHealth(self, name, kind)
            return h

    def _change(self, h, state, why):
        with self._lock:
            was = h.state
            h.state, h.why = state, why
            if state != was:
                h.since = self._wall()
            self.changes += 1
        if state == "down" and was != "down":
            log_event(log, "source_down", logging.ERROR, source=h.name, kind=h.kind, error=why)
        elif state == "ok" and was == "down":
            log_event(log, "source_up", logging.INFO, source=h.name, kind=h.kind)

    def sources(self):
        with self._lock:
            return list(self._sources.values())

    def down(self):
        return [h for h in self.sources() if h.state == "down"]

    def finding(self, host):
        """The standing finding for the sources down now ([] when none): one per node, so one recovering source
        never clears another's alarm; its revision (the set down) re-sends it when the set changes."""
        down = self.down()
        if not down:
            return []
        kinds = []
        for h in down:
            if h.kind not in kinds:
                kinds.append(h.kind)
        each = ("%s unreadable: %s" % (h.words(), h.why) for h in down)  # why names the path
        detail = "probe on %s: %s" % (host, "; ".join(each))
        return [
            events.Finding(
                ("probe", "sources"),
                events.PROBE_SOURCE_DOWN,
                events.NODE_WIDE,
                detail[: events.MAX_DETAIL],
                source=",".join(kinds),
                revision=tuple(sorted(h.name for h in down)),
            )
        ]

    def snapshot(self):
        return [
            {"name": h.name, "kind": h.kind, "state": h.state, "error": h.why, "since": h.since} for h in self.sources()
        ]
