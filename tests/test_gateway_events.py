"""The RFC's semantics, byte for byte: host cleaning, severity, speech templates; plus our validation."""

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from host_client.gateway.events import (
    EVENT_TYPES,
    HANG_TYPES,
    RFC_FIELDS,
    EventError,
    clean_host,
    parse_event,
    severity,
    speech,
)
from sentinel_core.alarm import NORMAL, P0, P1

GO_RE = re.compile(r"-[a-f0-9]{8,10}$")


def go_clean(raw):
    """A literal transcription of the RFC's Go cleanHostIdentifier (RE2 `$` = end of text; cut 25 bytes)."""
    if "\n" in raw:
        m = re.search(r"-[a-f0-9]{8,10}\Z", raw)
        clean = raw[: m.start()] if m else raw
    else:
        clean = GO_RE.sub("", raw)
    b = clean.encode()
    return b[:25].decode() if len(b) > 25 else clean


@pytest.mark.parametrize(
    "raw,want",
    [
        ("gpu-worker-08", "gpu-worker-08"),
        ("gpu-worker-08-a1b2c3d4", "gpu-worker-08"),  # 8 hex
        ("gpu-worker-08-a1b2c3d4e5", "gpu-worker-08"),  # 10 hex
        ("gpu-worker-08-a1b2c3d", "gpu-worker-08-a1b2c3d"),  # 7 hex: kept
        ("gpu-worker-0008-a1b2c3d4e5f", "gpu-worker-0008-a1b2c3d4e"),  # 11 hex: no match, then cut to 25
        ("gpu-worker-08-A1B2C3D4", "gpu-worker-08-A1B2C3D4"),  # upper case is not the hash alphabet
        ("node-abcdefgh", "node-abcdefgh"),  # not hex
        ("a-very-long-training-node-name-0042", "a-very-long-training-node"),
        ("a-very-long-training-node-name-0042-deadbeef", "a-very-long-training-node"),
        ("gpu-01-deadbeef-cafebabe", "gpu-01-deadbeef"),  # only one trailing hash goes
        ("gpu-worker-08-a1b2c3d4\n", "gpu-worker-08-a1b2c3d4\n"),  # RE2 `$` does not match before a newline
    ],
)
def test_clean_host_examples(raw, want):
    assert clean_host(raw) == want
    assert go_clean(raw) == want


@settings(max_examples=300, deadline=None)
@given(st.from_regex(r"[a-z0-9-]{0,40}(-[a-f0-9]{6,12})?", fullmatch=True))
@example("gpu-worker-08-a1b2c3d4e5")
@example("x" * 40)
def test_clean_host_matches_the_go_code_on_ascii(raw):
    assert clean_host(raw) == go_clean(raw)
    assert len(clean_host(raw)) <= 25


def body(**kw):
    d = {
        "cluster_rack": "A03",
        "node_host": "gpu-worker-08",
        "event_type": "NCCL_TIMEOUT",
        "gpu_index": 3,
        "gpu_util": 0.0,
    }
    d.update(kw)
    return {k: v for k, v in d.items() if v is not None}


# The RFC's three templates, written out here character by character (full-width commas U+FF0C, ASCII spaces).
def test_rfc_speech_nccl_exact():
    ev = parse_event(body(node_host="gpu-worker-08-a1b2c3d4"))
    assert speech(ev) == "训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁，全环算力挂起"
    assert "\uff0c" in speech(ev) and "," not in speech(ev)


def test_rfc_speech_xid_exact():
    ev = parse_event(body(event_type="XID_FATAL", gpu_index=5, gpu_util=87.0))
    assert speech(ev) == "硬件致命故障，机架 A03 节点 gpu-worker-08 第 5 号卡发生驱动级报错"


@pytest.mark.parametrize(
    "util,spoken", [(3.4, "3"), (2.5, "2"), (3.5, "4"), (0.0, "0"), (97.6, "98"), (100, "100"), (0.5, "0"), (1.5, "2")]
)
def test_rfc_speech_util_exact_with_go_rounding(util, spoken):
    # Go's %.0f rounds the exact binary value half to even, as Python's % does.
    ev = parse_event(body(event_type="GPU_UTIL_DROP", gpu_util=util))
    assert speech(ev) == "算力水准预警，机架 A03 节点 gpu-worker-08 算力利用率突降至百分之 %s" % spoken


def test_unknown_type_takes_the_rfc_default_branch():
    ev = parse_event(body(event_type="SOMETHING_ELSE", gpu_util=42.0))
    assert speech(ev) == "算力水准预警，机架 A03 节点 gpu-worker-08 算力利用率突降至百分之 42"
    assert severity(ev) == P1
    assert ev.metric_type == "OTHER"
    with pytest.raises(EventError) as e:
        parse_event(body(event_type="SOMETHING_ELSE"), accept_unknown=False)
    assert e.value.code == "unknown_event_type"


def test_debounce_key_is_rack_cleanhost_type():
    ev = parse_event(body(node_host="gpu-worker-08-0123456789"))
    assert ev.key == "A03:gpu-worker-08:NCCL_TIMEOUT"
    assert ev.debounce_key == ev.key


def test_gpu_faults_are_incidents_per_gpu_under_the_rfc_debounce_key():
    a = parse_event(body(event_type="PCIE_DOWNGRADE", gpu_index=3, gpu_util=90.0))
    b = parse_event(body(event_type="PCIE_DOWNGRADE", gpu_index=5, gpu_util=90.0))
    assert (a.key, b.key) == ("A03:gpu-worker-08:PCIE_DOWNGRADE:gpu3", "A03:gpu-worker-08:PCIE_DOWNGRADE:gpu5")
    assert a.debounce_key == b.debounce_key == "A03:gpu-worker-08:PCIE_DOWNGRADE"  # the RFC's, unchanged
    ra = parse_event(body(event_type="RECOVERED", recovers="PCIE_DOWNGRADE", gpu_index=3))
    rb = parse_event(body(event_type="PCIE_DOWNGRADE", gpu_index=5, state="recovered"))
    assert ra.key == a.key and rb.key == b.key and ra.debounce_key != rb.debounce_key
    # node-level types and an unnumbered GPU keep the RFC key as their incident key
    assert parse_event(body(gpu_index=3)).key == "A03:gpu-worker-08:NCCL_TIMEOUT"
    assert parse_event(body(event_type="XID_FATAL", gpu_index=-1)).key == "A03:gpu-worker-08:XID_FATAL"


@pytest.mark.parametrize(
    "etype,util,want",
    [
        ("NCCL_TIMEOUT", 99.0, P0),
        ("XID_FATAL", 99.0, P0),
        ("XID_FATAL", None, P0),
        ("GPU_UTIL_DROP", 4.99, P0),
        ("GPU_UTIL_DROP", 5.0, P1),
        ("GPU_UTIL_DROP", 0.0, P0),
        ("NVLINK_ERROR", 50.0, P1),
        ("NVLINK_ERROR", 1.0, P1),
        ("NVLINK_ERROR", None, P1),
        ("PCIE_DOWNGRADE", 90.0, P1),
        ("THERMAL", 90.0, P1),
        ("XID_WARNING", 90.0, P1),
        # an idle GPU does not turn a warning into a P0: the utilisation rule is the hang rule (issue 11)
        ("XID_WARNING", 0.0, P1),
        ("THERMAL", 2.0, P1),
        ("PCIE_DOWNGRADE", 0.0, P1),
        ("NCCL_NET_ERROR", 0.0, P1),
        ("GPU_LOST", None, P0),
        ("GPU_LOST", 100.0, P0),
        ("PROGRESS_STALL", None, P0),
        ("PROGRESS_STALL", 0.0, P0),
        # issue 24: a job-killing failure is P0 whatever the GPU's utilisation (the process group aborts)
        ("NCCL_PEER_LOST", None, P0),
        ("NCCL_PEER_LOST", 100.0, P0),
        ("NCCL_ERROR", 97.0, P0),
        ("CUDA_ERROR", None, P0),
    ],
)
def test_severity_rule(etype, util, want):
    assert severity(parse_event(body(event_type=etype, gpu_util=util))) == want


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(t for t in EVENT_TYPES if t != "RECOVERED")),
    st.floats(min_value=0, max_value=100, allow_nan=False),
)
def test_severity_property(etype, util):
    ev = parse_event(body(event_type=etype, gpu_util=util))
    want_p0 = (
        etype in ("NCCL_TIMEOUT", "XID_FATAL")
        or (util < 5.0 and etype in HANG_TYPES)
        or EVENT_TYPES[etype]["level"] == P0
    )
    assert (severity(ev) == P0) == want_p0


def test_every_type_has_both_languages_and_a_level():
    for t, spec in EVENT_TYPES.items():
        ev = parse_event(body(event_type=t, gpu_util=50.0, recovers="NCCL_TIMEOUT" if t == "RECOVERED" else None))
        for lang in ("zh", "en"):
            s = speech(ev, lang)
            assert "A03" in s and "gpu-worker-08" in s, (t, lang, s)
        assert spec["level"] in (P0, P1, NORMAL)


def test_recovered_forms():
    ev = parse_event(body(event_type="RECOVERED", recovers="NCCL_TIMEOUT"))
    assert ev.key == "A03:gpu-worker-08:NCCL_TIMEOUT"
    assert severity(ev) == NORMAL
    assert speech(ev) == "机架 A03 节点 gpu-worker-08 已恢复正常"
    ev2 = parse_event(body(event_type="THERMAL", state="recovered"))
    assert ev2.key == "A03:gpu-worker-08:THERMAL:gpu3" and severity(ev2) == NORMAL  # clears that GPU only
    assert ev.debounce_key != ev.key


@pytest.mark.parametrize(
    "b,code,field",
    [
        ([], "bad_body", "object"),
        (body(cluster_rack=None), "missing_field", "cluster_rack"),
        (body(node_host=""), "bad_field", "node_host"),
        (body(node_host=5), "bad_field", "node_host"),
        (body(event_type="nccl timeout"), "bad_field", "event_type"),
        (body(event_type="XID_FATAL", gpu_index=None), "missing_field", "gpu_index"),
        (body(gpu_index=True), "bad_field", "gpu_index"),
        (body(gpu_index=1.0), "bad_field", "gpu_index"),
        (body(gpu_index=5000), "bad_field", "gpu_index"),
        (body(gpu_util="3"), "bad_field", "gpu_util"),
        (body(gpu_util=101), "bad_field", "gpu_util"),
        (body(gpu_util=-1), "bad_field", "gpu_util"),
        (body(event_type="GPU_UTIL_DROP", gpu_util=None), "missing_field", "gpu_util"),
        (body(event_type="RECOVERED"), "missing_field", "recovers"),
        (body(event_type="RECOVERED", recovers="RECOVERED"), "bad_field", "recovers"),
        (body(state="gone"), "bad_field", "state"),
        (body(node_host="gpu\x00x"), "bad_field", "control"),
        (body(node_host="-deadbeef"), "bad_field", "hash suffix"),
        (body(xid=-3), "bad_field", "xid"),
    ],
)
def test_validation_errors_name_the_field(b, code, field):
    with pytest.raises(EventError) as e:
        parse_event(b)
    assert e.value.code == code
    assert field in str(e.value)
    assert 400 <= e.value.status < 500


def test_optional_extras_accepted_and_unknown_ignored():
    ev = parse_event(body(detail="Xid 79 fallen off the bus", xid=79, foo={"bar": 1}))
    assert ev.xid == 79 and ev.detail.startswith("Xid 79")


def test_template_override():
    ev = parse_event(body(event_type="THERMAL", gpu_util=90.0))
    assert speech(ev, "en", {"en": {"THERMAL": "hot {rack}/{host}/{gpu}"}}) == "hot A03/gpu-worker-08/3"
    # a template that names a fact itself gets it where it says, and not again at the end
    ev = parse_event(body(event_type="XID_FATAL", xid=79, action="RESTART_BM", pci="0000:3b:00.0"))
    tpl = {"en": {"XID_FATAL": "{action} now: {rack}/{host} GPU {gpu} XID {xid}"}}
    assert speech(ev, "en", tpl) == (
        "restart the node now: A03/gpu-worker-08 GPU 3 XID 79, GPU fell off the bus; PCI 0000:3b:00.0"
    )


# gpu_index -1: the probe could not number the GPU (its bus is in neither NVML's nor the driver's list). A fatal
# XID must still be accepted, and spoken at node level rather than as "GPU -1".
GPU_TYPES = ["XID_FATAL", "XID_WARNING", "NVLINK_ERROR", "PCIE_DOWNGRADE", "THERMAL"]


def test_unnumbered_fatal_xid_is_accepted_as_p0_with_node_wording():
    ev = parse_event(
        {"cluster_rack": "A03", "node_host": "gpu-1", "event_type": "XID_FATAL", "gpu_index": -1, "gpu_util": None}
    )
    assert ev.level() == P0 and ev.gpu_index == -1
    assert speech(ev) == "硬件致命故障，机架 A03 节点 gpu-1 一张 GPU 卡发生驱动级报错"
    assert speech(ev, "en") == "Rack A03 node gpu-1: fatal hardware fault, a GPU reported a driver-level error"


def test_unnumbered_gpu_named_by_pci_address_in_english():
    ev = parse_event(body(event_type="XID_FATAL", gpu_index=-1, gpu_util=None, pci="PCI:0000:3b:00"))
    assert (
        speech(ev, "en")
        == "Rack A03 node gpu-worker-08: fatal hardware fault, GPU at PCI 0000:3b:00 reported a driver-level error"
    )
    assert speech(ev) == "硬件致命故障，机架 A03 节点 gpu-worker-08 一张 GPU 卡发生驱动级报错，PCI 0000:3b:00"
    # a malformed pci only loses the wording, never the alarm
    ev = parse_event(body(event_type="XID_FATAL", gpu_index=-1, pci="3b; rm -rf /"))
    assert ev.pci is None and "a GPU" in speech(ev, "en")


@pytest.mark.parametrize("etype", GPU_TYPES)
def test_every_gpu_type_accepts_minus_one_and_never_speaks_it(etype):
    ev = parse_event(body(event_type=etype, gpu_index=-1, gpu_util=90.0, pci="0000:58:00.0"))
    for lang in ("zh", "en"):
        text = speech(ev, lang)
        assert "-1" not in text and "A03" in text and "gpu-worker-08" in text
    assert "一张 GPU 卡" in speech(ev)
    assert "PCI 0000:58:00.0" in speech(ev, "en")


@pytest.mark.parametrize("etype", GPU_TYPES)
def test_numbered_gpu_wording_keeps_its_text_and_adds_the_pci_address(etype):
    a = parse_event(body(event_type=etype, gpu_index=5, gpu_util=90.0))
    b = parse_event(body(event_type=etype, gpu_index=5, gpu_util=90.0, pci="0000:58:00"))
    assert speech(b) == speech(a) + "，PCI 0000:58:00"
    assert speech(b, "en") == speech(a, "en") + "; PCI 0000:58:00"
    assert "第 5 号卡" in speech(a) and "GPU 5" in speech(a, "en")


def test_every_known_event_type_matches_the_type_grammar():
    """parse_event checks the grammar only for a type it does not know: so every known one must match it."""
    from host_client.gateway.events import _TYPE_RE, EVENT_TYPES

    assert EVENT_TYPES and all(_TYPE_RE.match(t) for t in EVENT_TYPES)


# ---- parse_event's fast path (the storm's five-field body, rack and host seen before) against the full path ----


def _storm_body(i):
    """bench/bench_gateway_rfc.py's storm body for request i (its wrk script, transcribed)."""
    node, gpu = (i // 8) % 12500, i % 8
    k = node % 100
    kind, util = (
        ("NCCL_TIMEOUT", 100.0)
        if k < 70
        else ("GPU_UTIL_DROP", (node % 4) * 1.0)
        if k < 95
        else ("XID_FATAL", 0.0)
        if k < 98
        else ("THERMAL", 97.0)
    )
    host = "gpu-node-%05d-%08x" % (node, node * 2654435761 % 2**32)
    return {
        "cluster_rack": "R%03d" % (node % 125),
        "node_host": host,
        "event_type": kind,
        "gpu_index": gpu,
        "gpu_util": util,
    }


def _probe_body(**kw):
    """What host_client/probes/events.py sends: the five fields plus state, detail, key, event_id, ts."""
    b = body(
        event_type="XID_FATAL",
        gpu_index=2,
        gpu_util=37.5,
        state="firing",
        detail="NVRM: Xid (PCI:0000:3b:00): 79",
        xid=79,
        pci="PCI:0000:3b:00",
        key="gpu-worker-08:xid:79:2",
        event_id="a1b2-7",
        ts=1764590000.25,
    )
    b.update(kw)
    return b


# Real bodies (the bench's, a probe's) and hostile ones one change away from the fast path's shape: every key of
# the five missing or null, each value of a wrong type, out of range, or text _string refuses or words specially.
_TEXTS = [
    "A03",
    "R001",
    "gpu-node-00042-a1b2c3d4",
    "-deadbeef",
    "",
    " ",
    "\t\n",
    "a\x00b",
    "a\x7fb",
    "a\x1fb",
    "a\u00a0b",
    "a\u2028b",
    "机架七",
    "x" * 64,
    "x" * 65,
    "y" * 253,
    "y" * 254,
    "NCCL_TIMEOUT",
    "RECOVERED",
    "nccl timeout",
    "FOO_BAR",
    "\ud800",
]
_VALUES = _TEXTS + [
    None,
    True,
    False,
    0,
    1,
    -1,
    -2,
    1023,
    1024,
    3.0,
    -0.0,
    0.0,
    4.99,
    5.0,
    100.0,
    100.5,
    -0.5,
    float("nan"),
    float("inf"),
    [],
    [1],
    {},
    {"a": 1},
]
_FIELDS = ["cluster_rack", "node_host", "event_type", "gpu_index", "gpu_util"]
_EXTRA = ["state", "recovers", "detail", "xid", "pci", "ts", "component", "after_type", "after_component", "foo"]
DIFF_BODIES = (
    [_storm_body(i) for i in (0, 1, 7, 8, 560, 561, 760, 785, 99999)]
    + [
        _probe_body(),
        _probe_body(state="recovered"),
        _probe_body(event_type="RECOVERED", recovers="XID_FATAL"),
        _probe_body(gpu_index=-1, pci="0000:3b:00.0"),
        [],
        "x",
        None,
    ]
    + [dict(_storm_body(1), **{f: v}) for f in _FIELDS for v in _VALUES]
    + [{k: v for k, v in _storm_body(1).items() if k != f} for f in _FIELDS]
    + [dict(_storm_body(1), **{f: v}) for f in _EXTRA for v in (None, "recovered", "firing", 79, 1.5)]
    + [dict(_storm_body(1), gpu_index=3, gpu_util=1), dict(_storm_body(1), gpu_util=50)]
)


def _outcome(fn, b, **kw):
    """Everything parse_event gives for a body: the Event's every attribute (value and type), or the error."""
    from host_client.gateway.events import Event

    try:
        ev = fn(b, **kw)
    except EventError as e:
        return ("error", e.code, str(e), e.status)
    return tuple((a, type(getattr(ev, a)).__name__, repr(getattr(ev, a))) for a in Event.__slots__)


def _check_same(b, accept_unknown=True):
    from host_client.gateway import events

    def full(x, accept_unknown):
        return events._parse_full(x, accept_unknown)

    primer = dict(_storm_body(0))
    if isinstance(b, dict):
        for f in ("cluster_rack", "node_host"):
            if isinstance(b.get(f), str):
                primer[f] = b[f]
    # cold memos, then warmed by the body itself, then by another event of the same rack and host
    for warm in (None, b, primer):
        events._RACKS.clear()
        events._HOSTS.clear()
        if warm is not None:
            try:
                events._parse_full(warm, True)
            except EventError:
                pass
        racks, hosts = dict(events._RACKS), dict(events._HOSTS)
        want = _outcome(full, b, accept_unknown=accept_unknown)
        events._RACKS.clear()
        events._HOSTS.clear()
        events._RACKS.update(racks)
        events._HOSTS.update(hosts)
        got = _outcome(events.parse_event, b, accept_unknown=accept_unknown)
        assert got == want, (b, warm)


@pytest.mark.parametrize("b", DIFF_BODIES)
@pytest.mark.parametrize("accept_unknown", [True, False])
def test_fast_path_gives_what_the_full_path_gives(b, accept_unknown):
    _check_same(b, accept_unknown)


def test_fast_path_is_taken_for_the_storm_body(monkeypatch):
    """Else the comparison above proves nothing: the bench's body, rack and host seen, never reaches _parse_full."""
    from host_client.gateway import events

    parse_event(_storm_body(127 * 8))  # node 127: rack R002, seen
    monkeypatch.setattr(events, "_parse_full", lambda *a: pytest.fail("took the full path"))
    for i in range(16, 24):  # a new node: its first event checks the host inline, the rest hit the memo
        assert parse_event(_storm_body(i)).key.startswith("R002:gpu-node-00002")


def _table_bodies():
    """Bodies made from the one table of the RFC's fields (events.RFC_FIELDS) and the type table (EVENT_TYPES):
    each field at each bound, one past it and of a neighbouring type; every known type as a storm body, numbered
    and unnumbered. A limit or a type changed in the tables changes these bodies with it."""
    out = []
    for name, (kind, low, high) in RFC_FIELDS.items():
        if kind is str:
            values = ["x" * n for n in (low - 1, low, high, high + 1)] + [1, None]
        elif kind is int:
            values = [low - 1, low, 0, high, high + 1, float(high), True, "1"]
        else:
            values = [low - 0.5, low, high, high + 0.5, int(high), float("nan"), "1.0", None]
        out += [dict(_storm_body(1), **{name: v}) for v in values]
    for etype in EVENT_TYPES:
        out += [dict(_storm_body(1), event_type=etype), dict(_storm_body(1), event_type=etype, gpu_index=-1)]
    return out


@pytest.mark.parametrize("b", _table_bodies())
@pytest.mark.parametrize("accept_unknown", [True, False])
def test_fast_path_gives_what_the_full_path_gives_on_the_tables(b, accept_unknown):
    _check_same(b, accept_unknown)


@pytest.mark.parametrize("etype", sorted(set(EVENT_TYPES) - {"RECOVERED"}))
def test_fast_path_is_taken_for_every_known_type(etype, monkeypatch):
    """A type added to EVENT_TYPES takes the fast path too (and so the comparison above covers it)."""
    from host_client.gateway import events

    parse_event(_storm_body(1))
    monkeypatch.setattr(events, "_parse_full", lambda *a: pytest.fail("took the full path"))
    high = RFC_FIELDS["gpu_index"][2]
    assert parse_event(dict(_storm_body(1), event_type=etype, gpu_index=high)).event_type == etype


_TEXT_OR_VALUE = st.one_of(
    st.sampled_from(_VALUES), st.text(max_size=12), st.integers(-3, 1030), st.floats(-2.0, 102.0), st.floats()
)


@st.composite
def _near_storm(draw):
    b = _storm_body(draw(st.integers(0, 100_000)))
    for f in draw(st.lists(st.sampled_from(_FIELDS), max_size=2)):
        b.pop(f, None)
    b.update(draw(st.dictionaries(st.sampled_from(_FIELDS + _EXTRA), _TEXT_OR_VALUE, max_size=3)))
    return b


@settings(max_examples=300, deadline=None)
@given(_near_storm(), st.booleans())
def test_fast_path_gives_what_the_full_path_gives_property(b, accept_unknown):
    _check_same(b, accept_unknown)


@pytest.mark.parametrize(
    "etype,zh,en",
    [
        (
            "NCCL_PEER_LOST",
            "训练集群紧急预警，机架 A03 节点 gpu-worker-08 集合通信对端失联，训练任务中断",
            "Rack A03 node gpu-worker-08: training cluster emergency, a communication peer is lost, the job is "
            "aborting",
        ),
        (
            "NCCL_ERROR",
            "训练集群紧急预警，机架 A03 节点 gpu-worker-08 集合通信库报错，训练任务中断",
            "Rack A03 node gpu-worker-08: training cluster emergency, collective communication error, the job aborts",
        ),
        (
            "CUDA_ERROR",
            "训练任务致命错误，机架 A03 节点 gpu-worker-08 发生 CUDA 致命错误，训练任务中断",
            "Rack A03 node gpu-worker-08: fatal CUDA error, the job is aborting",
        ),
    ],
)
def test_job_killing_failure_types_speak_at_node_level(etype, zh, en):
    # issue 24: the probe sends them with gpu_index -1 (a rank names a process, not a device) and the rank/peer extras
    ev = parse_event(body(event_type=etype, gpu_index=-1, gpu_util=None, rank=3, peer="10.0.0.2<45763>"))
    assert (speech(ev), speech(ev, "en"), severity(ev)) == (zh, en, P0)


def test_texts_with_every_fact_fit_one_alarm_body_and_lead_english_labels_with_the_place():
    """The longest rack and host a body may carry (after cleaning), every fact: the text still fits the terminal's
    400-byte text field (sentinel_core.validate), so wire_text never cuts the action off; an English text's first
    32 characters (the matrix label) start with the rack and the node."""
    from host_client import vocabulary
    from host_client.gateway.events import Event
    from sentinel_core.validate import TEXT_MAX_BYTES

    longest_meaning = max(vocabulary.XID_MEANING, key=lambda x: len(vocabulary.XID_MEANING[x][0].encode()))
    longest_action = max(
        (a for a in vocabulary.ACTIONS if vocabulary.ACTIONS[a]), key=lambda a: len(vocabulary.ACTIONS[a][0])
    )
    for etype in vocabulary.TYPES:
        if etype == "RECOVERED":
            continue
        for gpu in (1023, -1):
            ev = Event(
                "R" * 20,
                "h" * 25,
                etype,
                gpu_index=gpu,
                gpu_util=100.0,
                xid=longest_meaning,
                action=longest_action,
                pci="0000:3b:00.0",
            )
            for lang in ("zh", "en"):
                assert len(speech(ev, lang).encode()) <= TEXT_MAX_BYTES - 100, (etype, lang)
            ev = Event("A03", "gpu-worker-08", etype, gpu_index=gpu, gpu_util=1.0, xid=79, action="RESTART_BM")
            assert speech(ev, "en")[:32].startswith("Rack A03 node gpu-worker-08"), etype


def test_a_fabric_part_is_named_in_its_text_and_is_its_own_incident():
    """Issue 35: the part a fabric / hardware type names (its "component") is spoken and keys the incident, so port
    mlx5_5 recovering cannot clear mlx5_3; a malformed or missing one speaks the node-level wording, never refused."""
    b = body(event_type="IB_PORT_DOWN", gpu_index=-1, gpu_util=None, component="mlx5_3/2")
    ev = parse_event(b)
    assert (ev.key, severity(ev)) == ("A03:gpu-worker-08:IB_PORT_DOWN:mlx5_3/2", P0)
    assert speech(ev) == "网络致命故障，机架 A03 节点 gpu-worker-08 InfiniBand 端口 mlx5_3/2 断开"
    assert speech(ev, "en") == "Rack A03 node gpu-worker-08: fatal network fault, InfiniBand port mlx5_3/2 is down"
    assert parse_event(dict(b, component="mlx5_5/1")).key == "A03:gpu-worker-08:IB_PORT_DOWN:mlx5_5/1"
    rec = parse_event(dict(b, state="recovered"))
    assert rec.key == ev.key and speech(rec, "en") == "Rack A03 node gpu-worker-08: recovered, back to normal"
    for bad in ("mlx5_3\t", "x" * 41, 7, ""):
        ev2 = parse_event(dict(b, component=bad))
        assert ev2.key == "A03:gpu-worker-08:IB_PORT_DOWN", bad
        assert speech(ev2, "en") == "Rack A03 node gpu-worker-08: fatal network fault, an InfiniBand port is down"
    # a [templates] override may name {component} (vocabulary.FIELDS); without a component the built-in node wording
    tpl = {"en": {"IB_PORT_DOWN": "{host}: port {component} down"}}
    assert speech(ev, "en", tpl) == "gpu-worker-08: port mlx5_3/2 down"
    assert speech(parse_event(dict(b, component=None)), "en", tpl).endswith("an InfiniBand port is down")


def test_a_hang_after_a_fabric_warning_says_where_to_look_first():
    b = body(event_type="PROGRESS_STALL", gpu_index=-1, gpu_util=None)
    after = dict(b, after_type="OPTICS_WARNING", after_component="mlx5_5")
    ev = parse_event(after)
    assert speech(ev) == "训练进度停滞，机架 A03 节点 gpu-worker-08 训练步数停止增长，此前网卡端口 mlx5_5 光模块误码"
    assert speech(ev, "en") == (
        "Rack A03 node gpu-worker-08: training stalled, no progress, after optical-module bit errors on port mlx5_5"
    )
    assert ev.key == parse_event(b).key  # the clause words the alarm; the incident is the hang's
    # only the fabric's warnings, and a short part name; anything else is ignored, never refused
    bad_afters = ({"after_type": "XID_FATAL"}, {"after_type": ["OPTICS_WARNING"]}, {"after_component": "mlx5_5\n"})
    for bad in bad_afters + ({"after_component": None}, {"after_component": {}}):
        assert speech(parse_event(dict(after, **bad))) == "训练进度停滞，机架 A03 节点 gpu-worker-08 训练步数停止增长"
    # facts the hang carries still follow, after the clause
    assert speech(parse_event(dict(after, xid=79)), "en").endswith("on port mlx5_5; XID 79, GPU fell off the bus")
