"""The gateway's native answer sender (host_client/gateway/_nativesend.c) on real socket pairs: every byte arrives
in the order it was handed over, a descriptor is closed only after its last answer, what a socket does not take comes
back to the loop in order and before its fence, a failed send drops what follows for that descriptor, stop() sends
what is queued first, and bad arguments are refused without touching the queue."""

import errno
import os
import select
import socket
import sys
import time

import pytest

from host_client.gateway import server


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the extension is built on Linux")
def test_the_native_sender_is_built_where_the_suite_runs():
    # pyproject.toml builds it as an optional extension: a failed build would only be a warning at install and the
    # gateway would fall back, about a third slower under a storm. The suite's machine has gcc, so it must be there.
    assert server.NativeSender is not None, "host_client/gateway/_nativesend.c was not built at install"


Sender = server.NativeSender
# the rest tests the extension itself (the test above fails when it is missing)
needs_native = pytest.mark.skipif(Sender is None, reason="native sender not built")


def wait_returned(s, n, timeout=5):
    """The sender's hand-backs, polling its eventfd like the loop does, until there are n."""
    out = []
    ep = select.epoll()
    ep.register(s.fileno(), select.EPOLLIN)
    end = time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < end:
            if ep.poll(0.1):
                out += s.returned()
    finally:
        ep.close()
    return out


def read_all(sock, timeout=5):
    sock.settimeout(timeout)
    buf = b""
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            return buf
        buf += chunk


@needs_native
def test_answers_arrive_in_order_and_the_close_comes_after_the_last():
    a, b = socket.socketpair()
    s = Sender()
    try:
        fd = a.detach()
        parts = [b"answer-%03d;" % i for i in range(200)]
        for p in parts:
            s.send(fd, p, 7)
        s.close(fd)
        s.flush()
        assert read_all(b) == b"".join(parts)  # every byte, in order, then EOF: closed after the last
        assert s.returned() == []
        deadline = time.monotonic() + 5
        while s.queued and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (s.queued, s.sent, s.held, s.failed) == (0, 200, 0, 0)
        assert s.enqueued == s.done == 201  # 200 sends and the close, numbered in order, all done
    finally:
        s.stop()
        b.close()


@needs_native
def test_what_a_full_socket_does_not_take_comes_back_in_order_before_its_fence():
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s = Sender()
    fd = a.fileno()
    try:
        chunks = [bytes([65 + i]) * 50_000 for i in range(3)]  # far more than the two buffers hold
        for c in chunks:
            s.send(fd, c, 42)
        s.fence(fd, 42)
        s.flush()
        back = wait_returned(s, 4)
        assert [r[:3] for r in back] == [(fd, 42, 0)] * 3 + [(fd, 42, -1)]  # three hand-backs, then the fence
        assert back[-1][3] == b""
        got = b""
        b.settimeout(0.5)
        try:
            while True:
                got += b.recv(1 << 16)
        except TimeoutError:
            pass
        # what the peer read, then what came back, is exactly what was handed over: nothing lost, nothing reordered
        assert 0 < len(got) < 50_000
        assert got + b"".join(r[3] for r in back) == b"".join(chunks)
        assert s.held == 1 and s.sent == 0
        # once closed, the descriptor number starts afresh: a new socket under it is sent to again
        s.close(fd)
        a.detach()
        s.flush()
        assert read_all(b) == b""
        c, d = socket.socketpair()
        fd2 = c.detach()
        s.send(fd2, b"fresh", 43)
        s.close(fd2)
        s.flush()
        assert read_all(d) == b"fresh"
        d.close()
    finally:
        s.stop()
        b.close()


@needs_native
def test_a_send_to_a_peer_that_went_away_drops_what_follows_and_says_why():
    a, b = socket.socketpair()
    b.close()
    s = Sender()
    fd = a.fileno()
    try:
        s.send(fd, b"first", 9)
        s.send(fd, b"second", 9)
        s.fence(fd, 9)
        s.flush()
        back = wait_returned(s, 2)
        assert back[0][:3] == (fd, 9, errno.EPIPE) and back[0][3] == b""
        assert back[1][:3] == (fd, 9, -1)  # "second" was dropped, not handed back or sent
        assert s.failed == 1
    finally:
        s.stop()
        a.close()


@needs_native
def test_stop_sends_what_is_queued_first_and_refuses_more():
    a, b = socket.socketpair()
    s = Sender()
    fd = a.detach()
    for i in range(100):  # (fewer than fill a socket pair's buffer unread)
        s.send(fd, b"%04d" % i, 1)
    s.close(fd)
    s.stop()  # no flush: stop wakes the thread and waits for the queue
    assert read_all(b) == b"".join(b"%04d" % i for i in range(100))
    assert s.returned() == [] and s.sent == 100
    with pytest.raises(ValueError, match="stopped"):
        s.send(0, b"x", 1)
    with pytest.raises(ValueError, match="stopped"):
        s.close(0)
    s.stop()  # twice is fine
    b.close()


@needs_native
def test_bad_arguments_are_refused_and_leave_the_queue_as_it_was():
    s = Sender()
    try:
        with pytest.raises(ValueError):
            s.send(-1, b"x", 1)
        with pytest.raises(TypeError):
            s.send(1, "text, not bytes", 1)
        with pytest.raises(TypeError):
            s.send(1, b"x")
        with pytest.raises(OverflowError):
            s.send(1, b"x", -5)
        with pytest.raises(ValueError):
            s.close(-3)
        with pytest.raises(TypeError):
            s.fence("1", 2)
        assert s.queued == 0 and s.returned() == []
    finally:
        s.stop()


@needs_native
def test_a_memoryview_is_copied_at_hand_over():
    a, b = socket.socketpair()
    s = Sender()
    try:
        data = bytearray(b"before")
        s.send(a.fileno(), memoryview(data), 1)
        data[:] = b"AFTER!"  # the caller may reuse its buffer at once
        s.close(a.detach())
        s.flush()
        assert read_all(b) == b"before"
    finally:
        s.stop()
        b.close()


@needs_native
def test_many_senders_come_and_go_without_leaking_descriptors():
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        s = Sender()
        s.stop()
        del s
    for _ in range(50):
        Sender()  # dropped unstopped: its thread is ended when it is freed
    assert len(os.listdir("/proc/self/fd")) <= before + 2
