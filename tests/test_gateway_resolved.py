"""resolved.py: an HA peer's late firing of a resolved incident is stale for hold_s, within max_keys."""

from host_client.gateway.resolved import ResolvedMemory


def test_a_firing_after_its_resolve_is_stale_for_hold_s():
    m = ResolvedMemory(hold_s=60.0)
    assert not m.is_stale("fp@t0", 0.0)
    m.resolved("fp@t0", 10.0)
    assert m.is_stale("fp@t0", 69.0)
    assert not m.is_stale("fp@t0", 70.0) and len(m) == 0  # forgotten once the hold is over
    assert not m.is_stale("fp@t1", 20.0)  # a new startsAt is a new incident


def test_at_most_max_keys_the_oldest_forgotten_first():
    m = ResolvedMemory(hold_s=600.0, max_keys=2)
    for i, k in enumerate(("a", "b", "c")):
        m.resolved(k, float(i))
    assert len(m) == 2 and m.evicted == 1
    assert not m.is_stale("a", 3.0) and m.is_stale("b", 3.0) and m.is_stale("c", 3.0)


def test_resolving_again_renews_the_hold():
    m = ResolvedMemory(hold_s=10.0)
    m.resolved("x", 0.0)
    m.resolved("x", 8.0)
    assert m.is_stale("x", 15.0)
