"""stats.py: the lane's counters (each field a label value of its family) and the latency histogram."""

import dataclasses

from host_client.gateway.stats import LATENCY_BUCKETS, AlarmCounts, IncidentCounts, LaneStats, Latency


def test_items_name_every_field_in_order():
    c = IncidentCounts(alone=2, folded=5)
    assert [n for n, _ in c.items()] == [f.name for f in dataclasses.fields(IncidentCounts)]
    assert dict(c.items())["folded"] == 5
    assert dict(AlarmCounts(retries=3).items())["retries"] == 3


def test_latency_buckets_count_each_observation_once_at_its_bound():
    lat = Latency()
    for s in (0.01, 0.05, 0.0500001, 59.0, 1000.0):
        lat.observe(s)
    assert lat.count == 5 and sum(lat.buckets) == 5
    assert lat.buckets[0] == 2  # <= 0.05, the bound included
    assert lat.buckets[1] == 1
    assert lat.buckets[LATENCY_BUCKETS.index(60.0)] == 1
    assert lat.buckets[-1] == 1  # over the last bound: +Inf


def test_copy_is_a_snapshot_not_a_view():
    s = LaneStats()
    s.incidents.alone = 1
    s.latency.observe(0.2)
    c = s.copy()
    s.incidents.alone = 9
    s.latency.observe(0.2)
    s.heartbeats_ok = 4
    assert c.incidents.alone == 1 and c.latency.count == 1 and c.heartbeats_ok == 0
