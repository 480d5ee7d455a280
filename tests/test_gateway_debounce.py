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


def test_after_a_flood_keys_past_their_window_go_without_another_event():
    """A flood of events for distinct nodes, then silence: the front's tick (about once a second) has the gateway
    forget each debounce key once its window has passed, though no event comes to prune them; a key inside its
    window stays (it still suppresses). /metrics says so. A closed group's summary lets go of the group."""
    from host_client.gateway.application import TIDY_MANY, Application
    from host_client.gateway.config import Config
    from host_client.gateway.service import Gateway

    t = [1000.0]
    cfg = Config.from_dict(
        {
            "debounce": {"window_s": 120},
            "grouping": {"window_s": 60},
            "terminals": {"room": {"url": "http://127.0.0.1:9", "key_id": "k", "secret_env": "S"}},
            "delivery": {"rate_interval_s": 0},
        },
        env={"S": "s"},
    )
    gw = Gateway(cfg, clients={"room": object()}, clock=lambda: t[0], mono=lambda: t[0])
    app = Application(gw, persist_wait_s=1.0)
    n = TIDY_MANY + 100
    for i in range(n):
        ev = {
            "cluster_rack": "R%02d" % (i % 50),
            "node_host": "flood-%05d" % i,
            "event_type": "THERMAL",
            "gpu_index": 0,
        }
        assert gw.gpu_event(ev)[1]["result"] == "alarm"
    summaries = [it for it in gw.lanes["room"].items if it.group is not None]
    assert summaries  # the flood folded into summaries, each holding its group (every node it saw)
    words = {id(it): it.text for it in summaries}
    late = {"cluster_rack": "R00", "node_host": "late", "event_type": "THERMAL", "gpu_index": 0}
    t[0] += 100.0
    gw.gpu_event(late)
    assert len(gw.debouncer) == n + 1
    assert app.tick(t[0]) is False  # every key still inside its window
    assert len(gw.debouncer) == n + 1
    t[0] = 1119.5
    assert app.tick(t[0]) is False and len(gw.debouncer) == n + 1
    t[0] = 1120.2  # the flood's keys are past their window now, but the last tidy was 0.7 s ago
    assert app.tick(t[0]) is False and len(gw.debouncer) == n + 1  # about once a second, not every turn
    t[0] = 1120.5
    assert app.tick(t[0]) is True  # the flood's keys went: many, so memory is worth handing back
    assert len(gw.debouncer) == 1  # the late one stays, inside its window
    assert not gw.gpu_event(late)[1]["result"] == "alarm"  # ... and still suppresses
    assert "sentinel_gateway_debounce_keys 1\n" in gw.metrics_text()
    # the flood's groups closed 60 s after their last incident: their summaries keep their words, not the group
    assert all(it.group is None and it.text == words[id(it)] for it in summaries)
