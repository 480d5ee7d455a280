# persist.write_state, the board's way of saving (field by field into the file), must write exactly the document
# export_state builds, plus the shell's extra keys, and what it writes must restore. Common subset: runs on CPython
# and MicroPython.
import io
import json

from sentinel_core import restore
from sentinel_core.alarm import Alarm, preset
from sentinel_core.persist import FORMAT, ROW, write_state
from sentinel_core.terminal import Terminal

NOON = 1764504000


def _busy_terminal():
    t = Terminal()
    t.set_health("clock", True, NOON)
    t.on_alarm(preset("p0", "A03 gpu-worker-08 NCCL \u8d85\u65f6", key="A03:w8:NCCL", id="m-1"), NOON)
    t.on_alarm(preset("p1", 'NVLink "errors" on w2\\n', key="A01:w2:NVL", duration=600), NOON + 1)
    t.on_alarm(Alarm("v1 sender, no key", (1, 2, 3), "flash", "once", 1), NOON + 2)
    t.on_alarm(preset("normal", key="A07:w1:XID"), NOON + 3)
    t.on_ack("A01:w2:NVL", False, NOON + 4)
    t.on_heartbeat(60, NOON + 5)
    return t


def _named(row):
    return {ROW[i]: row[i] for i in range(len(ROW))}


def _written(t, extra=None):
    buf = io.StringIO()
    write_state(t, buf, extra)
    return buf.getvalue()


def test_written_state_holds_the_persistent_alarms_in_display_order():
    t = _busy_terminal()
    d = json.loads(_written(t))
    assert d["v"] == 2 and d["version"] == t.state_version and d["saved_at"] == NOON + 5
    assert [a[0] for a in d["alarms"]] == [None, "A03:w8:NCCL", "A01:w2:NVL"], d["alarms"]
    v1, p0, p1 = [_named(a) for a in d["alarms"]]
    assert v1 == {
        "key": None,
        "text": "v1 sender, no key",
        "level": 2,
        "color": [1, 2, 3],
        "light_mode": "flash",
        "audio_mode": "once",
        "repeat_times": 1,
        "id": None,
        "since": NOON + 2,
        "expires": None,
    }, v1
    assert p0["text"] == "A03 gpu-worker-08 NCCL \u8d85\u65f6" and p0["id"] == "m-1" and p0["color"] == [255, 0, 0]
    assert p1["text"] == 'NVLink "errors" on w2\\n' and p1["expires"] == NOON + 1 + 600
    assert d["acked"] == {"A01:w2:NVL": NOON + 4 + 900} and d["mute_until"] is None and d["heartbeat"] == 60
    assert d == t.export_state()


def test_extra_keys_are_added():
    t = _busy_terminal()
    want = t.export_state()
    want["replay_floor"] = NOON + 3
    assert json.loads(_written(t, {"replay_floor": NOON + 3})) == want


def test_empty_terminal():
    t = Terminal()
    assert json.loads(_written(t)) == t.export_state()


def test_written_state_restores():
    t = _busy_terminal()
    u = Terminal()
    u.set_health("clock", True, NOON + 10)
    u.restore(json.loads(_written(t)), NOON + 10)
    assert u.export_state()["alarms"] == t.export_state()["alarms"]
    assert u.display(NOON + 10).key == "v1 sender, no key"


def test_a_format_1_state_still_restores():
    # Format 1 wrote an object per alarm; a board updated with such a file on flash must bring its alarms back.
    t = _busy_terminal()
    d = json.loads(_written(t))
    d["v"] = 1
    d["alarms"] = [_named(a) for a in d["alarms"]]
    u = Terminal()
    u.set_health("clock", True, NOON + 10)
    u.restore(d, NOON + 10)
    assert u.export_state()["alarms"] == t.export_state()["alarms"]
    assert u.display(NOON + 10).key == "v1 sender, no key"


def test_a_damaged_row_is_refused_and_nothing_changes():
    t = _busy_terminal()
    before = t.export_state()
    for bad in (
        [["k", "text", 2, [255, 0, 0], "flash", "cycle", 3, None, NOON]],  # a field short
        [
            {
                "key": "k",
                "text": "t",
                "level": 2,
                "color": [255, 0, 0],
                "light_mode": "flash",
                "audio_mode": "cycle",
                "repeat_times": 3,
                "id": None,
                "since": NOON,
                "expires": None,
            }
        ],  # v1 row
        [["k", "text", 2, [255, 0], "flash", "cycle", 3, None, NOON, None]],
        [["k", "text", 0, [0, 255, 0], "solid", "once", 1, None, NOON, None]],
    ):
        d = json.loads(_written(t))
        d["alarms"] = bad
        try:
            t.restore(d, NOON + 10)
        except ValueError:
            pass
        else:
            raise AssertionError("accepted %r" % (bad,))
        assert t.export_state() == before


def test_the_reader_knows_what_the_writer_writes():
    assert restore.FORMAT == FORMAT and restore.ROW_LEN == len(ROW)
