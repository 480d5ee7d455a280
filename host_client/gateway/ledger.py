"""The ACK ledger on disk: what the gateway knows of open P0s, acknowledgements, ACKs still to send, escalations
raised (acks.py's AckBook) and the incident history (history.py), kept under state_dir so a restart forgets none
of it (docs/GATEWAY.md, "Acknowledgement and escalation").

One file, `acks.jsonl`: one JSON record a line, replaced atomically (write, fsync, rename) like the pending
queues. A line that does not read (a torn or edited file) is skipped and the rest kept: one log line says how many.
LedgerPersister is the thread that saves it whenever the book or the history changes (group commit); an ingest
answer that opened a P0 waits for that save (add_waiter, as persist.py's Persister), so a P0 answered 200 keeps
its deadline through kill -9.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from host_client import atomic_file
from host_client.logs import error_words

from .logs import log_event
from .persist import block_on

FILE = "acks.jsonl"
COALESCE_S = 0.2


def load(path):
    """(records, bad lines, error or None): every line that reads as a JSON object; a file that cannot be opened
    at all gives none and its error."""
    recs, bad = [], 0
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return recs, 0, None
    except OSError as e:
        return recs, 0, "%s: %s" % (type(e).__name__, e.strerror or e)
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        try:
            r = json.loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            bad += 1
            continue
        if isinstance(r, dict):
            recs.append(r)
        else:
            bad += 1
    return recs, bad, None


def save(path, records, *, fsync=True):
    lines = [json.dumps(r, ensure_ascii=True, separators=(",", ":"), default=str).encode("ascii") for r in records]
    atomic_file.replace(path, b"".join(line + b"\n" for line in lines), fsync=fsync)


def restore(path, book, history):
    """Load the ledger into the book and the history; logs one line for what was restored and one for what was
    not. Returns the count of records restored."""
    recs, bad, err = load(path)
    if err is not None:
        log_event("ack_ledger_unreadable", logging.ERROR, path=path, error=err)
        return 0
    n, bad_b = book.restore([r for r in recs if r.get("t") != "incident"])
    n_h, bad_h = history.restore([r for r in recs if r.get("t") == "incident"]) if history is not None else (0, 0)
    bad += bad_b + bad_h
    if bad:
        log_event("ack_ledger_damaged", logging.ERROR, path=path, skipped=bad, kept=n + n_h)
    if n or n_h:
        log_event("ack_ledger_restored", path=path, records=n, incidents=n_h, open_p0=len(book.open))
    return n + n_h


class LedgerPersister:
    """Saves the ledger whenever the book's or the history's gen moves (one write covers every change made while
    the previous one was written). Same waiter interface as persist.Persister, so the HTTP front waits for both
    alike; a failed save is logged once, retried, and fails its waiters (the answer is 503, the sender retries)."""

    def __init__(self, path, book, history):
        self.path = path
        self.book = book
        self.history = history
        self.cond = book.cond  # history changes notify the same condition
        # what restore() read is what the file holds: nothing to write until a change (a second gateway refused
        # on the same state_dir must find it as the first left it)
        self.saved = self._gen()
        self.broken = False
        self.last_error = None
        self.writes = 0
        self.failed = 0
        self._waiters = []
        self._stop = False
        self._thread = None

    def _gen(self):
        return self.book.gen + (self.history.gen if self.history is not None else 0)

    def gen(self):
        with self.cond:
            return self._gen()

    def add_waiter(self, gen, callback):
        with self.cond:
            if self.saved >= gen:
                ok = True
            elif self.broken or self._stop:
                ok = False
            else:
                self._waiters.append((gen, callback))
                self.cond.notify_all()
                return
        callback(ok)

    def wait(self, gen, timeout=2.0):
        return block_on(self.add_waiter, gen, timeout)

    def start(self):
        self._thread = threading.Thread(target=self._run, name="ack-ledger", daemon=True)
        self._thread.start()

    def alive(self):
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout=5.0):
        with self.cond:
            self._stop = True
            self.cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        self.save()

    def _run(self):
        while True:
            with self.cond:
                while self._gen() <= self.saved and not self._stop:
                    self.cond.wait(1.0)
                if self._stop:
                    return
                # nobody waits (a history entry, a read): let a burst of changes share one write
                end = time.monotonic() + COALESCE_S
                while not self._waiters and not self._stop and time.monotonic() < end:
                    self.cond.wait(max(0.0, end - time.monotonic()))
            if not self.save():
                threading.Event().wait(0.5)

    def save(self):
        try:
            with self.cond:
                gen = self._gen()
            _g, recs = self.book.snapshot()
            if self.history is not None:
                recs += self.history.records()
            save(self.path, recs)
        except Exception as e:  # noqa: BLE001 - the persister must outlive any one failure
            self.failed += 1
            err = error_words(e)
            if not self.broken or err != self.last_error:
                log_event("ack_ledger_save_failed", logging.ERROR, path=self.path, error=err)
            with self.cond:
                self.broken = True
                self.last_error = err
                done, self._waiters = self._waiters, []
            for _g, cb in done:
                cb(False)
            return False
        with self.cond:
            if self.broken:
                log_event("ack_ledger_save_recovered", path=self.path, failures=self.failed)
            self.broken = False
            self.writes += 1
            self.saved = max(self.saved, gen)
            done = [w for w in self._waiters if w[0] <= self.saved]
            self._waiters = [w for w in self._waiters if w[0] > self.saved]
        for _g, cb in done:
            cb(True)
        return True
