"""A lane's pending queue on disk: PendingStore (one JSON file per terminal, replaced atomically, and the dead
letters beside it) and Persister (the thread that saves the queue whenever it changes).

A new alarm is written and fsynced at once and the ingest path waits for that write (Persister.add_waiter, the one
way to wait for the disk) before it answers the sender, so a restart loses no alarm acknowledged to its source.
"""

from __future__ import annotations

import json
import os
import threading
import time

from host_client import atomic_file
from host_client.logs import error_words

from .lane_thread import LaneThread


class PendingStore:
    """One JSON file per terminal, replaced atomically (write, fsync, rename)."""

    def __init__(self, path):
        self.path = path
        self._lock = threading.Lock()

    def load(self):
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            # Keep the unreadable file for a human; start empty rather than not at all.
            bad = self.path + ".corrupt"
            try:
                os.replace(self.path, bad)
            except OSError:
                pass
            raise ValueError("pending queue %s unreadable (%s); moved to %s" % (self.path, e, bad)) from None
        if not isinstance(data, dict) or not isinstance(data.get("items"), list):
            raise ValueError("pending queue %s has no items list" % self.path)
        return data

    def save(self, data, *, fsync=True):
        """fsync=False still survives a crash of this process (the rename is atomic, the page cache keeps the
        data); fsync=True also survives the machine's."""
        try:
            raw = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError:
            # text no UTF-8 can hold (a lone surrogate that got past ingest): escaped, so the queue is still saved
            raw = json.dumps(data, ensure_ascii=True, separators=(",", ":")).encode("ascii")
        with self._lock:
            atomic_file.replace(self.path, raw, fsync=fsync)

    def dead_letter(self, record):
        """Append one dead-lettered alarm to dead-<terminal>.jsonl beside the queue (for a human to look at)."""
        path = os.path.join(os.path.dirname(self.path), os.path.basename(self.path).replace("pending-", "dead-", 1))
        if path == self.path:
            path = self.path + ".dead"
        if not path.endswith(".jsonl"):
            path = path.rsplit(".", 1)[0] + ".jsonl"
        with self._lock, open(path, "a", encoding="ascii") as f:
            f.write(json.dumps(record, ensure_ascii=True, default=str) + "\n")


def block_on(add_waiter, gen, timeout):
    """A persister's add_waiter(gen, callback) made blocking: its answer (True: on disk), or False after timeout.
    The lanes' Persister and the ACK ledger's both wait through it."""
    done = threading.Event()
    result = []

    def answered(ok):
        result.append(ok)
        done.set()

    add_waiter(gen, answered)
    return done.wait(timeout) and result[0]


class Persister(LaneThread):
    """Saves a lane's queue whenever it changes, in its own thread (group commit: one write covers every change
    made while the previous one was written). A new alarm is written (and fsynced) at once and the ingest path
    waits for that write before it answers, so an event that created an alarm is on disk when it gets its 200. An
    incident folded into a summary that is already on disk is written within coalesce_s, without a wait."""

    _role = "persist"

    def __init__(self, lane, store, log=None, coalesce_s=0.05):
        self.lane = lane
        self.store = store
        self.coalesce_s = coalesce_s
        self.log = log or (lambda event, **kw: None)
        self.saved = lane.gen
        self.synced = -1
        self._stop = False
        self._thread = None
        self.writes = 0
        self.failed = 0
        self.broken = False  # the last save failed: the gateway answers 503 until one succeeds
        self.last_error = None
        self._waiters = []  # (gen, callback(ok)) of answers waiting for their alarm to be on disk

    def add_waiter(self, gen, callback) -> None:
        """callback(True) once the queue as of gen is on disk, callback(False) if a save fails first. Called from
        the persister's thread (or at once): the epoll front hands it to its loop."""
        with self.lane.cond:
            if self.saved >= gen:
                ok = True
            elif self.broken or self._stop:
                ok = False
            else:
                self._waiters.append((gen, callback))
                return
        callback(ok)

    def _wake_waiters(self, *, ok):
        """Under lane.cond."""
        if not self._waiters:
            return
        if ok:
            done = [w for w in self._waiters if w[0] <= self.saved]
            self._waiters = [w for w in self._waiters if w[0] > self.saved]
        else:
            done, self._waiters = self._waiters, []
        for _gen, cb in done:
            cb(ok)

    def stop(self, timeout=5.0):
        super().stop(timeout)
        self.save()

    def save(self):
        # Any failure (disk full, permissions, a bug) is logged, counted and shown in /healthz; never raised, so
        # the thread cannot die of it.
        try:
            snap = self.lane.snapshot()
            # A new alarm is fsynced (it must survive even a power cut); a summary that only grew is written
            # without, so a storm of folds costs a page-cache write each, not a disk flush each.
            fsync = snap["sync_gen"] > self.synced
            self.store.save(snap, fsync=fsync)
            if fsync:
                self.synced = snap["sync_gen"]
        except Exception as e:  # noqa: BLE001 - the persister must outlive any one failure
            self.failed += 1
            err = error_words(e)
            if not self.broken or err != self.last_error:
                self.log("persist_failed", terminal=self.lane.name, path=self.store.path, error=err)
            with self.lane.cond:
                self.broken = True
                self.last_error = err
                self._wake_waiters(ok=False)
                self.lane.cond.notify_all()
            return False
        with self.lane.cond:
            if self.broken:
                self.log("persist_recovered", terminal=self.lane.name, path=self.store.path, failures=self.failed)
            self.broken = False
            self.writes += 1
            if snap["gen"] > self.saved:
                self.saved = snap["gen"]
            self._wake_waiters(ok=True)
            self.lane.cond.notify_all()
        return True

    def wait(self, gen, timeout=2.0):
        """Block until the queue as of `gen` is on disk: add_waiter's answer, or False after timeout."""
        return block_on(self.add_waiter, gen, timeout)

    def _run(self):
        while True:
            try:
                if self._once():
                    return
            except Exception as e:  # noqa: BLE001 - never die; a failing save is retried
                self.failed += 1
                self.broken = True
                self.last_error = error_words(e)
                self.log("persist_failed", terminal=self.lane.name, path=self.store.path, error=self.last_error)
                time.sleep(0.5)

    def _once(self):
        """One round: wait for a change, save it. True when stopped."""
        lane = self.lane
        with lane.cond:
            while lane.gen <= self.saved and not self._stop:
                lane.wake_on_change = True
                lane.cond.wait(1.0)
            if self._stop:
                return True
            # Only summaries grew since the last write: let more folds join this write (a storm folds
            # thousands a second), unless a new alarm arrives, which is written at once.
            end = time.monotonic() + self.coalesce_s
            while lane.sync_gen <= self.synced and not self._stop:
                left = end - time.monotonic()
                if left <= 0:
                    break
                lane.cond.wait(left)
        if not self.save():
            time.sleep(0.5)
        return False
