"""emulator.front's socket budget: over its bound a new connection is taken and the slowest idle one is shed; a
dripping client is cut at its head deadline with a 408. (Latency, 1,000 slow sockets: bench/bench_slowclients.py)"""

import socket
import time

from emulator.front import Front


def _app(environ, start_response):
    start_response("200 OK", [("Content-Type", "application/json")])
    return [b'{"ok": true}']


def _get(port):
    s = socket.create_connection(("127.0.0.1", port), 5)
    s.sendall(b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n")
    s.shutdown(socket.SHUT_WR)
    return _rest(s)


def _rest(s, out=b""):
    """What s sends until it closes, after out; s is closed."""
    while True:
        d = s.recv(4096)
        if not d:
            break
        out += d
    s.close()
    return out


def test_over_the_bound_the_idle_ones_are_shed_and_a_request_still_served():
    f = Front(_app, "127.0.0.1", 0, max_connections=4).start()
    idle = []
    try:
        for _ in range(10):
            idle.append(socket.create_connection(("127.0.0.1", f.port), 5))
            time.sleep(0.02)
        time.sleep(0.15)  # older than the 100 ms every connection is granted
        assert _get(f.port).startswith(b"HTTP/1.1 200")
        assert f.stats["shed"] >= 6 and f.stats["peak"] <= 10
        closed = 0
        for s in idle:
            s.settimeout(2)
            try:
                closed += s.recv(1) == b""
            except (TimeoutError, ConnectionResetError):
                closed += 1
        assert closed >= 6
    finally:
        for s in idle:
            s.close()
        f.stop()


def test_a_drip_is_cut_at_the_head_deadline():
    f = Front(_app, "127.0.0.1", 0, head_timeout=0.5).start()
    try:
        s = socket.create_connection(("127.0.0.1", f.port), 5)
        t0 = time.monotonic()
        out = b""
        s.sendall(b"GET /x HTTP/1.1\r\n")  # a whole request line, then the headers a byte at a time
        for b in b"Host: terminal\r\nX-Slow: 1\r\n":
            try:
                s.sendall(bytes([b]))
            except OSError:
                break
            s.settimeout(0.1)
            try:
                out += s.recv(4096)
                if out:
                    break
            except TimeoutError:
                pass
        s.settimeout(5)
        out = _rest(s, out)
        assert out.startswith(b"HTTP/1.1 408") and b'"timeout"' in out
        assert time.monotonic() - t0 < 4
        # Not one whole line by the deadline: closed without an answer.
        s = socket.create_connection(("127.0.0.1", f.port), 5)
        s.sendall(b"GET /x")
        s.settimeout(5)
        assert s.recv(4096) == b""
        s.close()
    finally:
        f.stop()
