"""The debouncer and the recovery tracker skip their prune while the oldest entry is young (a remembered time).
Each is run against itself with that memory disabled, on random operation sequences, times going backwards and NaN
included: every answer and every piece of state must agree."""

from hypothesis import example, given, settings
from hypothesis import strategies as st

from host_client.gateway.debounce import Debouncer
from host_client.gateway.recovery import RecoveryTracker


def _no_memory(cls, name):
    """cls, with the remembered time always unknown: every call prunes, as before the shortcut."""
    return type("Plain" + cls.__name__, (cls,), {name: property(lambda self: None, lambda self, v: None)})


PlainDebouncer = _no_memory(Debouncer, "_oldest")
PlainTracker = _no_memory(RecoveryTracker, "_head_since")

KEYS = st.sampled_from(["a", "b", "c", "d", "e", "f"])
# forward and back by about a window, sometimes NaN: the state must agree whatever the clock does
STEP = st.one_of(
    st.sampled_from([0.0, 1.0, 3.0, 6.0, 11.0, 70.0, 130.0, -2.0, -4.0, -7.0, -65.0, float("nan")]),
    st.floats(-150.0, 150.0),
)


def _state(x):
    return repr(x)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 6),
    st.sampled_from([0.0, 5.0, 120.0]),
    st.lists(st.tuples(st.sampled_from(["fire", "forget", "prune"]), KEYS, STEP), max_size=40),
)
# the oldest forgotten, the next one older still (the clock went back): it must be pruned
@example(6, 5.0, [("fire", "a", 0.0), ("fire", "b", -4.0), ("forget", "a", 0.0), ("fire", "c", 7.0)])
def test_debouncer_with_and_without_the_remembered_time(max_keys, window, ops):
    fast, plain = Debouncer(window, max_keys), PlainDebouncer(window, max_keys)
    now = 1000.0
    for op, key, step in ops:
        now = now + step if now == now else 1000.0
        if op == "fire":
            assert fast.fire(key, now) == plain.fire(key, now)
        elif op == "forget":
            fast.forget(key)
            plain.forget(key)
        else:
            assert fast.prune(now) == plain.prune(now)
        assert _state(list(fast._last.items())) == _state(list(plain._last.items()))
        assert (fast.suppressed, fast.evicted, fast.pruned) == (plain.suppressed, plain.evicted, plain.pruned)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 6),
    st.sampled_from([5.0, 60.0]),
    st.lists(
        st.tuples(
            st.sampled_from(["track", "attach", "recovered", "untrack", "prune"]),
            KEYS,
            st.sampled_from(["X", "Y", "Z"]),
            STEP,
        ),
        max_size=40,
    ),
)
@example(
    6,
    5.0,
    [("track", "a", "X", 0.0), ("track", "b", "Y", -30.0), ("recovered", "a", "X", 0.0), ("prune", "a", "X", 6.0)],
)
def test_tracker_with_and_without_the_remembered_time(max_tracked, track_s, ops):
    fast = RecoveryTracker(max_tracked=max_tracked, track_s=track_s)
    plain = PlainTracker(max_tracked=max_tracked, track_s=track_s)
    now = 1000.0
    for op, key, alarm, step in ops:
        now = now + step if now == now else 1000.0
        for t in (fast, plain):
            if op in ("track", "attach"):
                t.track(key, alarm, now, count=op == "track")
            elif op == "untrack":
                t.untrack(alarm)
            elif op == "prune":
                t.prune(now)
        if op == "recovered":
            assert _state(fast.recovered(key)) == _state(plain.recovered(key))
        assert _state(list(fast.carrier_of.items())) == _state(list(plain.carrier_of.items()))
        assert _state(fast.open) == _state(plain.open) and fast.carried_size == plain.carried_size
        assert fast.standing_for(alarm) == plain.standing_for(alarm)
