"""Replayed real log formats -> exactly the expected parsed records (XID, NCCL watchdog, nvidia-smi CSV)."""

import os

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from host_client.probes import events, nccl, xid
from host_client.probes.gpu_source import SEED_FIELDS, SourceError, parse_smi_csv

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "probes")


def lines(name):
    with open(os.path.join(FIX, name), encoding="utf-8") as f:
        return f.read().splitlines()


# --- XID ---------------------------------------------------------------------------------------------------------


def test_kernel_log_replay_gives_exact_xids():
    got = [(x.xid, x.pci, x.severity) for x in map(xid.parse, lines("kernel.log")) if x is not None]
    assert got == [
        (79, (0, 0x3B, 0), "fatal"),  # kmsg record with Xid
        (79, (0, 0x3B, 0), "fatal"),  # "fallen off the bus" without Xid counts as 79
        (13, (0, 0x65, 0), "warning"),
        (48, (0, 0xB3, 0), "fatal"),  # journalctl -k form
        (94, (0, 0x18, 0), "warning"),  # dmesg form; contained ECC: the catalogue says RESTART_APP
        (94, (0, 0x18, 0), "warning"),
        (61, (0, 0xDB, 0), "unclassified"),
    ]


def test_xid_message_and_finding():
    x = xid.parse(lines("kernel.log")[3])
    assert x.message.endswith("GPU has fallen off the bus.")
    f = xid.finding(x, 2)
    assert f.event_type == events.XID_FATAL and f.gpu_index == 2
    assert f.detail == "XID 79 (fatal): GPU has fallen off the bus."
    assert f.extra["xid"] == 79 and f.extra["pci"] == "0000:3b:00"
    w = xid.finding(xid.parse(lines("kernel.log")[6]), 1)
    assert w.event_type == events.XID_WARNING
    assert w.detail.startswith("XID 13 (warning): Graphics Exception: ESR 0x405840=0x1000000")


# NVIDIA's XID catalogue, immediate action: RESET_GPU / RESTART_BM / RESTART_VM / the DBE and NVLink workflows are
# fatal; RESTART_APP / IGNORE / the XID 45 workflow are warnings; codes it does not list are unclassified.
@pytest.mark.parametrize(
    "n,sev",
    [
        (48, "fatal"),
        (62, "fatal"),
        (63, "warning"),
        (64, "fatal"),
        (74, "fatal"),
        (79, "fatal"),
        (94, "warning"),
        (95, "fatal"),
        (119, "fatal"),
        (120, "fatal"),
        (140, "fatal"),
        (143, "fatal"),
        (144, "fatal"),
        (150, "fatal"),
        (151, "fatal"),
        (109, "fatal"),
        (46, "fatal"),
        (13, "warning"),
        (31, "warning"),
        (43, "warning"),
        (45, "warning"),
        (68, "warning"),
        (92, "warning"),
        (61, "unclassified"),
        (999, "unclassified"),
    ],
)
def test_xid_table(n, sev):
    assert xid.classify(n) == sev


@pytest.mark.parametrize(
    "msg,sev",
    [
        ("SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x00000000)", "warning"),
        ("NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000)", "fatal"),
        ("NETIR Error (an older driver that does not mark it)", "fatal"),
    ],
)
def test_nvlink5_sub_events_follow_the_drivers_own_mark(msg, sev):
    assert xid.classify(146, msg) == sev


@pytest.mark.parametrize(
    "msg,sev",
    [
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "fatal"),
        ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "fatal"),
        ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", None),
    ],
)
def test_xid_154_is_judged_by_the_action_it_asks_for(msg, sev):
    assert xid.classify(154, msg) == sev


def test_pci_key_forms_agree():
    assert xid.pci_key("PCI:0000:3b:00") == xid.pci_key("00000000:3B:00.0") == xid.pci_key("0000:3b:00.0")
    assert xid.pci_key("3b:00") == (0, 0x3B, 0)
    assert xid.pci_key("zz:yy") is None and xid.pci_key(None) is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
@example("NVRM: Xid (PCI:0000:3b:00): 79,")
@example("NVRM: Xid (PCI:): 1,")
@example("1,2,3,-;NVRM: GPU at PCI:zz: fallen off the bus")
def test_xid_parse_never_raises(text):
    x = xid.parse(text)
    if x is not None:
        assert x.severity in ("fatal", "warning", "unclassified")
    kl = xid.KernelLog()
    for part in text.split("\n"):
        kl.feed(part)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 999), st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.sampled_from(["", "4,1,2,-;", "[ 1.5] "]))
def test_xid_roundtrip(n, domain, bus, prefix):
    line = "%sNVRM: Xid (PCI:%04x:%02x:00): %d, pid=1, name=x, text" % (prefix, domain, bus, n)
    x = xid.parse(line)
    if n == xid.RECOVERY_ACTION:
        assert x.severity == "warning"  # a 154 whose action cannot be read: still worth a look
    assert (x.xid, x.pci) == (n, (domain, bus, 0))


# --- NCCL -----------------------------------------------------------------------------------------------------------

_NCCL_FIELDS = ("form", "rank", "seq", "op", "timeout_ms", "ran_ms", "pg", "last_enqueued", "last_completed")


def test_nccl_torch2_replay():
    got = [
        {k: t.as_dict()[k] for k in _NCCL_FIELDS} for t in map(nccl.parse, lines("nccl_torch2.log")) if t is not None
    ]
    assert got == [
        {
            "form": "watchdog",
            "rank": 0,
            "seq": 1580,
            "op": "ALLREDUCE",
            "timeout_ms": 600000,
            "ran_ms": 600060,
            "pg": None,
            "last_enqueued": None,
            "last_completed": None,
        },
        {
            "form": "watchdog",
            "rank": 3,
            "seq": 1580,
            "op": "ALLREDUCE",
            "timeout_ms": 600000,
            "ran_ms": 600061,
            "pg": None,
            "last_enqueued": None,
            "last_completed": None,
        },
        {
            "form": "pg_status",
            "rank": 0,
            "seq": 1580,
            "op": None,
            "timeout_ms": None,
            "ran_ms": None,
            "pg": "default_pg",
            "last_enqueued": 1581,
            "last_completed": 1579,
        },
    ]


def test_nccl_torch1_replay():
    got = [
        {k: t.as_dict()[k] for k in _NCCL_FIELDS} for t in map(nccl.parse, lines("nccl_torch1.log")) if t is not None
    ]
    assert got == [
        {
            "form": "watchdog",
            "rank": 1,
            "seq": 469508,
            "op": "ALLREDUCE",
            "timeout_ms": 1800000,
            "ran_ms": 1802212,
            "pg": None,
            "last_enqueued": None,
            "last_completed": None,
        },
        {
            "form": "pg_status",
            "rank": 5,
            "seq": 120049,
            "op": None,
            "timeout_ms": None,
            "ran_ms": None,
            "pg": "default_pg",
            "last_enqueued": 120051,
            "last_completed": 120048,
        },
    ]


def test_nccl_finding_text():
    t = nccl.parse(lines("nccl_torch2.log")[3])
    f = nccl.finding(t, "/var/log/train/rank0.log")
    assert f.event_type == events.NCCL_TIMEOUT and f.gpu_index == events.NODE_WIDE
    assert f.key == ("nccl", "/var/log/train/rank0.log", 0, 1580, "ALLREDUCE")
    assert f.detail == "rank 0: ALLREDUCE seq 1580 timed out after 600060 ms (timeout 600000 ms)"
    assert f.extra["op"] == "ALLREDUCE" and f.extra["timeout_ms"] == 600000


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 4095),
    st.integers(0, 10**9),
    st.sampled_from(["ALLREDUCE", "ALLGATHER", "BROADCAST", "REDUCE_SCATTER", "_ALLGATHER_BASE"]),
    st.integers(1, 10**7),
    st.booleans(),
)
def test_nccl_watchdog_roundtrip(rank, seq, op, timeout, new):
    numel = "NumelIn=12, NumelOut=12, " if new else ""
    prefix = (
        "[rank%d]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] " % rank
        if new
        else "[E ProcessGroupNCCL.cpp:737] "
    )
    line = (
        "%s[Rank %d] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=%d, OpType=%s, %s"
        "Timeout(ms)=%d) ran for %d milliseconds before timing out."
        % (prefix, rank, seq, op, numel, timeout, timeout + 7)
    )
    t = nccl.parse(line)
    assert (t.rank, t.seq, t.op, t.timeout_ms, t.ran_ms) == (rank, seq, op, timeout, timeout + 7)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
@example("Watchdog caught collective operation timeout: WorkNCCL() ran for 5 milliseconds")
@example("[PG ID 0 PG GUID 0 Rank 1]  failure detected by watchdog at work sequence id: 3")
def test_nccl_parse_never_raises(text):
    nccl.parse(text)


# --- nvidia-smi CSV -----------------------------------------------------------------------------------------------


def test_smi_full_csv():
    with open(os.path.join(FIX, "smi_full.csv")) as f:
        devices, readings = parse_smi_csv(f.read())
    assert [d["index"] for d in devices] == [0, 1, 2, 3, 4, 5]
    assert devices[2]["max_gen"] == 4 and devices[3]["pci"] == (0, 0x5D, 0)
    assert readings[0] == {
        "index": 0,
        "gen": 1,
        "width": 16,
        "pstate": 8,
        "temp": 34,
        "util": 0,
        "mem_util": None,
        "power_w": None,
        "pcie_mbps": None,
        "procs": None,
        "nvlink": {},
        "lost": False,
        "error": None,
    }
    assert (readings[3]["gen"], readings[3]["width"], readings[3]["pstate"]) == (3, 4, 0)
    assert readings[5]["gen"] is None and devices[5]["max_gen"] == 4  # [N/A]: unknown, seed's expectation


def test_smi_seed_csv():
    with open(os.path.join(FIX, "smi_seed.csv")) as f:
        devices, readings = parse_smi_csv(f.read(), SEED_FIELDS)
    assert (devices[0]["max_gen"], devices[0]["max_width"]) == (4, 16)
    assert readings[3]["width"] == 4 and readings[4]["temp"] == 84 and readings[0]["pstate"] is None


@pytest.mark.parametrize(
    "text,msg",
    [
        ("0, 00000000:18:00.0, 1\n", "line 1 has 3 fields, expected 9"),
        ("x, 00000000:18:00.0, 1, 16, 34, 0, P8, 5, 16\n", "bad GPU index"),
    ],
)
def test_smi_bad_csv(text, msg):
    with pytest.raises(SourceError, match=msg):
        parse_smi_csv(text)


_KERNEL = lines("kernel.log")
_NCCL = lines("nccl_torch1.log") + lines("nccl_torch2.log")
_PREFIX = st.sampled_from(
    [
        "",
        "Nov 29 20:41:07 gpu-worker-08 kernel: ",
        "[ 9231.774512] ",
        "4,2210,812344001,-;",
        "[Sun Nov 29 20:41:07 2026] ",
        "2026-11-29T20:41:07.1+00:00 node kernel: ",
    ]
)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_KERNEL), _PREFIX, st.sampled_from(["", "\n", "\r\n"]))
def test_xid_fixture_lines_parse_the_same_in_any_log_wrapper(line, prefix, end):
    bare = xid.parse(xid._strip_kmsg(line).split("kernel: ")[-1].split("] ", 1)[-1])
    got = xid.parse(prefix + xid._strip_kmsg(line) + end)
    assert (got is None) == (bare is None)
    if got is not None:
        assert (got.xid, got.pci, got.severity) == (bare.xid, bare.pci, bare.severity)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_NCCL), st.sampled_from(["", "2026-11-29 02:07:08 ", "stderr: ", "[default0]:"]))
def test_nccl_fixture_lines_parse_the_same_with_launcher_prefixes(line, prefix):
    a, b = nccl.parse(line), nccl.parse(prefix + line)
    assert (a is None) == (b is None)
    if a is not None:
        assert a.as_dict() == b.as_dict()


@pytest.mark.parametrize(
    "text",
    [
        "Heartbeat monitor timed out! Process will be terminated after dumping debug info.",
        "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress",
        "Terminating the process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.",
    ],
)
def test_stuck_watchdog_forms_are_one_incident_per_rank(text):
    log = nccl.NcclLog()
    t = log.feed("[rank6]:[F429 14:03:49.385461578 ProcessGroupNCCL.cpp:1554] [PG 0 Rank 6] " + text, "job.log")
    assert (t.form, t.rank) == ("watchdog_stuck", 6)
    assert nccl.key(t, "job.log") == ("nccl", "job.log", 6, None, "watchdog_stuck")
