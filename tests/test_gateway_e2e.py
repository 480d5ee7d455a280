"""End to end over loopback: HTTP into the gateway (its HTTP front), signed HTTP out to the emulator (its own front, the
core's Receiver and state machine). Each event type arrives; an outage loses nothing and repeats nothing; a gateway
restart loses no undelivered P0."""

import json
import threading
import time
import urllib.request

import pytest

pytest.importorskip("emulator.harness")

from emulator.harness import Harness
from emulator.web import Server
from emulator.web import create_app as emulator_app
from host_client.gateway.config import Config
from sentinel_core.alarm import NORMAL, P0


class GatewayServer:
    def __init__(self, cfg, **kw):
        from gateway_front import ServedGateway

        self.server = ServedGateway(cfg, **kw)
        self.gw = self.server.gw
        self.url = self.server.url

    def post(self, path, obj):
        req = urllib.request.Request(self.url + path, json.dumps(obj).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())

    def close(self, crash=False):
        self.server.stop_front(2)
        if crash:
            # Kill the threads without the orderly final save: only what was already on disk survives.
            for w in self.gw.workers.values():
                w.stop()
            for p in self.gw.persisters.values():
                with p.lane.cond:
                    p._stop = True
                    p.lane.cond.notify_all()
                p._thread.join(2)
        else:
            self.gw.stop()


def gw_config(h, tmp_path=None, **over):
    d = {
        "terminals": {"emu": {"url": h.url, "key_id": h.cfg["key_id"], "secret_env": "EMU_SECRET"}},
        "delivery": {"rate_interval_s": 0, "backoff_initial_s": 0.05, "backoff_max_s": 0.2, "timeout_s": 2.0},
    }
    if tmp_path is not None:
        d["gateway"] = {"state_dir": str(tmp_path / "state")}
    for k, v in over.items():
        d.setdefault(k, {}).update(v)
    return Config.from_dict(d, env={"EMU_SECRET": h.cfg["secret"]})


def wait(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def ev(rack, host, etype, gpu=0, util=None, **extra):
    d = {"cluster_rack": rack, "node_host": host, "event_type": etype, "gpu_index": gpu}
    if util is not None:
        d["gpu_util"] = util
    d.update(extra)
    return d


ALL_TYPES = [
    (ev("A01", "gpu-node-01-a1b2c3d4", "NCCL_TIMEOUT", util=0.0), "A01:gpu-node-01:NCCL_TIMEOUT", "P0"),
    (ev("A02", "gpu-node-02", "XID_FATAL", gpu=5, xid=79), "A02:gpu-node-02:XID_FATAL:gpu5", "P0"),
    (ev("A03", "gpu-node-03", "GPU_UTIL_DROP", util=37.0), "A03:gpu-node-03:GPU_UTIL_DROP:gpu0", "P1"),
    (ev("A04", "gpu-node-04", "NVLINK_ERROR", gpu=2, util=90.0), "A04:gpu-node-04:NVLINK_ERROR:gpu2", "P1"),
    (ev("A05", "gpu-node-05", "PCIE_DOWNGRADE", gpu=1, util=95.0), "A05:gpu-node-05:PCIE_DOWNGRADE:gpu1", "P1"),
    (ev("A06", "gpu-node-06", "THERMAL", gpu=7), "A06:gpu-node-06:THERMAL:gpu7", "P1"),
    (ev("A07", "gpu-node-07", "XID_WARNING", gpu=4, xid=31), "A07:gpu-node-07:XID_WARNING:gpu4", "P1"),
    (ev("A08", "gpu-node-08", "PROGRESS_STALL", gpu=-1), "A08:gpu-node-08:PROGRESS_STALL", "P0"),
]


def test_each_event_type_reaches_the_emulator(tmp_path):
    with Harness(str(tmp_path)) as h:
        g = GatewayServer(gw_config(h))
        try:
            for body, _key, _lvl in ALL_TYPES:
                assert g.post("/api/v1/gpu_event", body)[0] == 200
            want = {k: lvl for _b, k, lvl in ALL_TYPES}
            st = h.wait_for(lambda s: {a["key"] for a in s["active"]} >= set(want))
            got = {a["key"]: a["level"] for a in st["active"]}
            assert {k: got[k] for k in want} == want
            texts = {a["key"]: a["text"] for a in st["active"]}
            assert (
                texts["A01:gpu-node-01:NCCL_TIMEOUT"]
                == "训练集群紧急预警，机架 A01 节点 gpu-node-01 触发通信死锁，全环算力挂起"
            )
            assert st["shown"]["pattern"] == "flash"
            # the recovery turns exactly that incident green (NORMAL for its key)
            code, a = g.post("/api/v1/gpu_event", ev("A01", "gpu-node-01", "RECOVERED", recovers="NCCL_TIMEOUT"))
            assert code == 200 and a["result"] == "recovery"

            def levels(s):
                return {x["key"]: x["level"] for x in s["active"]}

            st = h.wait_for(lambda s: levels(s).get("A01:gpu-node-01:NCCL_TIMEOUT", "NORMAL") == "NORMAL")
            assert levels(st).get("A02:gpu-node-02:XID_FATAL:gpu5") == "P0"
        finally:
            g.close()


def test_outage_every_p0_incident_arrives_once_in_order(tmp_path):
    delivered = []
    lock = threading.Lock()

    def on_delivered(_name, item, ack):
        with lock:
            delivered.append((item.seq, item.level, item.kind, list(item.carried), bool(ack.duplicate)))

    with Harness(str(tmp_path)) as h:
        port = h.server.port
        g = GatewayServer(gw_config(h), on_delivered=on_delivered)
        try:
            p0_sent = []
            # before the outage: two racks' first incidents go at once
            for rack in ("A01", "A02"):
                g.post("/api/v1/gpu_event", ev(rack, "n0", "NCCL_TIMEOUT"))
                p0_sent.append("%s:n0:NCCL_TIMEOUT" % rack)
            wait(lambda: len(delivered) == 2)
            h.server.stop()  # the terminal stops answering
            for i in range(1, 6):
                for rack in ("A01", "A02", "A03"):
                    g.post("/api/v1/gpu_event", ev(rack, "n%d" % i, "NCCL_TIMEOUT"))
                    p0_sent.append("%s:n%d:NCCL_TIMEOUT" % (rack, i))
                g.post("/api/v1/gpu_event", ev("B%d" % i, "x%d" % i, "XID_FATAL", gpu=i))
                p0_sent.append("B%d:x%d:XID_FATAL:gpu%d" % (i, i, i))
                g.post("/api/v1/gpu_event", ev("C%d" % i, "t%d" % i, "THERMAL", gpu=i))
                time.sleep(0.05)
            time.sleep(0.5)  # retries keep failing meanwhile
            lane = g.gw.lanes["emu"]
            assert lane.up is False and lane.stats.alarms.retries >= 1
            h.server = Server(emulator_app(h.cfg, h.engine), "127.0.0.1", port).start()  # back
            wait(lambda: lane.depth() == 0, 15)
            with lock:
                got = list(delivered)
            p0_items = [d for d in got if d[1] == P0]
            carried = [k for d in p0_items for k in d[3]]
            assert sorted(carried) == sorted(p0_sent)  # every P0 incident, none twice
            assert len(carried) == len(set(carried))
            seqs = [d[0] for d in p0_items]
            assert seqs == sorted(seqs)  # queue order kept across the outage
            assert len(got) < 20  # folded, not a burst
            st = h.status()
            assert st["counters"]["alarms"] == sum(1 for d in got if not d[4])  # the terminal acted once each
        finally:
            g.close()


def test_gateway_restart_loses_no_undelivered_p0(tmp_path):
    with Harness(str(tmp_path)) as h:
        port = h.server.port
        h.server.stop()  # terminal down from the start
        cfg = gw_config(h, tmp_path)
        g = GatewayServer(cfg)
        keys = []
        for i in range(12):
            rack = "A%02d" % (i % 4)
            assert g.post("/api/v1/gpu_event", ev(rack, "n%d" % i, "NCCL_TIMEOUT"))[0] == 200
            keys.append("%s:n%d:NCCL_TIMEOUT" % (rack, i))
        g.post("/api/v1/gpu_event", ev("Z", "z", "THERMAL", gpu=0))
        g.close(crash=True)  # no orderly save
        saved = json.loads((tmp_path / "state" / "pending-emu.json").read_text())
        assert sum(x["n"] for x in saved["items"] if x["level"] == "P0") == 12

        h.server = Server(emulator_app(h.cfg, h.engine), "127.0.0.1", port).start()
        delivered = []
        g2 = GatewayServer(cfg, on_delivered=lambda _n, it, _a: delivered.append(it))
        try:
            wait(lambda: g2.gw.lanes["emu"].depth() == 0, 15)
            p0 = [it for it in delivered if it.level == P0]
            assert sum(it.ncarried for it in p0) == 12
            st = h.status()
            active = {a["key"] for a in st["active"]}
            assert "A00:n0:NCCL_TIMEOUT" in active  # the first incident, alone
            assert any(a["level"] == "P0" and "#" in a["key"] for a in st["active"])  # and the summary
            assert all(it.level != NORMAL for it in delivered)
        finally:
            g2.close()


def test_two_gpus_degrade_one_recovers_the_terminal_keeps_the_p1(tmp_path):
    """Issue 6/7 seam: incidents are per GPU. GPU 5's fault is debounced (same rack:host:PCIE_DOWNGRADE within
    120 s), yet GPU 3's recovery must not turn the box green while GPU 5 is still degraded."""

    def pcie(gpu, *, recovered=False):
        return ev(
            "A09", "gpu-node-09", "PCIE_DOWNGRADE", gpu=gpu, util=95.0, **({"state": "recovered"} if recovered else {})
        )

    key = "A09:gpu-node-09:PCIE_DOWNGRADE:gpu3"
    with Harness(str(tmp_path)) as h:
        g = GatewayServer(gw_config(h))
        try:
            assert g.post("/api/v1/gpu_event", pcie(3))[1]["result"] == "alarm"
            assert g.post("/api/v1/gpu_event", pcie(5))[1]["result"] == "suppressed"
            h.wait_for(lambda s: any(a["key"] == key and a["level"] == "P1" for a in s["active"]))
            assert g.post("/api/v1/gpu_event", pcie(3, recovered=True))[1]["terminals"] == {"emu": "recovery_pending"}
            time.sleep(0.5)  # give a wrong NORMAL time to arrive
            st = h.status()
            assert {a["key"]: a["level"] for a in st["active"]}.get(key) == "P1"
            assert st["shown"]["level"] == "P1"
            assert g.post("/api/v1/gpu_event", pcie(5, recovered=True))[1]["terminals"] == {"emu": "recovery"}
            st = h.wait_for(lambda s: all(a["level"] == "NORMAL" for a in s["active"]))
            assert st["shown"]["level"] == "NORMAL"
        finally:
            g.close()


def test_a_p0_after_a_p1_burst_does_not_wait_for_the_p1s_tokens():
    """The terminal's rate limit (3 at once, then one per 30 s here) is spent on P1s and a summary; a P0 that comes
    next reaches the terminal at once, ahead of the P1s still held, and a P1 never jumps the queue."""
    from gateway_front import ServedGateway

    from testkit.terminal import LoopbackTerminal

    secret = "p0-reserve-" + "s" * 24
    with LoopbackTerminal({"k1": secret.encode()}) as term:
        cfg = Config.from_dict(
            {
                "terminals": {"t": {"url": term.url, "key_id": "k1", "secret_env": "T_SECRET"}},
                "delivery": {"rate_burst": 3, "rate_interval_s": 30},
            },
            env={"T_SECRET": secret},
        )
        g = ServedGateway(cfg)
        try:
            c = g.test_client()
            burst = [ev("A%02d" % i, "n%d" % i, "THERMAL", gpu=1) for i in range(1, 6)]
            burst += [ev("B01", "u%d" % i, "GPU_UTIL_DROP", util=37.0) for i in range(4)]  # folds into a summary
            for body in burst:
                assert c.post("/api/v1/gpu_event", json=body).status_code == 200
            wait(lambda: len(term.alarms()) >= 3)
            time.sleep(0.2)  # the P1 tokens are spent: nothing more goes for 30 s
            assert len(term.alarms()) == 3
            assert c.post("/api/v1/gpu_event", json=ev("C01", "hot", "XID_FATAL", gpu=3, xid=79)).status_code == 200
            wait(lambda: len(term.alarms()) >= 4)
            time.sleep(0.2)
            got = [(o.get("level"), o.get("key")) for _t, o in term.alarms()]
            assert [lvl for lvl, _k in got[:3]] == ["P1", "P1", "P1"]
            assert got[3:] == [("P0", "C01:hot:XID_FATAL:gpu3")]  # the P0, and no P1 with it
            assert len(term.accepted) == 4
            assert g.gw.lanes["t"].depth() >= 1  # the rest of the P1s (folded as the grouping sees fit) still wait
        finally:
            g.close()
