# The board server's connection budget (sentinel_fw.server): who is shed first when every place is taken, and which
# new connections take a place, on exact ages and byte counts (runs under MicroPython and on CPython).
from sentinel_fw import server
from sentinel_fw.server import Server, _Conn

ANSWER = 3  # server._ANSWER: a private const(), which is no global on MicroPython

P0_HEAD = b"POST /api/v1/send_msg HTTP/1.1\r\nHost: box\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"


def _conn(since, got=b""):
    return _Conn(None, None, None, since, 2048, got)


def _server(*conns):
    s = Server(None, 2048, max_conn=len(conns))
    s.conns = list(conns)
    return s


def test_an_idle_one_goes_first_the_oldest_of_them():
    old_idle, young_idle, slow = _conn(1000), _conn(1500), _conn(900, b"P")
    s = _server(slow, young_idle, old_idle)
    assert s.worst(2000) is old_idle
    s.conns.remove(old_idle)
    assert s.worst(2000) is young_idle
    s.conns.remove(young_idle)
    assert s.worst(2000) is slow


def test_then_the_fewest_bytes_per_second_since_the_accept():
    drip = _conn(0, b"POST")  # 4 B in 2 s: 2 B/s
    liar = _conn(1500, P0_HEAD + b"0123")  # 101 B in 0.5 s: 202 B/s
    fresh = _conn(1990, b"P")  # 1 B in 10 ms: 100 B/s
    s = _server(fresh, liar, drip)
    assert s.worst(2000) is drip
    s.conns.remove(drip)
    assert s.worst(2000) is fresh
    s.conns.remove(fresh)
    assert s.worst(2000) is liar


def test_one_being_answered_is_never_shed():
    a, b = _conn(0), _conn(100, b"GET")
    a.phase = b.phase = ANSWER
    s = _server(a, b)
    assert s.worst(60000) is None
    assert s.worst(60000, P0_HEAD + b"{}123456789") is None  # nobody to shed: it waits in the listen queue


def test_a_whole_head_takes_the_place_of_the_worst_whatever_it_is():
    # http.client sends the head and the body in two sends: the body may not be in yet.
    for data in (P0_HEAD + b"01234567890", P0_HEAD):
        for worst in (_conn(1000), _conn(1000, b"POST /"), _conn(1999, P0_HEAD + b"0123")):
            assert _server(worst).worst(2000, data) is worst


def test_part_of_a_head_takes_only_an_idle_ones_place():
    idle, slow = _conn(1999), _conn(0, b"P")
    assert _server(idle).worst(2000, b"POST /api") is idle
    assert _server(slow).worst(2000, b"POST /api") is None  # the new one is closed
    assert _server(slow).worst(2000, P0_HEAD[:-2]) is None  # the blank line not in yet
    assert _server(slow, idle).worst(2000, b"POST /api") is idle


def test_nothing_takes_no_place():
    # (judged once its grace is over: see below)
    assert _server(_conn(1000)).worst(2260, b"") is None
    assert _server(_conn(0, b"P")).worst(2260, b"") is None
    assert _server(_conn(1000), _conn(2000)).worst(2260, b"") is None


class _Sock:
    # A new connection that has sent nothing yet: a non-blocking recv() raises EAGAIN.
    closed = False

    def recv(self, n):
        raise OSError(11)

    def close(self):
        self.closed = True


async def test_one_that_has_sent_nothing_waits_its_grace_then_is_judged():
    slow = _conn(0, b"P")
    s = _server(slow)
    late = _Sock()
    assert await s.admit(late, 2000, 2000) is False
    assert s.fresh == [(late, 2000)] and not late.closed and s.conns == [slow]  # no place taken, nobody shed
    s.fresh = []
    assert await s.admit(late, 2000, 2249) is False and s.fresh == [(late, 2000)]  # still within its 250 ms
    s.fresh = []
    assert await s.admit(late, 2000, 2250) is False
    assert late.closed and s.fresh == [] and s.conns == [slow]  # still nothing: not better than a slow one


async def test_the_oldest_that_has_sent_nothing_goes_first_when_the_wait_is_full():
    s = Server(None, 2048, max_conn=2, backlog=2)
    a, b, c = _Sock(), _Sock(), _Sock()
    for sock, t in ((a, 1000), (b, 1010), (c, 1020)):
        await s.admit(sock, t, t)
    assert a.closed and s.fresh == [(b, 1010), (c, 1020)] and not b.closed and not c.closed


def _whole(data):
    # Whether a new connection that sent data takes the place of one that has sent something (only a whole head
    # does).
    slow = _conn(0, b"P")
    return _server(slow).worst(2000, data) is slow


def test_what_counts_as_a_whole_head():
    assert _whole(b"GET /api/v1/status HTTP/1.1\r\nHost: box\r\n\r\n")
    assert _whole(P0_HEAD + b"01234567890 and more")
    assert _whole(P0_HEAD)  # the body follows in its own segment
    assert not _whole(P0_HEAD[:-1])  # one byte short of the blank line
    assert not _whole(b"GET /api/v1/status HTTP/1.1\r\nHost: box\r\n")
    assert not _whole(b"")


def test_bytes_read_before_the_task_count_and_are_read_first():
    c = _conn(0, b"GET / HTTP/1.1\r\n")
    assert c.got == 16 and c.buf == b"GET / HTTP/1.1\r\n"
    assert server._Conn(None, None, None, 0, 2048).got == 0


async def test_a_turn_looks_at_each_waiting_one_once():
    # One that still has sent nothing goes back to the wait, and the turn ends (it once looked at it forever).
    from sentinel_fw import ticks

    s = Server(None, 2048, max_conn=2)
    late = _Sock()
    s.fresh = [(late, ticks.ms())]
    await s._step(None, lambda timeout: ())  # nothing waits in the listen queue
    assert s.fresh[0][0] is late and len(s.fresh) == 1 and not late.closed
