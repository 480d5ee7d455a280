"""grouping.py on its own: where each incident goes (alone, folded, cluster-wide), the window, and the wording."""

from test_gateway_lane import inc

from host_client.gateway.grouping import Grouping, Placement, summary_text
from sentinel_core.alarm import P0


def test_first_alone_then_folded_within_the_window_then_alone_again_after_it():
    g = Grouping(window=60.0)
    place, group, absorbed = g.place(inc("A03", "n1"), 0.0)
    assert place is Placement.ALONE and absorbed == () and group.racks == {"A03"}
    place, same, _ = g.place(inc("A03", "n2"), 10.0)
    assert place is Placement.FOLD and same is group
    group.last = 10.0  # the lane stamps the group's last incident
    assert g.place(inc("A03", "n3"), 69.0)[0] is Placement.FOLD
    assert g.place(inc("A03", "n4"), 70.0)[0] is Placement.ALONE  # 60 s after the last: a new group


def test_the_third_rack_of_a_kind_goes_cluster_wide_absorbing_the_open_racks():
    g = Grouping(window=60.0, cluster_threshold=3)
    a = g.place(inc("A01", "n1"), 0.0)[1]
    b = g.place(inc("A02", "n1"), 1.0)[1]
    place, cluster, absorbed = g.place(inc("A03", "n1"), 2.0)
    assert place is Placement.CLUSTER and cluster.cluster and set(absorbed) == {a, b}
    assert cluster.racks == {"A01", "A02"}
    assert g.place(inc("A04", "n1"), 3.0) == (Placement.FOLD, cluster, ())
    # another kind is grouped on its own
    assert g.place(inc("A01", "n1", kind="THERMAL"), 3.0)[0] is Placement.ALONE


def test_recoveries_never_share_a_group_with_faults():
    g = Grouping()
    g.place(inc("A03", "n1"), 0.0)
    assert g.place(inc("A03", "n1", recovery=True), 1.0)[0] is Placement.ALONE


def test_summary_wording_in_both_languages():
    g = Grouping()
    group = g.place(inc("A03", "n1"), 0.0)[1]
    group.count(inc("A03", "n2"))
    assert summary_text(group, "en") == "Rack A03, 2 nodes: communication deadlock"
    assert summary_text(group, "zh") == "告警汇总，机架 A03 共 2 个节点：通信死锁"
    assert group.level == P0 and group.summary_key(7) == "A03:*:NCCL_TIMEOUT#7"


def test_closed_groups_are_pruned():
    g = Grouping(window=5.0)
    g.place(inc("A03", "n1"), 0.0)
    g.place(inc("B01", "n1", kind="THERMAL"), 0.0)
    assert len(g.groups) == 2
    g.prune(10.0)
    assert g.groups == {} and g.cluster_bases == {}
