"""The gateway's record of acknowledgements (host_client/gateway/acks.py): P0s open per terminal, what a terminal's
status page says was acknowledged, escalation by the clock, ACK groups, and status pages that are not a terminal's.
Status pages here are the terminal core's own snapshot (the one both shells serve), not hand-written JSON."""

import json
import logging

import pytest

from host_client.gateway.acks import STATUS_MAX, AckBook, AckPoller
from host_client.gateway.config import Config
from host_client.gateway.delivery_queue import Item, ItemKind
from host_client.gateway.incident import Incident
from host_client.gateway.service import TAKEN
from host_client.gateway.wire import wire_key
from sentinel_core.alarm import NORMAL, P0, P1
from sentinel_core.terminal import Terminal

T0 = 1_787_000_000.0
KEY = "A03:gpu-worker-08:NCCL_TIMEOUT"


def config(**routing):
    d = {
        "terminals": {
            "room": {"url": "http://127.0.0.1:9", "key_id": "k", "secret_env": "S", "ack_group": "on-call"},
            "office": {"url": "http://127.0.0.1:8", "key_id": "o", "secret_env": "S", "ack_group": "on-call"},
            "lab": {"url": "http://127.0.0.1:7", "key_id": "l", "secret_env": "S"},
        },
        "routes": [{"racks": ["B*"], "terminals": ["lab"], "escalate_after_s": 60}],
        "routing": dict({"default": ["room", "office"]}, **routing),
    }
    return Config.from_dict(d, env={"S": "x"})


def item(key=KEY, level=P0, kind=ItemKind.ALONE):
    return Item(
        id="i1", seq=1, level=level, text="t", key=key, carried=[key], created=T0, deadline=T0 + 3600, kind=kind
    )


def incident(key=KEY, rack="A03", host="gpu-worker-08", kind="NCCL_TIMEOUT", level=P0, recovery=False):
    inc = Incident(key, level, rack=rack, host=host, kind=kind, text="t", labels={"rack": rack}, source="gpu_event")
    inc.recovery = recovery
    return inc


def status(acked=(), now=T0):
    """A real terminal's status page: the emulator's core, with these incidents acknowledged by its ACK endpoint."""
    t = Terminal()
    for k in acked:
        t.on_ack(k, False, now)
    return json.dumps(t.snapshot(now)).encode()


def delivered_p0(book, terminal="room", key=KEY, at=T0):
    book.note_incident(incident(key))
    book.delivered(terminal, item(key), at)


def test_an_ack_read_from_the_status_page_is_timed_and_closes_the_p0():
    book = AckBook(config())
    delivered_p0(book)
    assert book.terminals_open() == ["room"]
    r = book.read_status("room", status(), T0 + 3)
    assert r.acked == [] and r.rejected is None
    r = book.read_status("room", status([wire_key(KEY)]), T0 + 42)
    (a,) = r.acked
    assert (a.terminal, a.key, a.after_s, a.via) == ("room", KEY, 42.0, "button")
    assert book.terminals_open() == []
    hist, acks, _rej, opened, esc = book.metrics(T0 + 50)
    h = hist[("room", "P0")]
    assert h[-2] == 1 and h[-1] == 42.0 and acks == {("room", "button"): 1} and opened == {} and esc == []


def test_escalation_comes_by_the_clock_with_the_incidents_labels_and_per_route():
    book = AckBook(config(escalate_after_s=5))
    delivered_p0(book)
    book.note_incident(incident("B07:gpu-1:XID", rack="B07", host="gpu-1", kind="XID"))
    book.delivered("lab", item("B07:gpu-1:XID"), T0)
    assert book.due_escalations(T0 + 4.9) == []
    (o,) = book.due_escalations(T0 + 5)
    assert (o.terminal, o.rack, o.node, o.kind) == ("room", "A03", "gpu-worker-08", "NCCL_TIMEOUT")
    assert [x.terminal for x in book.due_escalations(T0 + 60)] == ["room", "lab"]  # its route's 60 s
    # a terminal that does not answer does not stop it (that is the point)
    book.read_status("room", None, T0 + 61, error="TransportError: refused")
    assert len(book.due_escalations(T0 + 61)) == 2
    # the incident resolving closes it, escalation and all
    book.resolved(KEY)
    assert [x.terminal for x in book.due_escalations(T0 + 62)] == ["lab"]


def test_an_alarm_whose_incidents_were_not_noted_takes_its_labels_from_the_key():
    book = AckBook(config(escalate_after_s=5))
    book.delivered("room", item("B07:gpu-1:XID_FATAL"), T0)  # folded, or noted long ago and forgotten
    assert book.due_escalations(T0 + 59) == []  # its rack's route escalates after 60 s, not the default 5
    (o,) = book.due_escalations(T0 + 60)
    assert (o.rack, o.node, o.kind) == ("B07", "gpu-1", "XID_FATAL")
    book.delivered("room", item("am:5f3a"), T0)
    assert {(x.rack, x.escalate_after) for x in book.due_escalations(T0 + 60)} == {("B07", 60.0), ("", 5.0)}


def test_a_recovery_delivered_closes_the_open_p0():
    book = AckBook(config())
    delivered_p0(book)
    book.delivered("room", item(level=NORMAL, kind=ItemKind.RECOVERY), T0 + 10)
    assert book.terminals_open() == []


def test_only_p0_opens():
    book = AckBook(config())
    book.delivered("room", item(level=P1), T0)
    assert book.terminals_open() == []


def test_an_ack_on_one_terminal_of_a_group_is_sent_to_the_others_once():
    book = AckBook(config())
    delivered_p0(book, "room")
    delivered_p0(book, "office")
    r = book.read_status("room", status([KEY]), T0 + 20)
    assert [a.terminal for a in r.acked] == ["room"]
    assert book.group_due(T0 + 20) == [("office", KEY)]  # lab is in no group
    # the send failed: tried again on the next poll
    assert book.group_sent("office", KEY, T0 + 20, ok=False) is None
    assert book.group_due(T0 + 21) == [("office", KEY)]
    a = book.group_sent("office", KEY, T0 + 21, ok=True)
    assert (a.terminal, a.via, a.after_s) == ("office", "group", 21.0)
    assert book.group_due(T0 + 22) == []
    # office's page now shows the ACK this gateway sent: not a new ACK, not sent back to room, not unknown
    r = book.read_status("office", status([KEY]), T0 + 22)
    assert r.acked == [] and book.group_due(T0 + 22) == []
    assert book.metrics(T0 + 22)[2] == {}


@pytest.mark.parametrize(
    "body,reason",
    [
        (b"\xff\xfe garbage", "garbage"),
        (b"<html>router login</html>", "garbage"),
        (b'{"now": 1, "mute": {"acknowledged": "all"}}', "garbage"),
        (b'{"now": true, "mute": {"acknowledged": []}}', "garbage"),
        (b"[" * (STATUS_MAX + 1), "too_large"),
    ],
)
def test_a_page_that_is_no_terminals_status_changes_nothing_and_is_counted(body, reason, caplog):
    book = AckBook(config(escalate_after_s=5))
    delivered_p0(book)
    with caplog.at_level(logging.WARNING, logger="sentinel.gateway"):
        for i in range(3):
            r = book.read_status("room", body, T0 + i)
            assert r.rejected == reason and r.acked == []
    assert book.terminals_open() == ["room"] and len(book.due_escalations(T0 + 5)) == 1
    assert book.metrics(T0)[2] == {("room", reason): 3}
    assert [r.message for r in caplog.records].count("status_read_refused") == 1  # logged once per episode


def test_an_ack_for_an_incident_never_sent_there_is_ignored_and_counted_once():
    book = AckBook(config())
    delivered_p0(book)
    for i in range(3):
        r = book.read_status("room", status(["Z99:elsewhere:XID"]), T0 + i)
        assert r.acked == []
    assert book.terminals_open() == ["room"]
    assert book.metrics(T0)[2] == {("room", "unknown_incident"): 1}


def test_a_clock_far_off_is_counted_and_its_acks_still_count():
    book = AckBook(config())
    delivered_p0(book)
    r = book.read_status("room", status([KEY], now=T0 - 86400), T0 + 30)
    assert r.rejected == "clock_off" and [a.after_s for a in r.acked] == [30.0]  # timed by the gateway's clock
    assert book.metrics(T0)[2] == {("room", "clock_off"): 1}


class FakeClient:
    def __init__(self, pages):
        self.pages = pages
        self.acked = []
        self.by = []

    def status_page(self, limit):
        p = self.pages.pop(0) if len(self.pages) > 1 else self.pages[0]  # the last page stays
        if isinstance(p, Exception):
            raise p
        return p

    def ack(self, key=None, *, long=False, id=None, by=None):
        self.acked.append(key)
        self.by.append(by)


def test_the_poller_reads_only_terminals_with_an_open_p0_and_sends_the_group_ack():
    book = AckBook(config())
    room, office, lab = FakeClient([OSError("refused"), status([KEY])]), FakeClient([]), FakeClient([])
    poller = AckPoller(book, {"room": room, "office": office, "lab": lab}, clock=lambda: T0 + 9)
    poller.poll_once()  # nothing open: nothing read
    delivered_p0(book)
    poller.poll_once()  # room does not answer
    assert book.terminals_open() == ["room"] and book.metrics(T0)[2] == {("room", "unreachable"): 1}
    poller.poll_once()
    assert book.terminals_open() == [] and office.acked == [KEY] and lab.acked == []
    assert office.by == ["group:room"]  # the terminal shows whose button it was


def test_a_group_member_that_does_not_answer_delays_no_other_members_ack():
    """Three terminals in one ACK group, the first read (cellar) hanging on its status page and on its ACK until
    its timeout. The ACK read on room reaches office while cellar still hangs: reads and group ACKs run side by
    side (one after another, office would wait for cellar's timeout). Cellar's ACK is tried again later."""
    import threading

    d = {
        "terminals": {
            name: {"url": "http://127.0.0.1:%d" % port, "key_id": name[0], "secret_env": "S", "ack_group": "on-call"}
            for name, port in (("cellar", 7), ("office", 8), ("room", 9))
        },
        "routing": {"default": ["room", "office", "cellar"]},
    }
    book = AckBook(Config.from_dict(d, env={"S": "x"}))
    for name in ("cellar", "office", "room"):
        delivered_p0(book, name)
    release, office_acked = threading.Event(), threading.Event()

    class Hung(FakeClient):
        def status_page(self, limit):
            release.wait(10)
            raise OSError("timed out")

        def ack(self, key=None, *, long=False, id=None, by=None):
            release.wait(10)
            raise OSError("timed out")

    class Office(FakeClient):
        def ack(self, key=None, *, long=False, id=None, by=None):
            super().ack(key)
            office_acked.set()

    office = Office([status()])
    clients = {"cellar": Hung([]), "office": office, "room": FakeClient([status([KEY])])}
    poller = AckPoller(book, clients, clock=lambda: T0 + 9)
    t = threading.Thread(target=poller.poll_once, daemon=True)
    t.start()
    try:
        assert office_acked.wait(5), "office's group ACK waited for cellar"
        assert not release.is_set() and office.acked == [KEY]
    finally:
        release.set()
        t.join(10)
        poller.stop()
    assert not t.is_alive()
    assert book.group_due(T0 + 10) == [("cellar", KEY)]  # cellar did not take it: tried on the next poll
    assert book.metrics(T0)[2] == {("cellar", "unreachable"): 1}


# ---- the whole gateway against a terminal whose status page is hostile, over real HTTP on loopback ---------------


class HostileTerminal:
    """Takes every signed request with the terminal's success answer; its status page is `page` (bytes), or it
    answers nothing at all on it (page None: the connection is closed unanswered)."""

    def __init__(self, page):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        term = self
        self.page = page
        self.posts = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's naming
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n))
                term.posts.append((self.path, body))
                self._answer(json.dumps({"ok": True, "duplicate": False, "id": body.get("id")}).encode())

            def do_GET(self):
                if term.page is None:
                    self.close_connection = True
                    return
                self._answer(term.page)

            def _answer(self, data):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(
    "page,reason",
    [
        (b"<html><body>It works!</body></html>", "garbage"),
        (json.dumps({"now": 1, "mute": {"acknowledged": ["x" * 64] * 2000}}).encode(), "too_large"),
        (None, "unreachable"),
    ],
)
def test_a_hostile_status_page_is_counted_and_the_p0_still_escalates(page, reason, tmp_path):
    import time

    from host_client.gateway.service import Gateway

    term = HostileTerminal(page)
    cfg = Config.from_dict(
        {
            "gateway": {"state_dir": str(tmp_path)},
            "delivery": {"status_poll_s": 0.2},
            "routing": {"escalate_after_s": 1},
            "terminals": {"room": {"url": term.url, "key_id": "k", "secret_env": "S"}},
        },
        env={"S": "x" * 32},
    )
    gw = Gateway(cfg)
    gw.start()
    try:
        ev = {"cluster_rack": "A03", "node_host": "gpu-worker-08", "event_type": "NCCL_TIMEOUT"}
        assert gw.gpu_event(ev)[0] == TAKEN
        end = time.monotonic() + 10
        m = ""
        while time.monotonic() < end:
            m = gw.metrics_text()
            if "sentinel_gateway_p0_escalation{" in m and ('reason="%s"} 0' % reason not in m):
                break
            time.sleep(0.1)
        assert 'sentinel_gateway_status_reads_rejected_total{terminal="room",reason="%s"}' % reason in m
        assert 'reason="%s"} 0' % reason not in m, m
        assert 'rack="A03",node_host="gpu-worker-08",event_type="NCCL_TIMEOUT"' in m, m
        assert [p for p, _b in term.posts if p == "/api/v1/send_msg"], term.posts
        # delivery goes on: a second P0 is delivered too
        ev2 = {"cluster_rack": "B01", "node_host": "gpu-1", "event_type": "XID_FATAL", "gpu_index": 0}
        assert gw.gpu_event(ev2)[0] == TAKEN
        end = time.monotonic() + 5
        while time.monotonic() < end and len([p for p, _b in term.posts if p == "/api/v1/send_msg"]) < 2:
            time.sleep(0.05)
        assert len([p for p, _b in term.posts if p == "/api/v1/send_msg"]) == 2
    finally:
        gw.stop()
        term.close()


def test_a_status_page_dripped_a_byte_a_second_is_cut_at_the_timeout_in_total():
    """The per-recv timeout alone would never fire (a byte comes every second, under the 1.5 s timeout)."""
    import time

    from ack_world import DripTerminal

    from host_client import AlarmClient
    from host_client.errors import TransportError
    from testkit.net import free_port

    drip = DripTerminal(free_port())
    try:
        client = AlarmClient(drip.url, "k", "x" * 32, timeout=1.5, retries=0)
        t0 = time.monotonic()
        with pytest.raises(TransportError, match="the whole answer took over 1.5 s"):
            client.status_page(STATUS_MAX)
        assert time.monotonic() - t0 < 5
    finally:
        drip.close()


def test_a_group_ack_already_applied_on_the_member_by_an_ha_peer_is_not_sent_again():
    """The peer gateway's ACK reached office first: this gateway reads office's page before sending, sees the
    incident acknowledged there, and sends nothing. Were it to send, the id is the peer's (same terminal, key and
    window), so office would apply it once."""
    book = AckBook(config())
    delivered_p0(book, "room")
    delivered_p0(book, "office")
    room, office = FakeClient([status([KEY])]), FakeClient([status([KEY])])
    poller = AckPoller(book, {"room": room, "office": office, "lab": FakeClient([])}, clock=lambda: T0 + 9)
    try:
        poller.poll_once()
        assert office.acked == [] and book.terminals_open() == [] and book.group_due(T0 + 10) == []
    finally:
        poller.stop()
    peer = AckBook(config())
    for b in (book, peer):
        b.to_send[("office", KEY)] = T0 + 9.4
    assert book.ack_id("office", KEY) == peer.ack_id("office", KEY) != book.ack_id("room", KEY)


def test_the_ledger_keeps_what_a_restart_needs_an_ack_due_a_deadline_an_escalation():
    """kill -9 between reading an ACK and sending the group's: the ACK still due, the office P0 still open with its
    deadline and its escalation (the same labels: it pages once), the keys sent known."""
    book = AckBook(config(escalate_after_s=5))
    delivered_p0(book, "room")
    delivered_p0(book, "office")
    book.due_escalations(T0 + 6)
    book.read_status("room", status([KEY]), T0 + 7)
    _gen, recs = book.snapshot()
    again = AckBook(config(escalate_after_s=5))
    assert again.restore(json.loads(json.dumps(recs))) == (len(recs), 0)
    assert again.group_due(T0 + 8) == [("office", KEY)]
    ((o, shown),) = again.deadlines()
    assert (o.terminal, o.deadline, o.escalated, shown) == ("office", T0 + 5, True, "true")
    assert again.ack_id("office", KEY) == book.ack_id("office", KEY)
    r = again.read_status("office", status([KEY]), T0 + 9)  # office took it: a group ACK, not a new one
    assert [a.via for a in r.acked] == ["group"] and again.group_due(T0 + 9) == []


def test_the_group_ack_says_whose_button_it_was_within_the_terminals_32_bytes_and_through_a_restart():
    from host_client.gateway.acks import group_by

    assert group_by("room") == "group:room"
    assert group_by("x" * 26) == "group:" + "x" * 26  # 32 bytes: the terminal's limit
    assert group_by("x" * 27) == "group"
    assert group_by("机房" * 5) == "group"  # 6 + 30 bytes of UTF-8
    book = AckBook(config())
    delivered_p0(book, "room")
    delivered_p0(book, "office")
    book.read_status("room", status([KEY]), T0 + 5)
    assert book.ack_by("office", KEY) == "group:room"
    again = AckBook(config())
    again.restore(book.snapshot()[1])
    assert again.ack_by("office", KEY) == "group:room"
    cli = AckBook(config())
    delivered_p0(cli, "room")
    assert cli.acknowledge(KEY, T0 + 6, via="cli") == [{"terminal": "room", "key": KEY}]
    assert cli.ack_by("room", KEY) == "cli"
