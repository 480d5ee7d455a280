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
    drip = _conn(0, b"POST")                 # 4 B in 2 s: 2 B/s
    liar = _conn(1500, P0_HEAD + b"0123")    # 101 B in 0.5 s: 202 B/s
    fresh = _conn(1990, b"P")                # 1 B in 10 ms: 91 B/s (ages count from 1 ms)
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


def test_a_whole_request_takes_the_place_of_the_worst_whatever_it_is():
    whole = P0_HEAD + b"01234567890"
    for worst in (_conn(1000), _conn(1000, b"POST /"), _conn(1999, P0_HEAD + b"0123")):
        assert _server(worst).worst(2000, whole) is worst


def test_part_of_a_request_takes_only_an_idle_ones_place():
    idle, slow = _conn(1999), _conn(0, b"P")
    assert _server(idle).worst(2000, b"POST /api") is idle
    assert _server(slow).worst(2000, b"POST /api") is None  # the new one is closed
    assert _server(slow).worst(2000, P0_HEAD + b"0123") is None  # a Content-Length lie is part of a request
    assert _server(slow, idle).worst(2000, b"POST /api") is idle


def test_nothing_takes_only_an_older_idle_ones_place():
    older, same_turn = _conn(1999), _conn(2000)
    assert _server(older).worst(2000, b"") is older
    assert _server(same_turn).worst(2000, b"") is None  # accepted in the same turn: the one in place stays
    assert _server(_conn(0, b"P")).worst(2000, b"") is None


def _whole(data):
    # Whether a new connection that sent data takes the place of one that has sent something (only a whole request
    # does).
    slow = _conn(0, b"P")
    return _server(slow).worst(2000, data) is slow


def test_what_counts_as_a_whole_request():
    assert _whole(b"GET /api/v1/status HTTP/1.1\r\nHost: box\r\n\r\n")
    assert _whole(P0_HEAD.replace(b"Content-Length", b"content-LENGTH") + b"01234567890")
    assert _whole(P0_HEAD + b"01234567890 and more")
    assert not _whole(P0_HEAD + b"0123456789")          # one byte short
    assert not _whole(b"GET /api/v1/status HTTP/1.1\r\nHost: box\r\n")  # no blank line yet
    assert not _whole(b"")
    # A Content-Length the reader refuses at once (400) is answered at once: whole for the budget.
    assert _whole(b"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n")
    assert _whole(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n")


def test_bytes_read_before_the_task_count_and_are_read_first():
    c = _conn(0, b"GET / HTTP/1.1\r\n")
    assert c.got == 16 and c.buf == b"GET / HTTP/1.1\r\n"
    assert server._Conn(None, None, None, 0, 2048).got == 0
