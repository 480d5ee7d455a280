"""persist.Persister: one way to wait for the disk (add_waiter); wait() is the blocking form built on it."""

import json
import threading

from test_gateway_lane import inc

from host_client.gateway.lane import Lane
from host_client.gateway.persist import PendingStore, Persister


class FailingStore(PendingStore):
    def save(self, data, *, fsync=True):
        raise OSError(28, "No space left on device")


def lane_and_persister(store):
    """A persister made before its lane's first alarm, as the gateway makes them."""
    lane = Lane("t")
    p = Persister(lane, store)
    with lane.cond:
        lane.submit(inc("A03", "n1"), 0.0)
    assert p.saved < lane.gen
    return lane, p


def test_wait_returns_once_the_alarm_is_on_disk(tmp_path):
    lane, p = lane_and_persister(PendingStore(str(tmp_path / "pending-t.json")))
    p.start()
    try:
        assert p.wait(lane.gen, timeout=5.0) is True
        with open(tmp_path / "pending-t.json", encoding="utf-8") as f:
            assert "A03:n1" in json.dumps(json.load(f))
    finally:
        p.stop()


def test_wait_is_false_when_the_save_fails_and_the_waiters_hear_it_too(tmp_path):
    lane, p = lane_and_persister(FailingStore(str(tmp_path / "pending-t.json")))
    heard = []
    p.add_waiter(lane.gen, heard.append)
    p.start()
    try:
        assert p.wait(lane.gen, timeout=5.0) is False
        assert heard == [False] and p.broken and p.last_error == "No space left on device"
    finally:
        p.stop(timeout=1.0)


def test_wait_times_out_when_nothing_saves_and_a_later_save_still_answers_the_waiter(tmp_path):
    lane, p = lane_and_persister(PendingStore(str(tmp_path / "pending-t.json")))
    heard = threading.Event()
    p.add_waiter(lane.gen, lambda ok: ok and heard.set())
    assert p.wait(lane.gen, timeout=0.05) is False  # the thread was never started
    assert p.save() is True
    assert heard.is_set() and p.wait(lane.gen, timeout=0.0) is True
