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
        c = AlarmClient(
            t.url, "ops", "s3cret-for-tests", backoff_initial_s=0.01, backoff_max_s=0.03, sleep=slept.append
        )
        ack = c.send(preset("p0", "x"))
    assert ack.attempts == 4 and len(t.accepted) == 1
    assert len(slept) == 3
    for got, step in zip(slept, (0.01, 0.02, 0.03), strict=True):
        assert step / 2 <= got <= step


def test_one_spelling_everywhere_and_the_old_names_still_work_with_one_line(caplog, tmp_path):
    """Issue 38: backoff_initial_s / backoff_max_s in the client, the gateway's [delivery], the probe's [sender] and
    sentinel-remedy's [slurm] (never released under another name); the names before (backoff=, backoff_max=,
    backoff_min_s) are taken, each said once, never twice."""
    from host_client import schema
    from host_client.gateway.config import Config
    from host_client.probes import config as probe_config
    from host_client.remedy import config as remedy_config

    schema._said.clear()  # the once-per-process memory, for a test that counts the lines
    assert Config.from_dict({"delivery": {"backoff_initial_s": 0.2}}).backoff_initial_s == 0.2
    assert probe_config.build({"sender": {"backoff_initial_s": 0.3}})["sender"]["backoff_initial_s"] == 0.3
    remedy = remedy_config.from_dict(
        {"key_id": "gw", "secret_env": "S", "slurm": {"backoff_initial_s": 0.5, "backoff_max_s": 8}}, env={"S": "x"}
    )
    assert (remedy.backoff_initial_s, remedy.backoff_max_s) == (0.5, 8)
    new = AlarmClient("http://127.0.0.1:9", "ops", "s3cret-for-tests", backoff_initial_s=0.4, backoff_max_s=4.0)
    assert (new.backoff_initial_s, new.backoff_max_s) == (0.4, 4.0) and not caplog.records

    with caplog.at_level("WARNING", logger="sentinel.config"):
        for _ in range(2):
            old = AlarmClient("http://127.0.0.1:9", "ops", "s3cret-for-tests", backoff=0.5, backoff_max=5.0)
            cfg = probe_config.build({"sender": {"backoff_min_s": 0.6}})
    assert (old.backoff_initial_s, old.backoff_max_s) == (0.5, 5.0) and cfg["sender"]["backoff_initial_s"] == 0.6
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "AlarmClient(backoff=) is deprecated: call it backoff_initial_s (the old name is still taken)",
        "AlarmClient(backoff_max=) is deprecated: call it backoff_max_s (the old name is still taken)",
        "[sender] backoff_min_s is deprecated: call it [sender] backoff_initial_s (the old name is still taken)",
    ]
    with pytest.raises(schema.ConfigError, match="are the same setting: keep backoff_initial_s"):
        probe_config.build({"sender": {"backoff_min_s": 0.6, "backoff_initial_s": 0.2}})
