"""The RFC's 120 s debounce window at its edges, and memory that stays bounded."""

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from host_client.gateway.debounce import Debouncer


def test_window_edges():
    d = Debouncer(120)
    assert d.fire("A03:gpu-worker-08:NCCL_TIMEOUT", 1000.0)
    assert not d.fire("A03:gpu-worker-08:NCCL_TIMEOUT", 1000.0)  # same instant
    assert not d.fire("A03:gpu-worker-08:NCCL_TIMEOUT", 1119.999)  # just inside
    assert d.fire("A03:gpu-worker-08:NCCL_TIMEOUT", 1120.0)  # exactly the window: the RFC's `<` fires
    assert not d.fire("A03:gpu-worker-08:NCCL_TIMEOUT", 1120.001)
    assert d.suppressed == 3


def test_suppressed_events_do_not_extend_the_window():
    # The RFC stores the time only when it alarms: a fault repeating every 60 s alarms every 120 s.
    d = Debouncer(120)
    fired = [t for t in range(0, 601, 60) if d.fire("k", float(t))]
    assert fired == [0, 120, 240, 360, 480, 600]


def test_keys_are_independent():
    d = Debouncer(120)
    assert d.fire("A03:h:NCCL_TIMEOUT", 0.0)
    assert d.fire("A03:h:XID_FATAL", 1.0)
    assert d.fire("A04:h:NCCL_TIMEOUT", 2.0)
    assert not d.fire("A03:h:NCCL_TIMEOUT", 3.0)


def test_forget_lets_a_recovered_fault_alarm_again():
    d = Debouncer(120)
    assert d.fire("k", 0.0)
    d.forget("k")
    assert d.fire("k", 1.0)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.floats(min_value=0, max_value=50)), max_size=60),
    st.floats(min_value=0.5, max_value=20),
)
def test_matches_a_naive_model(events, window):
    d = Debouncer(window)
    last = {}
    t = 0.0
    for k, dt in events:
        t += dt
        want = k not in last or t - last[k] >= window
        if want:
            last[k] = t
        assert d.fire(k, t) == want
    assert len(d) <= 3


def test_memory_is_pruned_and_returns_near_baseline():
    d = Debouncer(120, max_keys=1_000_000)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(100_000):
        d.fire("R%03d:gpu-node-%05d:NCCL_TIMEOUT" % (i % 125, i), i / 100_000)
    peak = tracemalloc.get_traced_memory()[0]
    assert len(d) == 100_000
    d.fire("late", 500.0)  # any later event prunes what aged out
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(d) == 1
    assert d.pruned == 100_000
    assert peak - base > 5_000_000
    assert after - base < 200_000, (base, peak, after)


def test_hard_cap_evicts_oldest_and_counts():
    d = Debouncer(120, max_keys=3)
    for k in "abcd":
        assert d.fire(k, 0.0)
    assert len(d) == 3 and d.evicted == 1
    assert d.fire("a", 1.0)  # evicted early: alarms again (counted in metrics)
    assert not d.fire("d", 1.0)
