"""The gateway's HTTP front (host_client/gateway/server.py) over real sockets: keep-alive and pipelining, the
limits (413, 431), 404/405, Expect: 100-continue, /healthz and /metrics, and durability: an event that created
an alarm is answered only once it is on disk, 503 when the save fails. RFC 9112 framing, chunked bodies and the
slow-client bounds are in tests/test_http_conformance.py and tests/test_gateway_slow_clients.py."""

import contextlib
import errno
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time

import pytest

from host_client.gateway.config import Config
from host_client.gateway.server import IngestFront
from host_client.gateway.service import Gateway


class Fake:
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


@pytest.fixture
def front(tmp_path):
    cfg = Config.from_dict(
        {
            "gateway": {"state_dir": str(tmp_path / "state"), "max_body": 4096},
            "terminals": {"room": {"url": "http://127.0.0.1:9", "key_id": "k", "secret_env": "S"}},
            "delivery": {"rate_interval_s": 0},
        },
        env={"S": "s"},
    )
    fake = Fake()
    with serving(cfg, fake) as (f, gw):
        yield f, gw, fake, tmp_path


@contextlib.contextmanager
def serving(cfg, fake, *, start=True):
    """A Gateway (its workers started, unless start=False) behind an IngestFront on a free loopback port."""
    gw = Gateway(cfg, clients={"room": fake})
    if start:
        gw.start()
    f = IngestFront(gw, cfg)
    ready = threading.Event()
    t = threading.Thread(target=f.run, args=("127.0.0.1", 0, ready.set), daemon=True)
    t.start()
    assert ready.wait(10)
    try:
        yield f, gw
    finally:
        f.stop()
        t.join(5)
        gw.stop()


def request(path, body=None, method=None, headers=None):
    method = method or ("POST" if body is not None else "GET")
    body = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    h = {"Host": "x", "Content-Length": str(len(body)), "Content-Type": "application/json"}
    h.update(headers or {})
    return (
        "%s %s HTTP/1.1\r\n" % (method, path) + "".join("%s: %s\r\n" % kv for kv in h.items()) + "\r\n"
    ).encode() + body


def read_answers(sock, n, timeout=10):
    sock.settimeout(timeout)
    buf = b""
    out = []
    while len(out) < n:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = buf[:end].decode()
            length = int(
                [ln.split(":", 1)[1] for ln in head.split("\r\n") if ln.lower().startswith("content-length:")][0]
            )
            if len(buf) >= end + 4 + length:
                status = int(head.split(" ")[1])
                out.append((status, head, buf[end + 4 : end + 4 + length]))
                buf = buf[end + 4 + length :]
                continue
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return out


EV = {"cluster_rack": "A03", "node_host": "gpu-worker-08", "event_type": "NCCL_TIMEOUT"}


def test_keep_alive_pipelining_in_order(front):
    f, gw, fake, _ = front
    s = socket.create_connection(("127.0.0.1", f.port))
    s.sendall(
        request("/api/v1/gpu_event", EV) + request("/api/v1/gpu_event", EV) + request("/healthz") + request("/metrics")
    )
    (a, b, c, d) = read_answers(s, 4)
    assert (a[0], json.loads(a[2])["result"], json.loads(a[2])["terminals"]) == (200, "alarm", {"room": "alone"})
    assert (b[0], json.loads(b[2])["result"]) == (200, "suppressed")
    assert c[0] == 200 and json.loads(c[2])["ok"] is True
    assert d[0] == 200 and b"sentinel_gateway_events_total" in d[2] and "text/plain" in d[1]
    s.close()


def test_answer_only_once_the_alarm_is_on_disk(front):
    f, gw, fake, tmp = front
    s = socket.create_connection(("127.0.0.1", f.port))
    s.sendall(request("/api/v1/gpu_event", dict(EV, cluster_rack="B01")))
    (a,) = read_answers(s, 1)
    assert a[0] == 200
    with open(os.path.join(str(tmp / "state"), "pending-room.json"), encoding="utf-8") as fh:
        on_disk = fh.read()
    assert "B01:gpu-worker-08:NCCL_TIMEOUT" in on_disk or fake.sent  # on disk, or already delivered
    s.close()


def test_save_failure_is_503(front):
    f, gw, fake, tmp = front
    p = gw.persisters["room"]

    def broken(data, *, fsync=True):
        raise OSError(28, "No space left on device")

    p.store.save = broken
    s = socket.create_connection(("127.0.0.1", f.port))
    s.sendall(request("/api/v1/gpu_event", dict(EV, cluster_rack="C01")))
    (a,) = read_answers(s, 1)
    assert a[0] == 503 and json.loads(a[2])["error"] == "persist_failed"
    s.sendall(request("/api/v1/alertmanager", {"version": "4", "alerts": []}))
    (b,) = read_answers(s, 1)
    assert b[0] == 503
    s.close()


@pytest.mark.parametrize(
    "raw,status",
    [
        (request("/api/v1/gpu_event", b"x" * 5000), 413),
        (
            # chunked is decoded (RFC 9112 7.1): "hello" is then no JSON
            b"POST /api/v1/gpu_event HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            400,
        ),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", 431),
        (b"garbage\r\n\r\n", 400),
        (request("/nope"), 404),
        (request("/api/v1/gpu_event", method="GET"), 405),
        (request("/metrics", b"{}"), 405),
        (request("/api/v1/gpu_event", b'{"a": NaN}'), 400),
        (request("/api/v1/gpu_event", b'{"node_host": "\\ud800"}'), 422),
    ],
)
def test_limits_and_errors(front, raw, status):
    f, gw, fake, _ = front
    s = socket.create_connection(("127.0.0.1", f.port))
    s.sendall(raw)
    (a,) = read_answers(s, 1)
    assert a[0] == status
    assert json.loads(a[2])["ok"] is False
    s.close()


def test_expect_100_continue_and_connection_close(front):
    f, gw, fake, _ = front
    s = socket.create_connection(("127.0.0.1", f.port))
    body = json.dumps(dict(EV, cluster_rack="D01")).encode()
    s.sendall(
        (
            "POST /api/v1/gpu_event HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nExpect: 100-continue\r\n"
            "Connection: close\r\n\r\n" % len(body)
        ).encode()
    )
    s.settimeout(5)
    assert s.recv(100).startswith(b"HTTP/1.1 100 Continue")
    s.sendall(body)
    (a,) = read_answers(s, 1)
    assert a[0] == 200 and "Connection: close" in a[1]
    time.sleep(0.1)
    assert s.recv(10) == b""  # closed after the answer
    s.close()


def test_answer_encoder_is_json_dumps():
    """The C encoder called directly (answers.encode_json) writes exactly what json.dumps does, lone surrogates and
    str-valued enums included (the answer's per-terminal outcome is one)."""
    from host_client.gateway.answers import encode_json as _ENCODE
    from host_client.gateway.lane import Outcome

    for obj in [
        {
            "ok": True,
            "key": 'A03:"gpu"\\\n\u00e9\ud800',
            "level": "P0",
            "n": 1.5,
            "x": None,
            "terminals": {"room": Outcome.ATTACHED},
            "results": [1, -2, 10**30, 0.1, [], {}],
        },
        [],
        "s",
    ]:
        assert _ENCODE(obj) == json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    with pytest.raises(TypeError):
        _ENCODE({"x": object()})


def test_the_answer_template_writes_what_the_encoder_does():
    """answers.encode_answer (a template for the answer nearly every event gets) against json.dumps, on the shapes
    it takes and the ones one change away that it must leave to the general encoder."""
    from host_client.gateway.answers import encode_answer as _encode_answer
    from host_client.gateway.lane import Outcome

    odd = 'A03:"gpu"\\\n\u00e9\ud800\u2028/</'
    shapes = [
        {"ok": True, "key": k, "level": lv, "result": r}
        for k in ("R000:gpu-node-00000:NCCL_TIMEOUT", odd, "")
        for lv in ("P0", "P1", "NORMAL")
        for r in ("alarm", "suppressed", "recovery")
    ]
    shapes += [dict(a, terminals={t: o}) for a in shapes[:6] for t in ("room", odd) for o in Outcome]
    shapes += [
        dict(shapes[0], terminals={"room": "alone", "office": "folded"}),
        dict(shapes[0], terminals={}),
        dict(shapes[0], ok=False),
        dict(shapes[0], ok=1),
        dict(shapes[0], level=2),
        {"key": "x", "ok": True},
        dict(shapes[0], extra=None),
        dict(shapes[0], terminals={"room": None}),
        {"ok": True, "results": []},
        dict(shapes[0], terminals={1: "alone"}),
    ]
    for a in shapes:
        assert _encode_answer(a) == json.dumps(a, ensure_ascii=False, separators=(",", ":")), a


@pytest.mark.parametrize(
    "raw,expect",
    [
        (b'{"a":1}', {"a": 1}),
        (b' {"a":1}\n', {"a": 1}),
        (b"[1,2]", [1, 2]),
        (b"null", None),
        (b'"x"', "x"),
        (b'{"a":1} x', "bad_json"),
        (b'{"a":1}}', "bad_json"),
        (b'{"a":', "bad_json"),
        (b"[NaN]", "bad_json"),
        (b'{"a":-Infinity}', "bad_json"),
        (b"[" * 40 + b"]" * 40, "too_deep"),
        (b"[" * 30000, "too_deep"),
        (b'{"a":"\\ud800"}', "bad_text"),
        (b"\xff{}", "bad_encoding"),
    ],
)
def test_decode_body_fast_path_keeps_every_rule(raw, expect):
    from host_client.gateway.ingest import BodyError, decode_body

    if isinstance(expect, str) and expect in ("bad_json", "too_deep", "bad_text", "bad_encoding"):
        with pytest.raises(BodyError) as e:
            decode_body(raw)
        assert e.value.code == expect
    else:
        assert decode_body(raw) == expect


def test_content_length_must_be_ascii_digits(front):
    """The head is parsed as bytes: a Latin-1 superscript digit is not a number (str.isdigit would say it is)."""
    f, gw, fake, _ = front
    s = socket.create_connection(("127.0.0.1", f.port))
    s.sendall(b"POST /api/v1/gpu_event HTTP/1.1\r\nHost: x\r\nContent-Length: \xb2\r\n\r\n{}")
    (a,) = read_answers(s, 1)
    assert a[0] == 400 and json.loads(a[2])["error"] == "bad_request"
    s.close()


def test_every_ingest_endpoint_after_the_dispatch_change(front):
    f, gw, fake, _ = front
    s = socket.create_connection(("127.0.0.1", f.port))
    am = {
        "version": "4",
        "status": "firing",
        "alerts": [
            {"status": "firing", "labels": {"alertname": "X"}, "fingerprint": "f1", "startsAt": "2026-01-01T00:00:00Z"}
        ],
    }
    s.sendall(
        request("/api/v1/alertmanager", am)
        + request("/api/v1/grafana", dict(am, version="1"))
        + request("/api/v1/gpu_event", [dict(EV, cluster_rack="E01")])
    )
    a, g, b = read_answers(s, 3)
    assert (a[0], json.loads(a[2])["alerts"]) == (200, 1)
    assert g[0] == 200
    assert b[0] == 200 and json.loads(b[2])["results"][0]["result"] == "alarm"
    m = gw.metrics_text()
    assert 'source="alertmanager"' in m and 'source="grafana"' in m
    s.close()


def test_a_large_answer_the_socket_cannot_take_at_once_arrives_whole_and_in_order(front):
    """Answers go out with os.write while the transport has nothing queued; what the kernel does not take (a small
    receive buffer, a reader that waits) goes through the transport, and the next answer queues behind it."""
    f, gw, fake, _ = front
    gw.cfg.max_body = f.limits.max_body = 1 << 20
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", f.port))
    s.sendall(request("/healthz"))
    read_answers(s, 1)
    # the gateway's side of this connection gets a small send buffer: a 100 KB answer cannot go out in one write
    (conn,) = [c for home in f.loops for c in home.conns.values()]
    server_side = socket.socket(fileno=os.dup(conn.fd))
    server_side.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    server_side.close()  # the duplicate only; the gateway keeps its own descriptor
    batch = [dict(EV, cluster_rack="L%03d" % i, node_host="gpu-large-answer-%04d" % i) for i in range(1000)]
    s.sendall(request("/api/v1/gpu_event", batch) + request("/api/v1/gpu_event", dict(EV, cluster_rack="M01")))
    time.sleep(0.5)  # the first answer (~100 KB) fills the socket; the second waits behind it
    a, b = read_answers(s, 2)
    results = json.loads(a[2])["results"]
    assert a[0] == 200 and len(a[2]) > 50_000 and len(results) == 1000
    assert [r["key"].split(":")[0] for r in results] == ["L%03d" % i for i in range(1000)]
    assert b[0] == 200 and json.loads(b[2])["key"].startswith("M01:")
    s.close()


def test_every_request_of_a_keep_alive_connection_is_parsed_on_its_own(front):
    """Heads that differ in one header, a path, or nothing: each request is framed and answered for itself."""
    f, gw, fake, _ = front
    s = socket.create_connection(("127.0.0.1", f.port))
    for i in range(3):
        s.sendall(request("/api/v1/gpu_event", dict(EV, cluster_rack="H%02d" % i), headers={"X-Probe": "same"}))
    assert [a[0] for a in read_answers(s, 3)] == [200, 200, 200]
    s.sendall(request("/healthz", headers={"X-Probe": "same"}))
    (h,) = read_answers(s, 1)
    assert h[0] == 200 and json.loads(h[2])["ok"] is True
    for i in range(300):
        s.sendall(request("/healthz", headers={"X-Probe": "n%d" % i}))
    assert [a[0] for a in read_answers(s, 300)] == [200] * 300
    s.close()


def test_many_request_targets_each_routed_by_its_own_path_in_bounded_memory(front):
    """The front keeps the path of the targets it has seen (a client sends the same few): a client that sends a
    thousand different ones gets each answered by its own path (a query string or absolute-form included, after
    the memo has been emptied and refilled) and the memo stays within its bound."""
    from host_client.gateway import connection

    f, gw, fake, _ = front
    s = socket.create_connection(("127.0.0.1", f.port))
    for i in range(1000):
        target = ("/healthz?n=%d" if i % 2 else "/nowhere/%d") % i
        s.sendall(request(target))
    answers = read_answers(s, 1000)
    assert [a[0] for a in answers] == [404 if i % 2 == 0 else 200 for i in range(1000)]
    assert len(connection._PATHS) <= connection._PATH_MEMO
    s.sendall(request("/api/v1/gpu_event?from=probe", EV) + request("http://x/api/v1/gpu_event", EV))
    assert [a[0] for a in read_answers(s, 2)] == [200, 200]
    s.close()


def test_the_token_is_checked_on_every_request_of_a_connection(tmp_path):
    """A keep-alive connection whose first request had the right token: its next request, identical but for a
    wrong token, is refused."""
    cfg = Config.from_dict(
        {
            "gateway": {"state_dir": str(tmp_path / "state")},
            "ingest": {"token_env": "TOK"},
            "terminals": {"room": {"url": "http://127.0.0.1:9", "key_id": "k", "secret_env": "S"}},
            "delivery": {"rate_interval_s": 0},
        },
        env={"S": "s", "TOK": "t" * 32},
    )
    with serving(cfg, Fake()) as (f, _gw):
        s = socket.create_connection(("127.0.0.1", f.port))
        good = request("/api/v1/gpu_event", EV, headers={"Authorization": "Bearer " + "t" * 32})
        bad = request("/api/v1/gpu_event", EV, headers={"Authorization": "Bearer " + "u" * 32})
        s.sendall(good)
        (a,) = read_answers(s, 1)
        s.sendall(bad)
        (b,) = read_answers(s, 1)
        assert (a[0], b[0]) == (200, 401)
        s.close()


def test_a_thousand_idle_connections_and_resets_do_not_stop_an_event(front):
    """1,000 connections that send nothing, and clients that reset mid-request: the loop serves a P0 on a new
    connection all the while, and /healthz stays ok."""
    f, gw, fake, _ = front
    idle = [socket.create_connection(("127.0.0.1", f.port)) for _ in range(1000)]
    try:
        for _ in range(20):
            r = socket.create_connection(("127.0.0.1", f.port))
            r.sendall(request("/api/v1/gpu_event", EV)[:40])
            r.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            r.close()  # RST with half a head sent
        s = socket.create_connection(("127.0.0.1", f.port))
        s.sendall(request("/api/v1/gpu_event", dict(EV, cluster_rack="I01")) + request("/healthz"))
        a, h = read_answers(s, 2)
        assert a[0] == 200 and json.loads(a[2])["result"] == "alarm"
        assert h[0] == 200 and json.loads(h[2])["ok"] is True
        s.close()
        assert sum(len(home.conns) for home in f.loops) >= 1000
    finally:
        for c in idle:
            c.close()


def test_stop_closes_every_connection_and_returns(tmp_path):
    cfg = Config.from_dict(
        {
            "gateway": {"state_dir": str(tmp_path / "state"), "io_loops": 2},
            "terminals": {"room": {"url": "http://127.0.0.1:9", "key_id": "k", "secret_env": "S"}},
        },
        env={"S": "s"},
    )
    with serving(cfg, Fake(), start=False) as (f, _gw):
        assert len(f.loops) == 2
        conns = [socket.create_connection(("127.0.0.1", f.port)) for _ in range(10)]
        time.sleep(0.2)  # accepted
        f.stop()
        for home in f.loops:
            home.thread.join(5)
            assert not home.thread.is_alive()
        for c in conns:
            c.settimeout(5)
            assert c.recv(10) == b""  # the gateway closed its end
            c.close()
        # a persister reporting a write after the end: dropped, not written into the closed wake-up pipe
        f.loops[0].call_soon_threadsafe(lambda: None)


def test_a_client_that_sends_and_never_reads_is_held_to_a_window(front):
    """Pipelined requests from a client that never reads its answers: once 64 KB of its answers wait, the front
    stops reading that connection (TCP makes the client wait), holds a bounded amount for it, and serves everyone
    else."""
    f, gw, fake, _ = front
    greedy = socket.socket()
    greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    greedy.connect(("127.0.0.1", f.port))
    one = request("/metrics")  # a few KB of answer each
    sent = 0
    greedy.settimeout(1)
    try:
        while sent < 64 << 20:
            sent += greedy.send(one * 64)
    except TimeoutError:
        pass  # the kernel buffers are full: the client must wait
    assert sent < 64 << 20
    (conn,) = [c for home in f.loops for c in home.conns.values()]
    deadline = time.monotonic() + 5
    while conn.mask & select.EPOLLIN and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not conn.mask & select.EPOLLIN  # not read from
    assert len(conn.held) <= 65536 and len(conn.inq) * len(one) <= 16384 + len(one)
    # what it holds of answers: the window, and what one piece of requests fed to the parser answers
    assert len(conn.out or b"") <= 65536 + (16384 // len(one) + 1) * 8192, len(conn.out)
    s = socket.create_connection(("127.0.0.1", f.port))
    s.sendall(request("/api/v1/gpu_event", dict(EV, cluster_rack="J01")))
    (a,) = read_answers(s, 1)
    assert a[0] == 200
    s.close()
    greedy.close()


class _NoDescriptors:
    """The listening socket as accept() sees it when the process is out of file descriptors, `fail` times."""

    def __init__(self, sock, fail):
        self.sock = sock
        self.fail = fail
        self.calls = 0

    def fileno(self):
        return self.sock.fileno()

    def accept(self):
        self.calls += 1
        if self.fail > 0:
            self.fail -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return self.sock.accept()

    def close(self):
        self.sock.close()


def test_out_of_descriptors_pauses_accepting_says_so_and_recovers(front, caplog):
    """accept() failing with EMFILE leaves the listening socket readable: the front stops accepting for 100 ms at a
    time instead of spinning, says so in a log line, /healthz and /metrics, keeps serving the connections it has,
    and takes new ones once descriptors are back."""
    f, gw, fake, _ = front
    held = socket.create_connection(("127.0.0.1", f.port))
    held.sendall(request("/healthz"))
    read_answers(held, 1)
    fakes = []
    for home in f.loops:  # whichever loop the kernel hands it to
        home.sock = _NoDescriptors(home.sock, fail=5)
        fakes.append(home.sock)
    caplog.set_level("WARNING", logger="sentinel.gateway")
    waiting = socket.create_connection(("127.0.0.1", f.port))  # in the kernel's queue, not yet accepted
    time.sleep(0.25)
    assert 1 <= sum(x.calls for x in fakes) <= 5  # 100 ms apart, not a spin
    held.sendall(request("/healthz"))
    (h,) = read_answers(held, 1)
    health = json.loads(h[2])
    assert health["ok"] is False and "not accepting connections: Too many open files" in health["reasons"][0]
    held.sendall(request("/metrics"))
    (m,) = read_answers(held, 1)
    assert b"sentinel_gateway_accept_paused_total 1\n" in m[2]
    waiting.sendall(request("/api/v1/gpu_event", dict(EV, cluster_rack="K01")))
    (a,) = read_answers(waiting, 1)  # accepted once descriptors are back
    assert a[0] == 200
    assert sum(x.calls for x in fakes) >= 6
    held.sendall(request("/healthz"))
    assert json.loads(read_answers(held, 1)[0][2])["ok"] is True
    events = [r.getMessage() for r in caplog.records]
    assert events.count("accept_paused") == 1 and "accept_resumed" in events
    held.close()
    waiting.close()


def test_metrics_count_sheds_and_timeouts(front):
    f, gw, fake, _ = front
    s = socket.create_connection(("127.0.0.1", f.port))
    s.sendall(request("/healthz") + request("/metrics"))
    h, m = read_answers(s, 2)
    assert "sender" not in json.loads(h[2])  # the C sender is gone, and what /healthz said of it
    text = m[2].decode()
    for line in (
        "sentinel_gateway_connections_shed_total 0",
        'sentinel_gateway_request_timeouts_total{phase="head"} 0',
        'sentinel_gateway_request_timeouts_total{phase="body"} 0',
        "sentinel_gateway_partial_bodies_refused_total 0",
        "sentinel_gateway_max_connections %d" % f.max_connections,
    ):
        assert line + "\n" in text, line
    assert "native_send" not in text and "send_queue" not in text
    s.close()


def test_a_client_that_resets_with_answers_queued_leaves_the_rest_served(front):
    """50 pipelined events, then a reset before any answer is read: whatever was queued for that connection is
    dropped with it, and a P0 on another connection is answered and delivered."""
    f, gw, fake, _ = front
    for i in range(5):
        r = socket.create_connection(("127.0.0.1", f.port))
        r.sendall(b"".join(request("/api/v1/gpu_event", dict(EV, cluster_rack="R%d%02d" % (i, k))) for k in range(50)))
        r.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        r.close()
    s = socket.create_connection(("127.0.0.1", f.port))
    # another fault type, so that it is not folded into the summary of the reset clients' timeouts
    s.sendall(
        request(
            "/api/v1/gpu_event",
            {"cluster_rack": "K01", "node_host": "gpu-k01", "event_type": "XID_FATAL", "gpu_index": 3, "gpu_util": 0.0},
        )
    )
    (a,) = read_answers(s, 1)
    assert a[0] == 200 and json.loads(a[2])["result"] == "alarm"
    s.close()
    deadline = time.monotonic() + 10
    while not any("K01" in x.text for x in fake.sent):
        assert time.monotonic() < deadline, "not delivered: %s" % [x.text for x in fake.sent]
        time.sleep(0.05)


def _shrink_server_sndbuf(f, client):
    """The gateway's side of this client's connection gets a 4 KB send buffer (through a duplicate descriptor)."""
    me = client.getsockname()
    for _ in range(100):
        for home in f.loops:
            for c in list(home.conns.values()):
                try:
                    dup = socket.socket(fileno=os.dup(c.fd))
                except OSError:
                    continue
                try:
                    if dup.getpeername() == me:
                        dup.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
                        return
                except OSError:
                    pass  # a client that reset meanwhile
                finally:
                    dup.close()
        time.sleep(0.01)
    raise AssertionError("no server side found for %s" % (me,))


def test_many_clients_each_get_their_own_answers_in_order(front):
    """40 clients at once, each pipelining its own events and every seventh a /metrics (several KB), some reading
    slowly through a tiny receive buffer (so answers wait in the loop), some resetting half-way: every client that
    reads to the end gets exactly one answer per request, in its order (each event's answer names its own request's
    rack)."""
    import random

    f, gw, fake, _ = front
    rnd = random.Random(12)
    results = {}

    def client(i):
        slow = i % 3 == 0
        s = socket.socket()
        if slow:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        s.connect(("127.0.0.1", f.port))
        if slow:
            s.sendall(request("/healthz"))
            read_answers(s, 1)
            _shrink_server_sndbuf(f, s)
        n = rnd.randint(20, 60)
        racks = ["C%02d%03d" % (i, k) for k in range(n)]
        reqs = [
            request("/api/v1/gpu_event", dict(EV, cluster_rack=r, node_host="gpu-many-%02d" % i))
            if k % 7
            else request("/metrics")
            for k, r in enumerate(racks)
        ]
        if i % 10 == 9:  # resets half-way, answers unread
            s.sendall(b"".join(reqs[: n // 2]))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
            return
        s.sendall(b"".join(reqs))
        if slow:
            time.sleep(0.3)  # the answers pile up in the kernel first
        got = read_answers(s, n, timeout=20)
        s.close()
        results[i] = (racks, got)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 36
    for i, (racks, got) in results.items():
        assert len(got) == len(racks), i
        for k, (status, _head, body) in enumerate(got):
            assert status == 200, (i, k, body[:200])
            if k % 7:
                a = json.loads(body)
                assert a["key"].startswith(racks[k] + ":"), (i, k, a["key"])  # this request's own answer
            else:
                assert b"sentinel_gateway_events_total" in body  # the /metrics it asked for
    s = socket.create_connection(("127.0.0.1", f.port))
    s.sendall(request("/healthz"))
    (h,) = read_answers(s, 1)
    assert json.loads(h[2])["ok"] is True
    s.close()


def test_the_instruction_bench_takes_every_request_through_the_front():
    """bench/bench_ingest_instructions.py --modes front counts what it says: its child (run here without valgrind)
    hands the storm's requests to a connection's readable() and every one is answered by the front."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bench = os.path.join(root, "bench", "bench_ingest_instructions.py")
    for mode in ([], ["--front"]):
        p = subprocess.run(
            [sys.executable, bench, "--child", "40", "--made", "120"] + mode,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stderr


def test_closed_connections_are_freed_without_the_collector(front):
    """A connection's parser holds its callbacks; were that cycle left at close, only the cyclic collector (which
    the front sets to run rarely) would free it, and a flood of closed connections would stay in memory (the
    slow-client test found ~6 MB). With the collector off, 300 connections closed every way a connection ends
    leave no connection object behind: the client's close, a refusal that closes while llhttp is still parsing a
    pipelined request behind it, an answer with Connection: close, and a reset mid-head."""
    import gc

    from host_client.gateway.connection import Conn

    f, gw, fake, _ = front

    def conns_alive():
        return sum(1 for o in gc.get_objects() if type(o) is Conn)

    def wait_closed():
        # every connection closed, and the disk-wait timers of the answered events gone by (each holds its
        # connection until persist_wait_s has passed)
        end = time.monotonic() + 10
        while any(home.conns or home.timers for home in f.loops) and time.monotonic() < end:
            time.sleep(0.05)
        assert not any(home.conns or home.timers for home in f.loops)

    gc.collect()
    gc.disable()
    try:
        before = conns_alive()
        for i in range(75):
            s = socket.create_connection(("127.0.0.1", f.port))  # answered, then the client closes
            s.sendall(request("/api/v1/gpu_event", dict(EV, cluster_rack="F%02d" % i)))
            assert read_answers(s, 1)[0][0] == 200
            s.close()
            s = socket.create_connection(("127.0.0.1", f.port))  # refused, a request parsed behind it
            s.sendall(b"POST /api/v1/gpu_event HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}" + request("/healthz"))
            assert read_answers(s, 1)[0][0] == 400
            s.close()
            s = socket.create_connection(("127.0.0.1", f.port))  # an answer that closes, then more sent
            s.sendall(request("/healthz", headers={"Connection": "close"}) + request("/healthz"))
            assert read_answers(s, 1)[0][0] == 200
            s.close()
            s = socket.create_connection(("127.0.0.1", f.port))  # reset with half a head sent
            s.sendall(request("/api/v1/gpu_event", EV)[:40])
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        wait_closed()
        # at most two stay, each replaced by the next: the one the loop's turn handled last (a local of its run())
        # and the last ingest request's, which the service keeps to name a refused client
        assert conns_alive() - before <= 2, conns_alive() - before
    finally:
        gc.enable()
