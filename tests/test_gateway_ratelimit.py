"""ratelimit.py: the per-terminal token bucket (burst, then one per interval), on a clock passed in."""

import pytest

from host_client.gateway.ratelimit import RateLimit


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
