"""The gateway's [remedy] lane: its table in gateway.toml, the incident it sends (fields, signed like a terminal's
alarm, taken by the core's Receiver), and that a remedy daemon that is down or slow never delays a terminal."""

import time

import pytest

from host_client.errors import ConfigError
from host_client.gateway.config import Config
from host_client.remedy.feed import PATH_INCIDENT
from host_client.remedy.server import PATH_RESET  # noqa: F401 - registers the remedy's endpoints with the Receiver
from testkit.net import free_port
from testkit.terminal import LoopbackTerminal

SECRET = "remedy-secret-0123456789abcdef"


def config(term_url, remedy_url, **remedy):
    r = {"url": remedy_url, "key_id": "gw", "secret_env": "R"}
    r.update(remedy)
    return Config.from_dict(
        {
            "gateway": {"port": 18080},  # where remedy's announcements go back by default (this test's front: port 0)
            "terminals": {"t": {"url": term_url, "key_id": "k", "secret_env": "T"}},
            "delivery": {"rate_interval_s": 0, "backoff_initial_s": 0.05, "backoff_max_s": 0.2},
            "remedy": r,
        },
        env={"T": "terminal-secret-0123456789", "R": SECRET},
    )


@pytest.mark.parametrize(
    "table,says",
    [
        ({"url": "http://127.0.0.1:9130", "key_id": "gw"}, "remedy: set exactly one of secret_env or secret_file"),
        ({"url": "ftp://x", "key_id": "gw", "secret_env": "R"}, "remedy.url must be an http:// or https:// URL"),
        (
            {"url": "http://127.0.0.1:9130", "key_id": "gw", "secret_env": "R", "language": "en"},
            "unknown key remedy.language",
        ),
        ({"url": "http://127.0.0.1:9130", "key_id": "gw", "secret_env": "NOPE"}, "environment variable NOPE"),
    ],
)
def test_remedy_table_errors_are_one_line(table, says):
    with pytest.raises(ConfigError) as e:
        Config.from_dict({"remedy": table}, env={"R": SECRET})
    assert says in str(e.value) and "\n" not in str(e.value)


def test_incident_fields_reach_remedy_signed(tmp_path):
    from gateway_front import ServedGateway

    # the remedy's side: the core's Receiver with the remedy's endpoints registered, as server.py serves it
    with LoopbackTerminal({"k": "terminal-secret-0123456789"}) as term, LoopbackTerminal({"gw": SECRET}) as rem:
        g = ServedGateway(config(term.url, rem.url))
        try:
            ev = {
                "cluster_rack": "A03",
                "node_host": "gpu-worker-08-3f2a9c1b",
                "event_type": "XID_FATAL",
                "gpu_index": 3,
                "xid": 79,
            }
            assert g.test_client().post("/api/v1/gpu_event", json=ev).status_code == 200
            end = time.monotonic() + 10
            while time.monotonic() < end and not rem.accepted:
                time.sleep(0.02)
            (res,) = rem.accepted
            inc = res.payload["incident"]
            assert (inc.firing, inc.level, inc.rack, inc.host, inc.event_type, inc.gpu, inc.xid) == (
                True,
                "P0",
                "A03",
                "gpu-worker-08",
                "XID_FATAL",
                3,
                79,
            )
            assert inc.id.startswith("A03:gpu-worker-08:XID_FATAL:gpu3@")
            assert inc.gateway == "http://127.0.0.1:18080"
            assert rem.received[0][1] == PATH_INCIDENT
            # the recovery goes too, as resolved, for the fault's type
            rec = dict(ev, event_type="RECOVERED", recovers="XID_FATAL")
            assert g.test_client().post("/api/v1/gpu_event", json=rec).status_code == 200
            while time.monotonic() < end and len(rem.accepted) < 2:
                time.sleep(0.02)
            inc2 = rem.accepted[1].payload["incident"]
            assert (inc2.firing, inc2.event_type, inc2.host) == (False, "XID_FATAL", "gpu-worker-08")
        finally:
            g.close()


def test_a_dead_or_slow_remedy_never_delays_a_terminal(tmp_path):
    from gateway_front import ServedGateway

    dead = "http://127.0.0.1:%d" % free_port()
    with LoopbackTerminal({"k": "terminal-secret-0123456789"}) as term:
        g = ServedGateway(config(term.url, dead, timeout_s=5))
        try:
            t0 = time.monotonic()
            for i in range(20):
                ev = {
                    "cluster_rack": "A%02d" % i,
                    "node_host": "gpu-worker-%02d" % i,
                    "event_type": "GPU_LOST",
                    "gpu_index": 0,
                }
                assert g.test_client().post("/api/v1/gpu_event", json=ev).status_code == 200
            end = time.monotonic() + 10
            lane = g.gw.lanes["t"]
            while time.monotonic() < end and (lane.items or not term.accepted):
                time.sleep(0.01)
            assert not lane.items and term.accepted  # every alarm (some folded into summaries) reached the terminal
            assert g.gw.remedy.pending() >= 19  # kept for the daemon, retried with back-off
            assert g.gw.health()["ok"]
            page = g.gw.metrics_text()
            assert "sentinel_gateway_remedy_queue" in page
            assert time.monotonic() - t0 < 10
        finally:
            g.close()


def test_alertmanager_annotations_per_language_reach_each_terminal_in_its_own():
    from host_client.gateway.alertmanager import parse_webhook
    from host_client.remedy import announce

    texts = announce.isolated_text("gpu-worker-08", ["1234"], 120)
    a = announce.alert(fingerprint="remedy:x", texts=texts, severity="warning", host="gpu-worker-08", action="drained")
    cfg = Config.from_dict({})
    (inc,) = parse_webhook({"version": "4", "alerts": [a]}, cfg)
    assert inc.text_for("en") == "gpu-worker-08 drained, job 1234 asked to checkpoint, requeue in 120 s"
    assert inc.text_for("zh") == "gpu-worker-08 已隔离，作业 1234 已通知保存检查点，120 秒后重新排队"
    assert inc.level == 1 and inc.kind == "SentinelRemedyDrained"
    done = announce.alert(
        fingerprint="remedy:x",
        texts=announce.running_again_text("1234", "gpu-worker-03"),
        severity="warning",
        host="gpu-worker-08",
        firing=False,
        action="running_again",
    )
    (rec,) = parse_webhook({"version": "4", "alerts": [done]}, cfg)
    assert rec.recovery and rec.key == inc.key
    assert rec.text_for("zh") == "作业 1234 已在 gpu-worker-03 上重新运行 已恢复正常"
    assert rec.text_for("en") == "Resolved: job 1234 running again on gpu-worker-03"
    # an alert with one summary only keeps its one text for every terminal, as before
    plain = dict(a, annotations={"summary": "disk full"})
    assert parse_webhook({"version": "4", "alerts": [plain]}, cfg)[0].text_for("zh") == "disk full"
