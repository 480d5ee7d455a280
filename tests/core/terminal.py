# Unit checks of the terminal state machine's API around the scenario timelines: config, snapshot shape,
# utterance bookkeeping, labels, export/restore. Common subset: runs on CPython and MicroPython.
import json

from sentinel_core.alarm import NORMAL, P0, P1, Alarm, preset
from sentinel_core.display import Display
from sentinel_core.terminal import ACK_CAP, Terminal
from sentinel_core.terminal_config import DEFAULTS

NOON = 1764504000


def _synced(config=None, now=NOON):
    t = Terminal(config)
    t.set_health("clock", True, now)
    return t


def _refused(fn, *args):
    try:
        fn(*args)
    except ValueError as e:
        return str(e)
    return None


def test_defaults():
    t = Terminal()
    assert t.mute_s == 900 and t.queue.capacity == 8 and t.max_active == 16
    assert t.quiet.start == 22 * 60 and t.quiet.end == 8 * 60 and t.quiet.utc_offset_min == 0
    assert DEFAULTS["speech_gap_s"] == 2
    assert not t.health.clock
    assert not t.dirty


def test_bad_config_names_the_key():
    bad = (
        {"mute_s": 0},
        {"mute_s": "900"},
        {"speech_queue": 0},
        {"speech_queue": 1000},
        {"max_active": -1},
        {"quiet_start": "25:00"},
        {"quiet_end": "8"},
        {"utc_offset_min": 9999},
        {"quiet_enabled": "yes"},
        {"heartbeat_misses": 0},
        {"idle_pattern": "disco"},
        {"label_max": 1},
        {"speech_gap_s": -1},
    )
    for cfg in bad:
        msg = _refused(Terminal, cfg)
        assert msg is not None, cfg
        assert msg.startswith("config"), msg
    assert _refused(Terminal, [1, 2]) is not None
    assert _refused(Terminal, {"quiet_end": "8:00"}).startswith("config quiet_end:")
    assert _refused(Terminal, {"utc_offset_min": 900}).startswith("config utc_offset_min:")


def test_unknown_config_keys_are_ignored():
    t = Terminal({"wifi_ssid": "x", "mute_s": 60, "debounce_ms": 30})
    assert t.mute_s == 60


def test_on_alarm_returns_the_incident_key():
    t = _synced()
    assert t.on_alarm(preset("p0", "XID", key="k"), NOON) == "k"
    assert t.on_alarm(preset("p1", "optics"), NOON) == "optics"


def test_label_prefers_ascii_text_then_key():
    t = _synced({"label_max": 12})
    t.on_alarm(preset("p0", "机柜 A03 死锁", key="A03:gpu-worker-08:NCCL"), NOON)
    assert t.display(NOON).text == "A03 gpu-work"
    t.on_alarm(preset("p0", "short text", key="z"), NOON + 1)
    assert t.display(NOON + 1).text == "short text"
    t.on_alarm(preset("p0", "死锁"), NOON + 2)
    assert t.display(NOON + 2).text is None


def test_display_equality_and_dict():
    a = Display("flash", (255, 0, 0), P0, "x", False, "k")
    b = Display("flash", [255, 0, 0], P0, "x", False, "k")
    assert a == b and not (a != b)
    assert a != Display("flash", (255, 0, 0), P1, "x", False, "k")
    assert a.to_dict() == {
        "pattern": "flash",
        "color": "#FF0000",
        "level": "P0",
        "text": "x",
        "night": False,
        "key": "k",
    }


def test_utterance_fields_and_busy_voice():
    t = _synced()
    t.on_alarm(preset("p0", "XID", key="k", id="m-1"), NOON)
    u = t.next_utterance(NOON)
    assert (u.text, u.level, u.key, u.id, u.n, u.of) == ("XID", P0, "k", "m-1", 1, 3)
    assert t.speaking is u
    assert t.next_utterance(NOON) is None
    t.speech_finished(NOON + 1, seq=u.seq + 100)
    assert t.speaking is u
    t.speech_finished(NOON + 1, seq=u.seq)
    assert t.speaking is None
    assert t.next_utterance(NOON + 1) is None
    u2 = t.next_utterance(NOON + 3)
    assert u2.n == 2 and u2.seq > u.seq


def test_speech_finished_without_speaking_is_harmless():
    t = _synced()
    t.speech_finished(NOON)
    assert t.speaking is None and not t.must_interrupt(NOON)


def test_snapshot_shape_and_json():
    t = _synced({"utc_offset_min": 480})
    t.on_heartbeat(60, NOON)
    t.on_alarm(preset("p0", "XID", key="k", id="m-1"), NOON)
    t.on_alarm(preset("p1", "optics", key="o", duration=300), NOON + 1)
    t.next_utterance(NOON + 1)
    t.on_button("short", NOON + 2)
    s = t.snapshot(NOON + 5)
    json.dumps(s)
    assert sorted(s.keys()) == ["active", "counters", "health", "mute", "now", "quiet", "shown", "speech", "version"]
    assert s["now"] == NOON + 5
    assert s["shown"]["pattern"] == "flash" and s["shown"]["level"] == "P0"
    assert [a["key"] for a in s["active"]] == ["k", "o"]
    a = s["active"][1]
    assert (a["level"], a["color"], a["age_s"], a["expires_in_s"], a["acknowledged"]) == ("P1", "#FFA500", 4, 296, True)
    assert s["speech"]["speaking"]["text"] == "XID" and s["speech"]["capacity"] == 8
    assert s["mute"] == {"active": True, "remaining_s": 897, "acknowledged": ["k", "o"]}
    assert s["quiet"]["local_time"] == "20:00" and s["quiet"]["active"] is False and s["quiet"]["applied"] is True
    assert s["health"]["heartbeat"] == {"armed": True, "ok": True, "interval_s": 60, "last_age_s": 5}
    assert s["health"]["ok"] is True and s["counters"]["alarms"] == 2


def test_float_now_is_accepted():
    t = _synced(now=NOON + 0.5)
    t.on_alarm(preset("p1", "optics", key="o"), NOON + 0.75)
    assert t.snapshot(NOON + 1.9)["now"] == NOON + 1
    assert _refused(t.tick, "now") is not None


def test_export_is_small_json_and_round_trips():
    t = _synced()
    t.on_alarm(preset("p0", "XID 79 " + "x" * 60, key="k%d" % 0), NOON)
    for i in range(1, 16):
        t.on_alarm(preset("p1", "optics " + "y" * 60, key="k%d" % i, duration=600), NOON + i)
    t.on_button("short", NOON + 20)
    d = t.export_state()
    text = json.dumps(d)
    # About 200 bytes per alarm besides its text and key.
    assert len(text) < 16 * 300, len(text)
    u = Terminal()
    u.set_health("clock", True, NOON + 30)
    u.restore(json.loads(text), NOON + 30)
    assert u.export_state()["alarms"] == d["alarms"]
    assert u.mute_until == t.mute_until and u.acked == t.acked
    assert u.display(NOON + 30) == t.display(NOON + 30)
    assert not u.dirty


def test_normal_alarms_are_not_exported():
    t = _synced()
    t.on_alarm(preset("normal", key="k"), NOON)
    assert t.export_state()["alarms"] == []
    assert not t.dirty


def test_dirty_and_mark_saved_with_version():
    t = _synced()
    t.on_alarm(preset("p1", "optics", key="o"), NOON)
    d = t.export_state()
    t.on_alarm(preset("p0", "XID", key="k"), NOON)
    t.mark_saved(d["version"])
    assert t.dirty
    t.mark_saved()
    assert not t.dirty
    t.display(NOON + 1)
    t.snapshot(NOON + 1)
    t.set_health("network", False, NOON + 1)
    assert not t.dirty


def test_restore_refuses_malformed_state_and_keeps_its_own():
    t = _synced()
    t.on_alarm(preset("p1", "optics", key="o"), NOON)
    before = t.export_state()
    bad = (
        None,
        [],
        {"v": 3},
        {"v": 0},
        {"v": 1, "alarms": "x"},
        {"v": 1, "alarms": [1]},
        {
            "v": 1,
            "alarms": [
                {
                    "key": "a",
                    "text": "a",
                    "level": 2,
                    "color": [255, 0, 0],
                    "light_mode": "flash",
                    "audio_mode": "cycle",
                    "repeat_times": 3,
                    "since": "yesterday",
                    "expires": None,
                }
            ],
        },
        {
            "v": 1,
            "alarms": [
                {
                    "key": "a",
                    "text": "a",
                    "level": 0,
                    "color": [0, 255, 0],
                    "light_mode": "solid",
                    "audio_mode": "once",
                    "repeat_times": 1,
                    "since": NOON,
                    "expires": None,
                }
            ],
        },
        {"v": 1, "mute_until": "soon"},
        {"v": 1, "acked": {"k": "x"}},
        {"v": 1, "acked": []},
        {"v": 1, "heartbeat": -1},
        {"v": 1, "saved_at": "x"},
        {"v": 1, "version": 1.5},
    )
    for d in bad:
        assert _refused(t.restore, d, NOON) is not None, d
        assert t.export_state() == before


def test_acknowledgements_stay_bounded():
    t = _synced({"max_active": 2})
    t.on_alarm(preset("p0", "XID", key="burning"), NOON)
    t.on_ack("burning", False, NOON)
    for i in range(100):
        t.on_ack("k%d" % i, False, NOON + i)
    assert len(t.acked) == ACK_CAP
    assert "k99" in t.acked and "burning" in t.acked and "k0" not in t.acked


def test_repeat_times_is_capped():
    t = _synced()
    t.on_alarm(Alarm("XID", (255, 0, 0), "flash", "cycle", 1000, P0, "k"), NOON)
    assert t.queue.find("k").remaining == 10


def test_heartbeat_interval_survives_reboot():
    t = _synced()
    t.on_heartbeat(30, NOON)
    u = _synced(now=NOON + 500)
    u.restore(t.export_state(), NOON + 500)
    assert u.display(NOON + 575).pattern == "idle"
    assert u.display(NOON + 576).pattern == "health_heartbeat"


def test_heartbeat_disarm_is_the_way_out_of_no_heartbeat_and_survives_reboot():
    t = _synced()
    t.on_heartbeat(1, NOON)
    assert t.display(NOON + 10).pattern == "health_heartbeat"
    t.on_heartbeat(0, NOON + 10)
    assert t.display(NOON + 10).pattern == "idle"
    assert t.snapshot(NOON + 10)["health"]["heartbeat"]["armed"] is False
    assert t.dirty
    u = _synced(now=NOON + 20)
    u.restore(t.export_state(), NOON + 20)
    assert u.display(NOON + 9999).pattern == "idle"


def test_unmute_ends_the_mute_and_the_acknowledgements():
    t = _synced()
    t.on_alarm(preset("p0", "NCCL", key="a"), NOON)
    t.on_alarm(preset("p1", "NVLink", key="b"), NOON)
    t.on_button("short", NOON + 1)
    assert not t.permitted(P1, "c", NOON + 2) and not t.permitted(P0, "a", NOON + 2)
    # One incident: its acknowledgement only; the mute stays.
    t.on_unmute("a", NOON + 2)
    assert t.permitted(P0, "a", NOON + 2) and not t.permitted(P1, "b", NOON + 2)
    t.on_unmute(None, NOON + 3)
    assert t.permitted(P1, "b", NOON + 3) and t.permitted(P1, "c", NOON + 3)
    s = t.snapshot(NOON + 3)
    assert s["mute"] == {"active": False, "remaining_s": 0, "acknowledged": []}
    # What was cut off is not said again: the next alarm of an incident speaks.
    assert t.next_utterance(NOON + 3) is None
    t.on_alarm(preset("p0", "NCCL again", key="a"), NOON + 4)
    assert t.next_utterance(NOON + 4).text == "NCCL again"
    assert _refused(t.on_unmute, "", NOON + 5)


def test_normal_level_constant():
    t = _synced()
    t.on_alarm(preset("normal"), NOON)
    assert t.display(NOON).level == NORMAL


def test_alarm_fields_left_at_their_defaults_read_back():
    # Fields equal to the constructor's defaults are answered by the class (not stored per alarm): they read back
    # the same, can be assigned, and a look-alike of another type is still kept, so the check still refuses it.
    a = Alarm("x", (255, 0, 0), "flash", "cycle", 3, P0)
    assert (a.color, a.light_mode, a.audio_mode, a.repeat_times, a.key, a.id, a.duration) == (
        (255, 0, 0),
        "flash",
        "cycle",
        3,
        None,
        None,
        None,
    )
    a.duration = 60
    assert a.duration == 60 and Alarm("y").duration is None
    assert Alarm("n", level=NORMAL).duration == 10
    t = Terminal()
    for bad in (Alarm("x", (255.0, 0, 0)), Alarm("x", (255, 0, 0.0)), Alarm("x", repeat_times=3.0)):
        assert _refused(t.on_alarm, bad, NOON) is not None
    assert t.active == {}
    assert Alarm("x", [255, 0, 0]).color == [255, 0, 0]


def test_preset_colours_are_one_tuple_per_colour():
    a = Alarm("a", (255, 165, 0), "breath", "once", 1, P1)
    b = Alarm("b", (255, 165, 0), "breath", "once", 1, P1)
    assert a.color is b.color and a.color is preset("p1", "c").color
    assert Alarm("c", (255, 0, 0)).color is Alarm("d").color
    assert Alarm("e", (1, 2, 3)).color == (1, 2, 3)
