"""The base of a lane's two threads (persist.Persister, delivery.Worker): started, watched, stopped alike."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .lane import Lane


class LaneThread:
    """A lane's own thread (the persister's, the delivery worker's): started, watched, stopped alike. A subclass
    sets lane, _stop and _thread (None until started) and runs its loop in _run."""

    _role = "lane"
    lane: Lane
    _stop: bool
    _thread: threading.Thread | None

    def _run(self) -> None:
        raise NotImplementedError

    def start(self):
        self._thread = threading.Thread(target=self._run, name="%s-%s" % (self._role, self.lane.name), daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is None or self._thread.is_alive() or self._stop

    def stop(self, timeout=5.0):
        with self.lane.cond:
            self._stop = True
            self.lane.cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
