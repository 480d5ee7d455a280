"""A terminal's lane: grouping (first alone, then one summary), the bounded priority queue, deadlines, recovery
tracking and the persisted queue. Pure: time is passed in."""

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from host_client.gateway.events import parse_event, phrase
from host_client.gateway.incident import Incident
from host_client.gateway.lane import Lane, RateLimit
from host_client.gateway.persist import PendingStore
from host_client.gateway.wire import to_alarm, wire_key
from sentinel_core.alarm import NORMAL, P0, P1
from sentinel_core.validate import parse_alarm


def inc(rack, host, kind="NCCL_TIMEOUT", level=P0, recovery=False):
    key = "%s:%s:%s" % (rack, host, kind)
    return Incident(
        key,
        level,
        rack=rack,
        host=host,
        kind=kind,
        text="text %s" % key,
        labels={"rack": rack, "event_type": kind},
        recovery=recovery,
        phrase_zh=phrase(kind, "zh"),
        phrase_en=phrase(kind, "en"),
    )


def drain(lane, now):
    """Deliver everything in queue order; returns the items."""
    out = []
    while True:
        it = lane.next_item(now)
        if it is None:
            return out
        it.inflight = True
        lane.delivered(it, now)
        out.append(it)


def test_first_alone_then_one_summary_per_rack():
    lane = Lane("t", language="en")
    assert lane.submit(inc("A03", "n1"), 0.0) == "alone"
    for i in range(2, 30):
        assert lane.submit(inc("A03", "n%d" % i), 0.1) == "folded"
    items = drain(lane, 1.0)
    assert [x.kind for x in items] == ["alone", "summary"]
    assert items[1].text == "Rack A03, 29 nodes: communication deadlock"
    assert len(items[1].carried) == 28 and items[1].level == P0


def test_cluster_wide_past_the_threshold_absorbs_unsent_rack_summaries():
    lane = Lane("t", language="en", cluster_threshold=3)
    lane.submit(inc("A01", "n1"), 0.0)  # alone
    lane.submit(inc("A01", "n2"), 0.0)  # A01 summary (unsent)
    lane.submit(inc("A02", "n1"), 0.0)  # alone (2nd rack)
    lane.submit(inc("A03", "n1"), 0.0)  # 3rd rack: cluster-wide
    for r in range(4, 40):
        for h in range(12):
            lane.submit(inc("A%02d" % r, "n%d" % h), 0.5)
    items = drain(lane, 1.0)
    # the cluster summary keeps the queue position of the rack summary it absorbed (A01:n2 came before A02:n1)
    assert [x.kind for x in items] == ["alone", "summary", "alone"]
    s = items[1]
    assert s.text == "39 racks, 436 nodes: communication deadlock"
    carried = [k for x in items for k in x.carried]
    assert len(carried) == len(set(carried)) == 3 + 36 * 12 + 1


def test_chinese_summary_text():
    lane = Lane("t", language="zh")
    for r in range(3):
        for h in range(3):
            lane.submit(inc("R%d" % r, "h%d" % h), 0.0)
    items = [x for x in drain(lane, 0.0) if x.kind == "summary"]
    assert len(items) == 1 and len(items[0].carried) == 7
    assert items[0].text == "告警汇总，3 个机架 9 个节点：通信死锁"


def test_newest_summary_replaces_the_unsent_one_and_sent_ones_start_afresh():
    lane = Lane("t", language="en")
    lane.submit(inc("A03", "n1"), 0.0)
    lane.submit(inc("A03", "n2"), 0.0)
    first_id = [x for x in lane.items if x.kind == "summary"][0].id
    lane.submit(inc("A03", "n3"), 0.0)
    summ = [x for x in lane.items if x.kind == "summary"]
    assert (
        len(summ) == 1 and summ[0].id != first_id and summ[0].carried == ["A03:n2:NCCL_TIMEOUT", "A03:n3:NCCL_TIMEOUT"]
    )
    drain(lane, 1.0)
    lane.submit(inc("A03", "n4"), 2.0)  # same window: a new summary with only the new incident
    items = drain(lane, 3.0)
    assert len(items) == 1 and items[0].carried == ["A03:n4:NCCL_TIMEOUT"]
    assert items[0].text == "Rack A03, 4 nodes: communication deadlock"  # counts the whole group


def test_group_closes_after_a_quiet_window():
    lane = Lane("t", window=60)
    assert lane.submit(inc("A03", "n1"), 0.0) == "alone"
    assert lane.submit(inc("A03", "n2"), 59.9) == "folded"
    assert lane.submit(inc("A03", "n3"), 119.8) == "folded"  # window runs from the last incident
    assert lane.submit(inc("A03", "n4"), 179.8) == "alone"


def test_inflight_summary_is_never_changed():
    lane = Lane("t")
    lane.submit(inc("A03", "n1"), 0.0)
    lane.submit(inc("A03", "n2"), 0.0)
    a = lane.next_item(0.0)
    a.inflight = True
    b = lane.next_item(0.0)
    b.inflight = True
    assert b.kind == "summary"
    lane.submit(inc("A03", "n3"), 0.0)
    assert b.carried == ["A03:n2:NCCL_TIMEOUT"]
    c = lane.next_item(0.0)
    assert c.kind == "summary" and c.carried == ["A03:n3:NCCL_TIMEOUT"]


def test_p0_first_then_fifo():
    lane = Lane("t", grouping=False)
    lane.submit(inc("A", "1", "THERMAL", P1), 0.0)
    lane.submit(inc("A", "2", "NCCL_TIMEOUT", P0), 0.0)
    lane.submit(inc("A", "3", "THERMAL", P1), 0.0)
    lane.submit(inc("A", "4", "XID_FATAL", P0), 0.0)
    assert [x.carried[0].split(":")[1] for x in drain(lane, 0.0)] == ["2", "4", "1", "3"]


def test_full_queue_drops_lowest_level_first_and_says_so():
    logs = []
    lane = Lane("t", grouping=False, queue_size=3, log=lambda e, **kw: logs.append((e, kw)))
    lane.submit(inc("A", "1", "THERMAL", P1), 0.0)
    lane.submit(inc("A", "2", "THERMAL", P1), 0.0)
    lane.submit(inc("A", "3", "NCCL_TIMEOUT", P0), 0.0)
    assert lane.submit(inc("A", "4", "NCCL_TIMEOUT", P0), 0.0) == "alone"  # evicts the newest P1
    assert lane.submit(inc("A", "5", "THERMAL", P1), 0.0) == "dropped"  # lowest itself: refused
    assert lane.stats.alarms.dropped_full == 2
    assert [e for e, _ in logs] == ["alarm_dropped", "alarm_dropped"]
    assert "queue full" in logs[0][1]["reason"]
    assert [x.carried[0].split(":")[1] for x in drain(lane, 0.0)] == ["3", "4", "1"]


def test_deadline_expires_undeliverable_alarms_with_a_count():
    logs = []
    lane = Lane("t", deadlines={P1: 10.0}, grouping=False, log=lambda e, **kw: logs.append(e))
    lane.submit(inc("A", "1", "THERMAL", P1), 0.0)
    lane.submit(inc("A", "2", "NCCL_TIMEOUT", P0), 0.0)
    assert lane.next_item(9.9).level == P0
    lane.next_item(10.0)
    assert lane.stats.alarms.expired == 1 and lane.stats.incidents.expired == 1
    assert logs == ["alarm_undeliverable"]
    assert len(lane.items) == 1


def test_recovery_clears_the_alarm_that_told_the_terminal():
    lane = Lane("t", language="en")
    lane.submit(inc("A03", "n1"), 0.0)
    lane.submit(inc("A03", "n2"), 0.0)
    lane.submit(inc("A03", "n3"), 0.0)
    sent = drain(lane, 0.0)
    summary_key = sent[1].key
    assert lane.submit(inc("A03", "n1", recovery=True, level=NORMAL), 5.0) == "recovery"
    r = drain(lane, 5.0)
    assert r[0].level == NORMAL and r[0].key == "A03:n1:NCCL_TIMEOUT"
    assert lane.submit(inc("A03", "n2", recovery=True, level=NORMAL), 6.0) == "recovery_pending"
    assert lane.submit(inc("A03", "n3", recovery=True, level=NORMAL), 6.0) == "recovery"
    r = drain(lane, 6.0)
    assert r[0].key == summary_key and r[0].text == "Training cluster back to normal"


def test_tracked_incidents_age_out_and_memory_is_released():
    lane = Lane("t", track_s=100.0)
    for i in range(3000):
        lane.submit(inc("R%d" % (i % 7), "h%d" % i), i * 0.001)
    drain(lane, 10.0)
    assert len(lane.carrier_of) == 3000 and lane.open
    lane.submit(inc("Z", "late", "THERMAL", P1), 200.0)
    assert len(lane.carrier_of) == 1 and set(lane.open) == {"Z:late:THERMAL"}
    assert len(lane.groups) == 1  # closed groups and their host sets are gone too


def test_rate_limit_token_bucket():
    r = RateLimit(burst=2, interval=5.0)
    assert r.wait(0.0) == 0
    r.take(0.0)
    r.take(0.0)
    assert r.wait(0.0) == pytest.approx(5.0)
    assert r.wait(2.5) == pytest.approx(2.5)
    assert r.wait(5.0) == 0


def test_persistence_round_trip(tmp_path):
    lane = Lane("t")
    lane.submit(inc("A03", "n1"), 0.0)
    lane.submit(inc("A03", "n2"), 0.0)
    lane.submit(inc("B", "n9", "THERMAL", P1), 0.0)
    store = PendingStore(str(tmp_path / "p.json"))
    store.save(lane.snapshot())
    assert not list(tmp_path.glob("*.tmp*"))
    lane2 = Lane("t")
    assert lane2.restore(store.load()) == 3
    a = [(x.id, x.level, x.text, x.carried) for x in drain(lane, 1.0)]
    b = [(x.id, x.level, x.text, x.carried) for x in drain(lane2, 1.0)]
    assert a == b
    lane2.submit(inc("C", "n1"), 2.0)
    assert lane2.items[0].seq > 3  # ids never collide with restored ones


def test_corrupt_store_is_moved_aside(tmp_path):
    p = tmp_path / "p.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        PendingStore(str(p)).load()
    assert (tmp_path / "p.json.corrupt").exists()
    assert PendingStore(str(p)).load() is None


def test_wire_form_is_accepted_by_the_terminal_schema():
    lane = Lane("t")
    long_rack = "R" * 60
    ev = parse_event({"cluster_rack": long_rack, "node_host": "gpu-worker-08", "event_type": "NCCL_TIMEOUT"})
    lane.submit(Incident(ev.key, P0, rack=ev.rack, host=ev.host, kind="NCCL_TIMEOUT", text="字" * 300), 0.0)
    it = lane.next_item(0.0)
    wire = to_alarm(it).to_wire()
    a = parse_alarm(wire)
    assert a.level == P0 and len(a.key.encode()) <= 64 and len(a.text.encode()) <= 400
    assert wire_key(ev.key) == wire_key(ev.key) and wire_key("short") == "short"
    it.text, it.key = "bell\x07 and\ttab", "k\x01"
    a = parse_alarm(to_alarm(it).to_wire())  # sanitised: the terminal would refuse control characters
    assert a.text == "bell  and tab" and a.key == "k?"
    it.text = " \n "
    assert parse_alarm(to_alarm(it).to_wire()).text == "alarm"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 6),
            st.integers(0, 30),
            st.sampled_from(["NCCL_TIMEOUT", "XID_FATAL", "THERMAL"]),
            st.booleans(),
        ),
        min_size=1,
        max_size=120,
    ),
    st.integers(0, 2**31),
)
def test_every_incident_is_carried_exactly_once(events, seed):
    """Whatever the interleaving of arrivals and sends, each incident is in exactly one delivered alarm (the queue
    is big enough not to drop), the stats count each once (alone or folded), and the snapshot stays JSON. (No order
    is checked here: the queue sends by priority, and folding regroups incidents.)"""
    rnd = random.Random(seed)
    lane = Lane("t", queue_size=10_000)
    submitted = []
    delivered = []
    t = 0.0
    for rack, host, kind, send in events:
        t += 0.01
        i = inc("R%d" % rack, "h%d" % host, kind, P1 if kind == "THERMAL" else P0)
        if i.key in submitted:
            continue
        lane.submit(i, t)
        submitted.append(i.key)
        if send and rnd.random() < 0.5:
            it = lane.next_item(t)
            if it is not None:
                it.inflight = True
                lane.delivered(it, t)
                delivered.append(it)
    delivered += drain(lane, t + 1)
    carried = [k for x in delivered for k in x.carried]
    assert sorted(carried) == sorted(submitted)
    assert lane.stats.incidents.alone + lane.stats.incidents.folded == len(submitted)
    json.dumps(lane.snapshot())


def gpu_inc(rack, host, gpu, kind="PCIE_DOWNGRADE", recovery=False, attach=False):
    scope = "%s:%s:%s" % (rack, host, kind)
    i = Incident(
        "%s:gpu%d" % (scope, gpu),
        NORMAL if recovery else P1,
        rack=rack,
        host=host,
        kind=kind,
        text="text",
        labels={"rack": rack, "event_type": kind},
        recovery=recovery,
        phrase_zh=phrase(kind, "zh"),
        phrase_en=phrase(kind, "en"),
    )
    i.scope = scope
    i.attach = attach
    return i


def test_attached_gpu_keeps_the_alarm_open_until_every_gpu_recovered():
    lane = Lane("t", language="en")
    assert lane.submit(gpu_inc("A09", "n1", 3), 0.0) == "alone"
    assert lane.submit(gpu_inc("A09", "n1", 5, attach=True), 1.0) == "attached"
    assert [x.key for x in drain(lane, 1.0)] == ["A09:n1:PCIE_DOWNGRADE:gpu3"]
    assert lane.submit(gpu_inc("A09", "n1", 3, recovery=True), 2.0) == "recovery_pending"
    assert drain(lane, 2.0) == []
    assert lane.submit(gpu_inc("A09", "n1", 5, recovery=True), 3.0) == "recovery"
    (it,) = drain(lane, 3.0)
    assert it.level == NORMAL and it.key == "A09:n1:PCIE_DOWNGRADE:gpu3"
    assert lane.stats.incidents.attached == 1 and not lane.open and not lane.carrier_of


def test_attached_gpu_follows_its_node_into_a_summary_and_a_cluster_fold():
    lane = Lane("t", language="en", cluster_threshold=2)
    lane.submit(gpu_inc("A01", "n0", 0), 0.0)
    lane.submit(gpu_inc("A01", "n1", 0), 0.0)  # folded into rack A01's summary
    assert lane.submit(gpu_inc("A01", "n1", 6, attach=True), 0.0) == "attached"
    lane.submit(gpu_inc("A02", "n2", 0), 0.0)  # second rack: cluster-wide, absorbs A01's
    summary = lane.carrier_of["A01:n1:PCIE_DOWNGRADE:gpu0"][0]
    assert lane.carrier_of["A01:n1:PCIE_DOWNGRADE:gpu6"][0] == summary and "*:*:" in summary
    drain(lane, 0.0)
    assert lane.submit(gpu_inc("A01", "n1", 0, recovery=True), 1.0) in ("recovery_pending",)
    lane.submit(gpu_inc("A02", "n2", 0, recovery=True), 1.0)
    assert lane.submit(gpu_inc("A01", "n1", 6, recovery=True), 1.0) == "recovery"
    (it,) = drain(lane, 1.0)
    assert it.key == summary and it.level == NORMAL


def test_attach_without_a_standing_alarm_is_sent():
    """The terminal shows nothing for that node (its alarm expired, was dropped, or was cleared): the debounced
    GPU is news there."""
    lane = Lane("t", language="en")
    assert lane.submit(gpu_inc("A09", "n1", 5, attach=True), 0.0) == "alone"
    lane2 = Lane("t", language="en", deadlines={P1: 1.0})
    lane2.submit(gpu_inc("A09", "n1", 3), 0.0)
    lane2.expire(5.0)
    assert lane2.submit(gpu_inc("A09", "n1", 5, attach=True), 5.0) in ("alone", "folded")
    assert lane2.stats.incidents.attached == 0 and lane2.depth() == 1


@pytest.mark.parametrize(
    "rack,host,labels,ph_zh,ph_en,scope,attach,ident,recovery",
    [
        ("R001", "gpu-node-00001", {"rack": "R001"}, "通信死锁", "communication deadlock", None, False, "k@1", False),
        ("A03", "n1", {"rack": "A03"}, "温度过高", "overheating", "A03:n1:THERMAL", True, None, False),
        ("", None, {}, None, "", None, False, None, True),  # every falsy value Incident() replaces
    ],
)
def test_gpu_incident_builds_what_the_constructor_builds(
    rack, host, labels, ph_zh, ph_en, scope, attach, ident, recovery
):
    """service.py builds GPU incidents with gpu_incident (no class call): it must set every slot as Incident() does."""
    from host_client.gateway.incident import gpu_incident

    def text():
        return "words"

    want = Incident(
        "k",
        P1,
        rack=rack,
        host=host,
        kind="THERMAL",
        text=text,
        labels=labels,
        source="gpu_event",
        recovery=recovery,
        phrase_zh=ph_zh,
        phrase_en=ph_en,
    )
    want.scope, want.attach, want.ident = scope, attach, ident
    got = gpu_incident("k", P1, rack, host, "THERMAL", text, labels, recovery, ph_zh, ph_en, scope, attach, ident)
    for name in Incident.__slots__:
        assert getattr(got, name) == getattr(want, name), name
