"""host_client.backoff: the one back-off rule, and the client waiting by it between real retries on loopback."""

import pytest

from host_client import AlarmClient, preset
from host_client.backoff import backoff_delay
from testkit.terminal import LoopbackTerminal


@pytest.mark.parametrize("rand,share", [(lambda: 0.0, 0.5), (lambda: 1.0, 1.0), (lambda: 0.5, 0.75)])
def test_doubles_from_first_to_max_with_half_to_full_jitter(rand, share):
    got = [backoff_delay(n, 0.5, 30.0, rand) for n in range(1, 10)]
    steps = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert got == pytest.approx([s * share for s in steps])


def test_never_zero_never_past_max_even_at_huge_attempts():
    for n in (0, 1, 2, 64, 10**6):
        d = backoff_delay(n, 0.2, 2.0)
        assert 0.1 <= d <= 2.0


def test_client_sleeps_by_the_rule_between_real_retries():
    slept = []
    with LoopbackTerminal({"ops": "s3cret-for-tests"}, fail_first=3) as t:
        c = AlarmClient(t.url, "ops", "s3cret-for-tests", backoff=0.01, backoff_max=0.03, sleep=slept.append)
        ack = c.send(preset("p0", "x"))
    assert ack.attempts == 4 and len(t.accepted) == 1
    assert len(slept) == 3
    for got, step in zip(slept, (0.01, 0.02, 0.03), strict=True):
        assert step / 2 <= got <= step
