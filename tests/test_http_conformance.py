"""RFC 9112 framing at the gateway's HTTP front over real sockets (raw `socket` for the hostile bytes; curl and
requests for chunked bodies), with what the user perceives: the answer's status, the connection ending, and whether
an alarm reached the terminal. The four request-smuggling tricks of issue 23 each hide a valid event in a body:
it must never run. The cases that apply to a terminal run against the emulator's front too (emulator/front.py,
the core's strict head grammar shared with the board: one request per connection, Connection: close; chunked is
answered 411 there, docs/PROTOCOL.md says why). Also: pipelining with a full socket, and 400 pipelining clients
with resets for 20 s, every answer its own request's, in order."""

import json
import os
import random
import selectors
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests
from gateway_front import ServedGateway

from host_client.gateway.config import Config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile

EV = {"cluster_rack": "A03", "node_host": "gpu-worker-08", "event_type": "NCCL_TIMEOUT"}


class FakeTerminal:
    url = "http://fake"

    def __init__(self):
        self.sent = []

    def send(self, alarm):
        self.sent.append(alarm)

        class A:
            duplicate = False

        return A()

    def heartbeat(self, interval=None):
        pass


def read_answer(sock, timeout=10):
    """One answer (status, head, body) from sock, or None if the connection ended first."""
    sock.settimeout(timeout)
    buf = b""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = buf[:end].decode("latin-1")
            status = int(head.split(" ")[1])
            if status == 100:
                buf = buf[end + 4 :]
                continue
            n = int(
                next((ln.split(":", 1)[1] for ln in head.split("\r\n") if ln.lower().startswith("content-length:")), 0)
            )
            while len(buf) < end + 4 + n:
                chunk = sock.recv(65536)
                if not chunk:
                    return None
                buf += chunk
            return status, head, buf[end + 4 : end + 4 + n], buf[end + 4 + n :]
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        buf += chunk


def closed(sock, timeout=5):
    """True when the peer ends the connection (EOF or reset) within timeout, reading past anything it sends."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


class GatewayTarget:
    kind = "gateway"

    def __init__(self, tmp_path):
        self.fake = FakeTerminal()
        cfg = Config.from_dict(
            {
                "gateway": {"state_dir": str(tmp_path / "state"), "max_body": 4096},
                "terminals": {"room": {"url": "http://127.0.0.1:9", "key_id": "k", "secret_env": "S"}},
                "delivery": {"rate_interval_s": 0},
            },
            env={"S": "s"},
        )
        self.served = ServedGateway(cfg, clients={"room": self.fake})
        self.port = self.served.port
        self.gw = self.served.gw

    def hidden(self):
        """A valid request that raises an alarm, as the bytes a smuggler hides in a body."""
        body = json.dumps(dict(EV, cluster_rack="Z99", node_host="gpu-smuggled")).encode()
        head = b"POST /api/v1/gpu_event HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        return head + b"Content-Length: %d\r\n\r\n" % len(body) + body

    outer = b"POST /api/v1/gpu_event HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"

    def alarms(self):
        time.sleep(0.3)  # a delivery in flight would land by now
        return sum(self.gw.events_in.values()) + len(self.fake.sent)

    def close(self):
        self.served.close()


class TerminalTarget:
    kind = "emulator"

    def __init__(self, tmp_path):
        from emulator.harness import Harness

        self.h = Harness(str(tmp_path / "emu")).start()
        self.port = self.h.server.port

    def hidden(self):
        case = next(c for c in hostile.load() if c["name"] == "rfc_p0")
        return hostile.render(case, self.h.cfg["key_id"], self.h.cfg["secret"])

    outer = b"POST /api/v1/status HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"

    def alarms(self):
        time.sleep(0.3)
        return self.h.status()["counters"]["alarms"]

    def close(self):
        self.h.stop()


@pytest.fixture(params=["gateway", "emulator"])
def target(request, tmp_path):
    t = (GatewayTarget if request.param == "gateway" else TerminalTarget)(tmp_path)
    yield t
    t.close()


@pytest.fixture
def gateway(tmp_path):
    t = GatewayTarget(tmp_path)
    yield t
    t.close()


# ---- request smuggling (issue 23): a hidden valid request in the body must never run ----------------------------


def _smuggle(t, trick):
    hid = t.hidden()
    n = len(hid)
    heads = {
        # two Content-Lengths, 0 then N: a parser that takes the first runs the body as a second request
        "duplicate_content_length": b"Content-Length: 0\r\nContent-Length: %d\r\n" % n,
        # whitespace before the colon (RFC 9112 5.1)
        "space_before_colon": b"Content-Length : %d\r\n" % n,
        # a bare LF before Content-Length: a front that ends lines at CRLF only sees no length
        "bare_lf_before_content_length": b"X-Note: a\nContent-Length: %d\r\n" % n,
        # obs-fold inside Content-Length (RFC 9112 5.2)
        "obs_fold_in_content_length": b"Content-Length: 0\r\n %d\r\n" % n,
        # Content-Length and Transfer-Encoding together (RFC 9112 6.3)
        "content_length_with_chunked": b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % (n + 5),
        # a bare CR in the head (RFC 9112 2.2)
        "bare_cr_in_head": b"X-Note: a\rContent-Length: 0\r\nContent-Length: %d\r\n" % n,
    }
    body = b"0\r\n\r\n" + hid if trick == "content_length_with_chunked" else hid
    return t.outer + heads[trick] + b"\r\n" + body


@pytest.mark.parametrize(
    "trick",
    [
        "duplicate_content_length",
        "space_before_colon",
        "bare_lf_before_content_length",
        "obs_fold_in_content_length",
        "content_length_with_chunked",
        "bare_cr_in_head",
    ],
)
def test_a_smuggled_request_never_runs(target, trick):
    s = socket.create_connection(("127.0.0.1", target.port))
    s.sendall(_smuggle(target, trick))
    a = read_answer(s)
    if target.kind == "emulator" and trick == "bare_lf_before_content_length":
        # The terminal's grammar takes a bare LF for a line end (RFC 9112 2.2 allows it): the Content-Length is
        # read, the hidden request is that request's body, and the one request of the connection is answered.
        assert a is not None and a[0] == 405, a
    else:
        assert a is not None and a[0] == 400, a  # RFC 9112: 400, then close
        assert json.loads(a[2])["error"] == "bad_request"
    assert "connection: close" in a[1].lower()
    assert closed(s)
    s.close()
    assert target.alarms() == 0, "the smuggled request ran"


def test_the_same_hidden_request_does_run_when_sent_plainly(target):
    """The control: the hidden request is valid, so the tests above would see it if it ran."""
    s = socket.create_connection(("127.0.0.1", target.port))
    s.sendall(target.hidden())
    a = read_answer(s)
    assert a is not None and a[0] == 200, a
    s.close()
    assert target.alarms() >= 1


# ---- chunked bodies (RFC 9112 7.1) ---------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed (tools/install-system-deps.sh)")
def test_chunked_from_curl(gateway):
    body = json.dumps(dict(EV, cluster_rack="C11")).encode()
    r = subprocess.run(
        [
            "curl",
            "-sS",
            "--max-time",
            "10",
            "-H",
            "Content-Type: application/json",
            "-H",
            "Transfer-Encoding: chunked",
            "-T",
            "-",  # stdin: curl sends it chunked
            "-X",
            "POST",
            "-w",
            "\n%{http_code}",
            "http://127.0.0.1:%d/api/v1/gpu_event" % gateway.port,
        ],
        input=body,
        capture_output=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    text, code = r.stdout.decode().rsplit("\n", 1)
    assert code == "200", r.stdout
    assert json.loads(text)["result"] == "alarm"
    assert gateway.alarms() >= 1


def test_chunked_from_requests_with_a_generator_body(gateway):
    parts = [b'{"cluster_rack": "C12", ', b'"node_host": "gpu-worker-08", ', b'"event_type": "NCCL_TIMEOUT"}']
    r = requests.post(
        "http://127.0.0.1:%d/api/v1/gpu_event" % gateway.port,
        data=(p for p in parts),  # a generator: requests sends it chunked
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert r.status_code == 200 and r.json()["result"] == "alarm"
    assert r.request.headers.get("Transfer-Encoding") == "chunked"


def test_a_chunked_body_over_max_body_is_413_as_soon_as_it_passes(gateway):
    s = socket.create_connection(("127.0.0.1", gateway.port))
    s.sendall(b"POST /api/v1/gpu_event HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(5):  # 5 x 1000 bytes: over max_body (4096) at the fifth; no last chunk is ever sent
        s.sendall(b"3e8\r\n" + b"x" * 1000 + b"\r\n")
    a = read_answer(s)
    assert a is not None and a[0] == 413 and json.loads(a[2])["error"] == "too_large"
    assert closed(s)
    s.close()


def test_a_chunked_body_to_the_terminal_is_411(tmp_path):
    """The terminal reads Content-Length only (RFC 9112 allows a server that needs a length to answer 411)."""
    t = TerminalTarget(tmp_path)
    try:
        s = socket.create_connection(("127.0.0.1", t.port))
        s.sendall(
            b"POST /api/v1/send_msg HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
        )
        a = read_answer(s)
        assert a is not None and a[0] == 411 and a[1].startswith("HTTP/1.1 411 Length Required")
        s.close()
    finally:
        t.close()


# ---- the connection: half-close, Connection tokens, pipelining -----------------------------------------------------


def test_a_half_closed_client_gets_every_answer_before_the_close(gateway):
    s = socket.create_connection(("127.0.0.1", gateway.port))
    bodies = [json.dumps(dict(EV, cluster_rack="H%02d" % i, node_host="gpu-half-%02d" % i)).encode() for i in range(50)]
    s.sendall(
        b"".join(
            b"POST /api/v1/gpu_event HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b) for b in bodies
        )
    )
    s.shutdown(socket.SHUT_WR)  # sent everything; the answers still come
    got = []
    rest = b""
    s.settimeout(10)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    rest = data
    while rest:
        end = rest.find(b"\r\n\r\n")
        head = rest[:end].decode()
        n = int([ln.split(":")[1] for ln in head.split("\r\n") if ln.lower().startswith("content-length")][0])
        got.append((int(head.split(" ")[1]), json.loads(rest[end + 4 : end + 4 + n])))
        rest = rest[end + 4 + n :]
    assert len(got) == 50
    assert [a["key"].split(":")[0] for _st, a in got] == ["H%02d" % i for i in range(50)]
    assert all(st == 200 for st, _a in got)
    s.close()


def test_a_half_closed_client_of_the_terminal_gets_its_answer(tmp_path):
    t = TerminalTarget(tmp_path)
    try:
        status, _body = hostile.exchange("127.0.0.1", t.port, t.hidden())  # sends, shutdown(SHUT_WR), reads
        assert status == 200
    finally:
        t.close()


@pytest.mark.parametrize("value", ["close", "CLOSE", "keep-alive, Close", "foo,close"])
def test_connection_close_in_any_case_and_in_a_list_ends_the_connection(gateway, value):
    s = socket.create_connection(("127.0.0.1", gateway.port))
    s.sendall(
        ("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: %s\r\n\r\n" % value).encode()
        + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"  # pipelined after it: never answered
    )
    a = read_answer(s)
    assert a is not None and a[0] == 200 and "connection: close" in a[1].lower()
    assert a[3] == b""  # nothing after it so far
    assert closed(s)
    s.close()


def test_other_connection_tokens_keep_the_connection(gateway):
    s = socket.create_connection(("127.0.0.1", gateway.port))
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade-Insecure\r\n\r\n")
    assert read_answer(s)[0] == 200
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_answer(s)[0] == 200
    s.close()


def test_http_1_0_closes_unless_kept_alive(gateway):
    s = socket.create_connection(("127.0.0.1", gateway.port))
    s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
    a = read_answer(s)
    assert a is not None and a[0] == 200
    assert closed(s)
    s.close()
    s = socket.create_connection(("127.0.0.1", gateway.port))
    s.sendall(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    assert read_answer(s)[0] == 200
    s.sendall(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    assert read_answer(s)[0] == 200
    s.close()


def test_no_100_continue_to_http_1_0(target):
    """RFC 9110 10.1.1: a 1xx is never sent to an HTTP/1.0 client, Expect or not."""
    hid = target.hidden()
    head, body = hid.split(b"\r\n\r\n", 1)
    head = head.replace(b"HTTP/1.1", b"HTTP/1.0", 1) + b"\r\nExpect: 100-continue\r\n\r\n"
    s = socket.create_connection(("127.0.0.1", target.port))
    s.sendall(head)
    s.settimeout(0.5)
    try:
        early = s.recv(100)
    except TimeoutError:
        early = b""
    assert early == b"", early  # no "HTTP/1.1 100 Continue"
    s.sendall(body)
    a = read_answer(s)
    assert a is not None and a[0] == 200, a
    s.close()


def test_100_continue_to_http_1_1(gateway):
    body = json.dumps(dict(EV, cluster_rack="E01")).encode()
    s = socket.create_connection(("127.0.0.1", gateway.port))
    s.sendall(
        b"POST /api/v1/gpu_event HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n" % len(body)
    )
    s.settimeout(5)
    assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
    s.sendall(body)
    assert read_answer(s)[0] == 200
    s.close()


# ---- the target and Host ----------------------------------------------------------------------------------------


def test_absolute_form_is_accepted(target):
    port = target.port
    s = socket.create_connection(("127.0.0.1", port))
    path = b"/healthz" if target.kind == "gateway" else b"/api/v1/status"
    s.sendall(b"GET http://127.0.0.1:%d%s?x=1 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (port, path, port))
    a = read_answer(s)
    assert a is not None and a[0] == 200, a
    s.close()


def test_absolute_form_event_reaches_the_gateway(gateway):
    body = json.dumps(dict(EV, cluster_rack="F01")).encode()
    s = socket.create_connection(("127.0.0.1", gateway.port))
    s.sendall(
        b"POST http://gw.example:8080/api/v1/gpu_event HTTP/1.1\r\nHost: gw.example:8080\r\nContent-Length: %d\r\n\r\n"
        % len(body)
        + body
    )
    a = read_answer(s)
    assert a[0] == 200 and json.loads(a[2])["result"] == "alarm"
    s.close()


@pytest.mark.parametrize(
    "head,status",
    [
        (b"GET {path} HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"GET {path} HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),  # two
        (b"GET {path} HTTP/1.1\r\nHost: a\r\n\r\n", 200),
        (b"GET {path} HTTP/1.0\r\n\r\n", 200),  # HTTP/1.0 has no Host rule
    ],
)
def test_host_rules(target, head, status):
    path = b"/healthz" if target.kind == "gateway" else b"/api/v1/status"
    s = socket.create_connection(("127.0.0.1", target.port))
    s.sendall(head.replace(b"{path}", path))
    a = read_answer(s)
    assert a is not None and a[0] == status, a
    if status == 400:
        assert closed(s)
    s.close()


def test_reason_phrases_are_the_standard_ones(target):
    """403/401/404 and the rest say their RFC 9110 phrase (issue 26: a 403 said "Status")."""
    s = socket.create_connection(("127.0.0.1", target.port))
    s.sendall(b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
    a = read_answer(s)
    assert a[1].startswith("HTTP/1.1 404 Not Found\r\n"), a[1]
    s.close()
    s = socket.create_connection(("127.0.0.1", target.port))
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx")
    a = read_answer(s)
    assert a[1].startswith("HTTP/1.1 400 Bad Request\r\n"), a[1]
    s.close()


def test_the_gateway_has_one_phrase_table():
    from emulator import front
    from host_client.gateway import answers

    for code, phrase in ((403, "Forbidden"), (413, "Content Too Large"), (422, "Unprocessable Content")):
        assert answers.reason(code) == front._reason(code)
        older = {413: "Request Entity Too Large", 422: "Unprocessable Entity"}.get(code)
        assert answers.reason(code) in (phrase, older)


# ---- pipelining ------------------------------------------------------------------------------------------------


def _event(rack, node):
    body = json.dumps(dict(EV, cluster_rack=rack, node_host=node)).encode()
    return b"POST /api/v1/gpu_event HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def test_pipelining_with_a_full_socket_answers_every_request_in_order(gateway):
    """The client pipelines 12,000 requests (events, some that wait for the disk, and /metrics of several KB) and
    reads nothing until its socket is full both ways; then it reads: one answer per request, each its own."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    s.connect(("127.0.0.1", gateway.port))
    reqs = []
    want = []
    for k in range(12000):
        if k % 10 == 3:
            reqs.append(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            want.append("metrics")
        else:
            rack = "P%04d" % k
            reqs.append(_event(rack, "gpu-pipe-%04d" % (k % 50)))
            want.append(rack)
    data = b"".join(reqs)
    sent = [0]

    def sender():
        sent[0] = 0
        s.sendall(data)
        sent[0] = len(data)

    th = threading.Thread(target=sender, daemon=True)
    th.start()
    time.sleep(1.5)
    assert sent[0] < len(data), "the socket never filled: the test proves nothing"
    got = []
    buf = b""
    s.settimeout(30)
    while len(got) < len(want):
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = buf[:end].decode()
            n = int([ln.split(":")[1] for ln in head.split("\r\n") if ln.lower().startswith("content-length")][0])
            if len(buf) >= end + 4 + n:
                got.append((int(head.split(" ")[1]), buf[end + 4 : end + 4 + n]))
                buf = buf[end + 4 + n :]
                continue
        chunk = s.recv(65536)
        assert chunk, "the connection ended after %d answers" % len(got)
        buf += chunk
    th.join(10)
    for k, ((status, body), w) in enumerate(zip(got, want, strict=True)):
        assert status == 200, (k, body[:200])
        if w == "metrics":
            assert b"sentinel_gateway_events_total" in body, k
        else:
            assert json.loads(body)["key"].startswith(w + ":"), (k, body[:200])
    s.close()


class _Client:
    """One pipelining client of the storm: sends a few requests at a time, reads their answers, checks each is its
    own request's (in order), and now and then resets the connection with requests in flight."""

    def __init__(self, i, port, rnd):
        self.i = i
        self.port = port
        self.rnd = rnd
        self.seq = 0
        self.answered = 0
        self.resets = 0
        self.errors = []
        self.sock = None
        self.connect()

    def connect(self):
        self.sock = socket.socket()
        self.sock.setblocking(False)
        self.sock.connect_ex(("127.0.0.1", self.port))
        self.out = b""
        self.inbuf = b""
        self.expect = []
        self.reset_after = self.rnd.randint(5, 50)

    def batch(self):
        n = self.rnd.randint(1, 8)
        for _ in range(n):
            self.seq += 1
            k = self.seq
            if k % 9 == 0:
                self.out += b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                self.expect.append(None)
            else:
                # one rack in five is routed to the terminal (its alarm waits for the disk); the rest are not
                rack = "%s%03dK%06d" % ("R" if k % 5 == 0 else "U", self.i, k)
                self.out += _event(rack, "gpu-storm-%03d" % self.i)
                self.expect.append(rack)

    def parse(self):
        while True:
            end = self.inbuf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.inbuf[:end].decode()
            n = int([ln.split(":")[1] for ln in head.split("\r\n") if ln.lower().startswith("content-length")][0])
            if len(self.inbuf) < end + 4 + n:
                return
            body = self.inbuf[end + 4 : end + 4 + n]
            self.inbuf = self.inbuf[end + 4 + n :]
            status = int(head.split(" ")[1])
            if not self.expect:
                self.errors.append("an answer nobody asked for: %r" % body[:100])
                continue
            want = self.expect.pop(0)
            if status != 200:
                self.errors.append("status %d: %r" % (status, body[:200]))
            elif want is None:
                if b'"terminals"' not in body:
                    self.errors.append("/healthz answered with %r" % body[:100])
            elif not json.loads(body)["key"].startswith(want + ":"):
                self.errors.append("asked %s, answered %r" % (want, body[:120]))
            self.answered += 1


def test_400_pipelining_clients_with_resets_for_20_s(tmp_path):
    """The gateway as its own process (sentinel-gateway): 400 clients pipeline events and /healthz, reading as they
    go, and reset at random with requests in flight, for 20 s. Every answer is its own request's, in order; a
    client that read to the end of a batch lost nothing."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cfg = tmp_path / "gw.toml"
    cfg.write_text(
        '[gateway]\nhost = "127.0.0.1"\nport = %d\nstate_dir = "%s"\nlog_format = "text"\n'
        "[delivery]\nqueue_size = 100000\n[grouping]\nenabled = false\n"
        '[terminals.room]\nurl = "http://127.0.0.1:9"\nkey_id = "k"\nsecret_env = "S"\n'
        '[routing]\ndefault = []\n[[routes]]\nterminals = ["room"]\nracks = ["R*"]\n' % (port, tmp_path / "state")
    )
    gw = subprocess.Popen(
        [sys.executable, "-m", "host_client.gateway.cli", "-c", str(cfg), "--log-level", "error"],
        env=dict(os.environ, S="s"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        from deploy_live import wait_http

        wait_http("http://127.0.0.1:%d/healthz" % port, gw)
        rnd = random.Random(23)
        sel = selectors.DefaultSelector()
        clients = [_Client(i, port, rnd) for i in range(400)]
        for c in clients:
            c.batch()
            sel.register(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
        end = time.monotonic() + 20
        while time.monotonic() < end:
            for key, ev in sel.select(0.5):
                c = key.data
                try:
                    if ev & selectors.EVENT_WRITE and c.out:
                        n = c.sock.send(c.out)
                        c.out = c.out[n:]
                    if ev & selectors.EVENT_READ:
                        data = c.sock.recv(65536)
                        if not data:
                            c.errors.append("the gateway closed the connection")
                            sel.unregister(c.sock)
                            c.sock.close()
                            c.connect()
                            c.batch()
                            sel.register(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
                            continue
                        c.inbuf += data
                        c.parse()
                except (BlockingIOError, InterruptedError):
                    pass
                if c.answered >= c.reset_after:
                    # a reset with requests in flight: a new connection starts afresh
                    c.batch()
                    try:
                        c.sock.send(c.out)
                    except OSError:
                        pass
                    sel.unregister(c.sock)
                    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    c.sock.close()
                    c.resets += 1
                    c.answered = 0
                    c.connect()
                    c.batch()
                    sel.register(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
                elif not c.expect and not c.out:
                    c.batch()
                sel.modify(c.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if c.out else 0), c)
        # the last batches: each client reads what it asked for
        deadline = time.monotonic() + 20
        while any(c.expect for c in clients) and time.monotonic() < deadline:
            for key, ev in sel.select(0.5):
                c = key.data
                try:
                    if ev & selectors.EVENT_WRITE and c.out:
                        c.out = c.out[c.sock.send(c.out) :]
                    if ev & selectors.EVENT_READ:
                        data = c.sock.recv(65536)
                        if data:
                            c.inbuf += data
                            c.parse()
                except (BlockingIOError, InterruptedError):
                    pass
                sel.modify(c.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if c.out else 0), c)
        errors = [(c.i, e) for c in clients for e in c.errors]
        assert not errors, errors[:10]
        lost = [(c.i, len(c.expect)) for c in clients if c.expect]
        assert not lost, "answers never came: %s" % lost[:10]
        resets = sum(c.resets for c in clients)
        answered = sum(c.seq for c in clients)
        assert resets > 100 and answered > 5000, (resets, answered)
        print("storm: %d requests from 400 clients, %d resets" % (answered, resets))
        for c in clients:
            sel.unregister(c.sock)
            c.sock.close()
        with requests.get("http://127.0.0.1:%d/healthz" % port, timeout=10) as r:
            assert r.status_code == 200 and r.json()["ok"] is True, r.text
    finally:
        gw.terminate()
        err = gw.communicate(timeout=20)[1].decode()
    assert gw.returncode == 0 and "Traceback" not in err, err[-3000:]
