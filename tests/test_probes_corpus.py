"""The real-world corpus (tests/fixtures/probes/corpus.jsonl): lines and tool output people posted publicly, each with
its source URL, and per line the exact event the probe sends (type, code, severity, GPU/PCI id, rank) or none.

The severity is checked twice: the probe's table (events.LEVELS) and what the gateway makes of the event's body on an
idle GPU (utilisation 0 %: the RFC's rule must raise only hangs)."""

import json
import os

import pytest

from host_client.gateway.events import EVENT_TYPES, parse_event, severity
from host_client.probes import events, nccl, xid
from host_client.probes.gpu_checks import GpuChecker
from host_client.probes.gpu_source import SourceError, parse_smi_csv
from sentinel_core.alarm import P0, P1

CORPUS = os.path.join(os.path.dirname(__file__), "fixtures", "probes", "corpus.jsonl")
ENTRIES = [json.loads(line) for line in open(CORPUS, encoding="utf-8")]
LEVEL = {"P0": P0, "P1": P1}


def findings(entry):
    kind, line = entry["kind"], entry["line"]
    if kind == "kernel":
        x = xid.parse(line)
        return [] if x is None else [(xid.finding(x, events.NODE_WIDE), x.xid)]
    if kind == "nccl":
        # a multi-line entry (the launcher's summary) is fed line by line through one log, as the follower would;
        # the daemon sends a key once (Oneshots), so repeats of a key are one event
        log, out, keys = nccl.NcclLog(), [], set()
        for i, part in enumerate(line.split("\n")):
            f = log.finding(part, "/var/log/train/job.log", now=i * 0.01)
            if f is not None and f.key not in keys:
                keys.add(f.key)
                out.append((f, f.extra.get("seq")))
        return out
    if kind == "smi":
        try:
            devices, readings = parse_smi_csv(line + "\n")
        except SourceError:
            return []
        return [(f, None) for f in GpuChecker(devices).check(readings, 0.0)]
    raise AssertionError("unknown kind %r" % kind)


def describe(f, code):
    gpu = f.extra.get("pci") if f.event_type != events.GPU_LOST else f.extra.get("bus_id")
    out = {
        "type": f.event_type,
        "code": code,
        "severity": events.LEVELS[f.event_type],
        "gpu": gpu,
        "rank": f.extra.get("rank"),
    }
    if f.event_type == events.NCCL_PEER_LOST:
        out["peer"] = f.extra.get("peer")  # the dead or unreachable end, when the line names it
    if f.extra.get("gpu_instance") is not None:
        out["instance"] = f.extra["gpu_instance"]  # a MIG GPU instance
    return out


JOB_KILLING = (
    events.NCCL_PEER_LOST,
    events.NCCL_ERROR,
    events.CUDA_ERROR,
    events.PROGRAM_ERROR,
    events.JOB_FAILED,
    events.RENDEZVOUS_FAILED,
)


def test_corpus_is_big_varied_and_sourced():
    assert len(ENTRIES) >= 200
    # issue 24: the job-killing failures that are not timeouts, and lines that must stay quiet, each from the field
    assert sum(1 for e in ENTRIES if e["expect"] and e["expect"]["type"] in JOB_KILLING) >= 50
    assert sum(1 for e in ENTRIES if not e["expect"]) >= 50
    assert {e["expect"]["type"] for e in ENTRIES if e["expect"]} >= set(JOB_KILLING)
    assert len({e["line"] for e in ENTRIES}) == len(ENTRIES)
    assert all(e["source"].startswith("https://") for e in ENTRIES)
    codes = {e["expect"]["code"] for e in ENTRIES if e["kind"] == "kernel" and e["expect"]}
    assert len(codes) >= 15
    assert sum(1 for e in ENTRIES if "AER" in e["line"] or "PCIe Bus Error" in e["line"]) >= 6
    assert {e["kind"] for e in ENTRIES} == {"kernel", "nccl", "smi"}


def test_issue36_lines_of_every_class_each_with_its_document():
    """Issue 36: >= 120 new public lines, each naming the document its expectation comes from; >= 60 of them healthy
    chatter; every class the issue names is there (P0 and P1 CUDA, NCCL, peer, launcher, rendezvous)."""
    new = [e for e in ENTRIES if "doc" in e]
    assert len(new) >= 120
    assert sum(1 for e in new if not e["expect"]) >= 60
    assert {e["expect"]["type"] for e in new if e["expect"]} >= {
        events.CUDA_ERROR,
        events.PROGRAM_ERROR,
        events.NCCL_ERROR,
        events.NCCL_PEER_LOST,
        events.JOB_FAILED,
        events.RENDEZVOUS_FAILED,
    }
    assert all(e["doc"].startswith(("https://", "docs/")) for e in new)


@pytest.mark.parametrize("entry", ENTRIES, ids=["%d-%s" % (i, e["kind"]) for i, e in enumerate(ENTRIES)])
def test_corpus_line_gives_exactly_its_event(entry):
    got = [describe(f, code) for f, code in findings(entry)]
    want = [entry["expect"]] if entry["expect"] else []
    if want and "error" in want[0]:  # issue 36's lines also name the CUDA / NCCL error the line was read as
        for g, (f, _) in zip(got, findings(entry), strict=True):
            g["error"] = f.extra.get("error")
    assert got == want, "%s (%s)" % (entry["line"][:120], entry["source"])
    for f, _ in findings(entry):
        # the gateway takes the body, and on an idle GPU (0 %) keeps the type's level: only hangs go up
        body = events.body(events.Identity("A03", "gpu-worker-08"), f, 0.0)
        assert severity(parse_event(body, accept_unknown=False)) == LEVEL[entry["expect"]["severity"]]


def test_kernel_lines_fed_one_by_one_give_the_same_events():
    """A line-by-line source (journalctl) splits the R570 record into three lines: KernelLog joins them."""
    for e in ENTRIES:
        if e["kind"] != "kernel":
            continue
        kl = xid.KernelLog()
        got = [x for x in (kl.feed(part) for part in e["line"].split("\n")) if x is not None]
        want = [e["expect"]] if e["expect"] else []
        assert [{"code": x.xid, "gpu": xid.pci_text(x.pci)} for x in got] == [
            {"code": w["code"], "gpu": w["gpu"]} for w in want
        ], e["line"][:120]


def test_probe_and_gateway_read_one_vocabulary():
    """One table (host_client/vocabulary.py): the probe's levels, hang and critical types are read off the entries
    the gateway ranks and speaks with, and every name the probe sends is a type the gateway knows."""
    from host_client import vocabulary
    from host_client.gateway import events as gateway_events

    assert EVENT_TYPES is vocabulary.TYPES and gateway_events.HANG_TYPES is events.HANG_TYPES
    for t, level in events.LEVELS.items():
        assert EVENT_TYPES[t]["level"] == LEVEL[level], t
    assert set(events.EVENT_TYPES) == set(EVENT_TYPES)
    for name in dir(vocabulary):  # the probe's constants name their own entry
        if name.isupper() and isinstance(getattr(vocabulary, name), str) and name in EVENT_TYPES:
            assert getattr(vocabulary, name) == name
    assert events.CRITICAL_TYPES == {t for t, level in events.LEVELS.items() if level == "P0"}


def test_ncc_dedup_key_separates_jobs_and_ranks_but_joins_one_ranks_lines():
    lines = [e["line"] for e in ENTRIES if "lf7396" in e["source"] or "LlamaFactory/issues/7396" in e["source"]]
    log = nccl.NcclLog()
    keys_a = [nccl.key(log.feed(ln, "jobA.log"), "jobA.log") for ln in lines]
    assert len(set(keys_a)) == 1  # rank 0's watchdog line and its PG status line: one incident
    keys_b = [nccl.key(log.feed(ln, "jobB.log"), "jobB.log") for ln in lines]
    assert set(keys_a).isdisjoint(keys_b)  # a second job timing out at the same SeqNum is its own incident
