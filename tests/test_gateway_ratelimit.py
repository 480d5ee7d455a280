"""ratelimit.py: the per-terminal token buckets (burst, then one per interval; P0 apart), on a clock passed in."""

import pytest

from host_client.gateway.ratelimit import RateLimit, TerminalRate
from sentinel_core.alarm import NORMAL, P0, P1


def test_burst_then_one_per_interval():
    r = RateLimit(burst=3, interval=5.0)
    for _ in range(3):
        assert r.wait(0.0) == 0.0
        r.take(0.0)
    assert r.wait(0.0) == pytest.approx(5.0)
    assert r.wait(2.0) == pytest.approx(3.0)
    assert r.wait(5.0) == 0.0
    r.take(5.0)
    assert r.wait(5.0) == pytest.approx(5.0)


def test_idle_refills_up_to_the_burst_only():
    r = RateLimit(burst=2, interval=1.0)
    r.take(0.0)
    r.take(0.0)
    assert r.wait(1000.0) == 0.0 and r.tokens == 2.0


def test_zero_interval_never_waits_and_bounds_are_sane():
    r = RateLimit(burst=1, interval=0)
    for t in range(5):
        r.take(float(t))
        assert r.wait(float(t)) == 0.0
    assert RateLimit(burst=0, interval=-3).burst == 1 and RateLimit(interval=-3).interval == 0.0


def test_p0_never_waits_for_tokens_p1s_spent():
    r = TerminalRate(burst=3, interval=5.0)
    for _ in range(3):
        assert r.wait(0.0, P1) == 0.0
        r.take(0.0, P1)
    assert r.wait(0.0, P1) == pytest.approx(5.0) and r.wait(0.0, NORMAL) == pytest.approx(5.0)
    assert r.wait(0.0, P0) == 0.0  # the P1 burst spent none of the P0s' tokens


def test_a_p0_flood_has_its_own_bound_and_p1s_yield_to_it():
    r = TerminalRate(burst=2, interval=5.0)
    for _ in range(2):
        assert r.wait(0.0, P0) == 0.0
        r.take(0.0, P0)
    assert r.wait(0.0, P0) == pytest.approx(5.0)  # a P0 flood: burst, then one per interval
    assert r.wait(0.0, P1) == pytest.approx(5.0)  # the P0s spent the rest's tokens too: P1s wait behind them
    assert r.wait(5.0, P0) == 0.0 and r.wait(5.0, P1) == 0.0
