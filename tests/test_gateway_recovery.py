"""recovery.py: which alarm stands for each open incident, so a recovery clears the right one, once, bounded."""

from host_client.gateway.recovery import RecoveryTracker


def test_an_alarm_is_cleared_once_every_incident_it_carried_recovered():
    t = RecoveryTracker()
    t.track("A03:n1:NCCL", "summary#1", 0.0)
    t.track("A03:n2:NCCL", "summary#1", 0.0)
    assert t.carrier("A03:n1:NCCL") == "summary#1"
    assert t.recovered("A03:n1:NCCL") == ("summary#1", False, 0)
    assert t.recovered("A03:n2:NCCL") == ("summary#1", True, 2)
    assert t.recovered("A03:n2:NCCL") == (None, False, 0)  # not tracked any more
    assert len(t) == 0 and t.open == {}


def test_a_later_alarm_takes_an_incident_over():
    t = RecoveryTracker()
    t.track("k", "alone#1", 0.0)
    t.track("k", "summary#2", 1.0)
    assert t.carrier("k") == "summary#2" and "alone#1" not in t.open
    assert t.recovered("k") == ("summary#2", True, 1)


def test_attached_gpus_count_no_node_and_scope_heads_are_found():
    class Inc:
        key, scope = "A03:n1:XID:gpu0", "A03:n1:XID"

    t = RecoveryTracker()
    t.head(Inc)
    t.track(Inc.key, Inc.key, 0.0)
    assert t.standing_for("A03:n1:XID") == Inc.key
    t.track("A03:n1:XID:gpu1", Inc.key, 0.0, count=False)
    t.recovered("A03:n1:XID:gpu1")
    assert t.recovered(Inc.key) == (Inc.key, True, 1)
    assert t.standing_for("A03:n1:XID") is None


def test_bounded_by_age_and_by_count_and_untrack_forgets():
    t = RecoveryTracker(track_s=100.0, max_tracked=2)
    t.track("a", "x", 0.0)
    t.track("b", "y", 50.0)
    t.track("c", "z", 60.0)  # over max_tracked: the oldest goes
    assert t.carrier("a") is None and len(t) == 2
    t.track("d", "z", 155.0)  # b is 105 s old: pruned
    assert t.carrier("b") is None and t.carrier("c") == "z"
    t.untrack("z")
    assert len(t) == 0 and "z" not in t.open
