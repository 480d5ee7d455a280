"""The acknowledgement loop's world for tests/test_deploy_ack_ledger.py and bench/bench_ack_ledger.py: one real
Prometheus (deploy/prometheus, 1 s scrape and evaluation) and one real Alertmanager (deploy/alertmanager, 1 s group
timers) watching fixed loopback ports (two gateways, two terminals), the pager a recording webhook; and a terminal
whose status page drips one byte a second. Not a test module (no test_ prefix)."""

import json
import signal
import socket
import threading
import time

from deploy_live import (
    Sink,
    alertmanager_config,
    emulator_status,
    prometheus_config,
    start_alertmanager,
    start_example_gateway,
    start_prometheus,
    stop,
)

from testkit.net import free_port


class World:
    """One Prometheus and one Alertmanager for the module, watching fixed loopback ports: the gateway and the two
    terminals each test starts there (the same ports through a restart)."""

    def __init__(self, tmp):
        self.gw_port, self.gw2_port = free_port(), free_port()
        self.room_port, self.office_port = free_port(), free_port()
        self.gw_url = "http://127.0.0.1:%d" % self.gw_port
        self.pager, self.fallback, self.deadman = Sink(), Sink(), Sink()
        self.am, am_url = start_alertmanager(
            tmp,
            alertmanager_config(
                tmp,
                self.gw_url,
                self.fallback.url,
                self.deadman.url,
                group_wait="1s",
                group_interval="1s",
                pager_url=self.pager.url,
            ),
        )
        self.prom, _u = start_prometheus(
            tmp,
            prometheus_config(
                tmp,
                scrape_s=1,
                eval_s=1,
                am_address=am_url.split("//")[1],
                gateway_addresses=["127.0.0.1:%d" % self.gw_port, "127.0.0.1:%d" % self.gw2_port],
                dcgm_addresses=[],
                terminal_addresses={
                    "machine-room": "127.0.0.1:%d" % self.room_port,
                    "office": "127.0.0.1:%d" % self.office_port,
                },
            ),
            extra_args=["--rules.alert.resend-delay=1s"],
        )

    def pages(self, incident, status=None):
        """(terminal, startsAt, status, labels, annotations) of every escalation notification for incident."""
        return [
            (a["labels"].get("terminal"), a["startsAt"], a["status"], a["labels"], a["annotations"])
            for b in list(self.pager.bodies)
            for a in b["alerts"]
            if a["labels"].get("alertname") == "SentinelP0NotAcknowledged"
            and a["labels"].get("incident") == incident
            and (status is None or a["status"] == status)
        ]

    def close(self):
        stop(self.prom)
        stop(self.am)
        for s in (self.pager, self.fallback, self.deadman):
            s.close()


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return time.monotonic(), v
        time.sleep(0.05)
    raise AssertionError("not within %.0f s: %s" % (timeout, what))


def acked(url, key):
    return key in emulator_status(url)["mute"]["acknowledged"]


def kill9(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait(5)


def p0(rack, host, kind="NCCL_TIMEOUT"):
    return json.dumps({"cluster_rack": rack, "node_host": host, "event_type": kind})


def example_gateway(world, tmp, room, office, *, second=False, also=()):
    """examples/gateway.toml with escalate_after_s 5, on the world's first gateway port (second: the other)."""
    return start_example_gateway(
        tmp,
        room=room,
        office=office,
        port=world.gw2_port if second else world.gw_port,
        also=[("escalate_after_s = 300 ", "escalate_after_s = 5 ")] + list(also),
    )


class DripTerminal:
    """Takes every signed request with the terminal's success answer; its status page answers its head, then one
    byte a second, forever (a half-dead terminal or a proxy)."""

    def __init__(self, port):
        self.sock = socket.create_server(("127.0.0.1", port))
        self.url = "http://127.0.0.1:%d" % port
        self.posts = 0
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                c, _a = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c):
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                d = c.recv(4096)
                if not d:
                    return
                head += d
            if head.startswith(b"POST"):
                n = int(
                    [ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0]
                )
                body = head.split(b"\r\n\r\n", 1)[1]
                while len(body) < n:
                    body += c.recv(4096)
                self.posts += 1
                mid = json.loads(body).get("id")
                out = json.dumps({"ok": True, "duplicate": False, "id": mid}).encode()
                c.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(out) + out
                )
                return
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            while not self._stop.wait(1.0):
                c.sendall(b" ")
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        self._stop.set()
        self.sock.close()
