# Replays tests/vectors/saved_state.json: saved state documents (what persist.write_state writes, parsed) handed to
# Terminal.restore, the terminal's one way to load a saved state. Good ones restore by name (alarms in display order,
# mute, acknowledgements, heartbeat, version); bad or unknown ones are refused with the exact ValueError and leave a
# busy terminal exactly as it was. Runs on CPython and MicroPython alike.
import io
import json

from sentinel_core.alarm import preset
from sentinel_core.persist import write_state
from sentinel_core.restore import Saved, parse_state
from sentinel_core.terminal import Terminal

VECTORS = "saved_state.json"
NOON = 1764504000


def _busy(config=None):
    t = Terminal(config)
    t.set_health("clock", True, NOON)
    t.on_alarm(preset("p0", "A03 gpu-worker-08 NCCL timeout", key="A03:w8:NCCL", id="m-1"), NOON)
    t.on_alarm(preset("p1", "NVLink errors on w2", key="A01:w2:NVL", duration=600), NOON + 1)
    t.on_ack("A01:w2:NVL", False, NOON + 2)
    t.on_heartbeat(60, NOON + 3)
    return t


def _facts(t, now):
    s = t.snapshot(now)
    return {
        "active": [a["key"] for a in s["active"]],
        "levels": [a["level"] for a in s["active"]],
        "expires_in": [a["expires_in_s"] for a in s["active"]],
        "shown": s["shown"]["key"],
        "pattern": s["shown"]["pattern"],
        "acked": s["mute"]["acknowledged"],
        "muted": s["mute"]["active"],
        "mute_remaining": s["mute"]["remaining_s"],
        "heartbeat": s["health"]["heartbeat"]["interval_s"],
        "version": t.state_version,
        "dirty": t.dirty,
    }


def _state(t, now):
    shown = t.display(now).to_dict()  # first: it ticks the clock the saved state records
    return (shown, t.export_state(), t.state_version, t.dirty, t.last_now)


def run_case(case):
    name = case["name"]
    now = case["now"]
    if "error" in case:
        t = _busy(case.get("config"))
        before = _state(t, now)
        try:
            t.restore(case["document"], now)
        except ValueError as e:
            if str(e) != case["error"]:
                raise AssertionError("%s: want ValueError %r, got %r" % (name, case["error"], str(e)))
        else:
            raise AssertionError("%s: accepted" % name)
        after = _state(t, now)
        if after != before:
            raise AssertionError("%s: the refused document changed the terminal: %r -> %r" % (name, before, after))
        return
    t = Terminal(case.get("config"))
    if case.get("clock", True):
        t.set_health("clock", True, now)
    t.restore(case["document"], now)
    got = _facts(t, now)
    want = case["expect"]
    for k in want:
        if got[k] != want[k]:
            raise AssertionError("%s: %s: want %r, got %r" % (name, k, want[k], got[k]))


def _written(t):
    buf = io.StringIO()
    write_state(t, buf)
    return json.loads(buf.getvalue())


def test_a_busy_terminal_round_trips_through_its_saved_state():
    t = _busy()
    t.on_button("short", NOON + 4)
    d = _written(t)
    u = Terminal()
    u.set_health("clock", True, NOON + 10)
    u.restore(d, NOON + 10)
    assert _written(u)["alarms"] == d["alarms"], (_written(u), d)
    assert _facts(u, NOON + 10) == dict(_facts(t, NOON + 10), version=d["version"], dirty=False), (
        _facts(u, NOON + 10),
        _facts(t, NOON + 10),
    )
    # And again: what the restored terminal writes restores to the same.
    w = Terminal()
    w.set_health("clock", True, NOON + 20)
    w.restore(_written(u), NOON + 20)
    assert _facts(w, NOON + 20) == _facts(u, NOON + 20)


def test_the_parsed_state_is_named():
    t = _busy()
    d = _written(t)
    u = Terminal()
    u.set_health("clock", True, NOON + 10)
    s = parse_state(u, d, NOON + 10)
    assert isinstance(s, Saved)
    assert s.format == 2 and s.version == t.state_version and s.heartbeat == 60 and s.mute_until is None
    assert [(a.key, a.order) for a in s.alarms] == [("A01:w2:NVL", 1), ("A03:w8:NCCL", 2)]
    assert s.acked == {"A01:w2:NVL": NOON + 2 + 900}
