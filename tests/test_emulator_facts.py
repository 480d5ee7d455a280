"""Why is the shown alarm silent? The panel's answer (emulator/facts.py) from the core's own snapshots, for each
state the terminal can be in: acknowledged, muted until HH:MM, quiet hours, sent without speech, spoken in full."""

from emulator import facts
from sentinel_core.alarm import Alarm, preset
from sentinel_core.terminal import Terminal

NOON = 1764504000  # 12:00 UTC


def _term(**cfg):
    t = Terminal(dict({"speech_gap_s": 0, "quiet_enabled": False}, **cfg))
    t.set_health("clock", True, NOON)
    return t


def _drain(t, now):
    while True:
        u = t.next_utterance(now)
        if u is None:
            return
        t.speech_finished(now, u.seq)


def test_speaking_or_queued_is_not_silent():
    t = _term()
    t.on_alarm(preset("p0", "NCCL", key="a"), NOON)
    assert facts.silence(t.snapshot(NOON)) is None
    t.next_utterance(NOON)
    assert facts.silence(t.snapshot(NOON)) is None
    audible = {"mode": "wav", "available": True, "player": None}
    assert facts.silence(t.snapshot(NOON), audible) is None
    deaf = {"mode": "device", "available": True, "player": "silent"}
    assert facts.silence(t.snapshot(NOON), deaf) == "speaking, but nobody hears it: no audio device"


def test_acknowledged_p0_says_until_when():
    t = _term()
    t.on_alarm(preset("p0", "NCCL", key="a"), NOON)
    t.on_button("short", NOON + 60)
    assert facts.silence(t.snapshot(NOON + 60)) == "acknowledged: silent until 12:16"
    # a remote ACK of one incident: no global mute, no time to give
    u = _term()
    u.on_alarm(preset("p1", "NVLink", key="b"), NOON)
    u.on_ack("b", False, NOON)
    assert facts.silence(u.snapshot(NOON)) == "acknowledged: this incident stays silent"


def test_mute_holds_a_new_p1_and_quiet_hours_too():
    t = _term()
    t.on_alarm(preset("p0", "NCCL", key="a"), NOON)
    t.on_button("short", NOON)
    t.on_alarm(preset("p1", "NVLink", key="b"), NOON + 1)  # raised after the press: not acknowledged, muted
    snap = t.snapshot(NOON + 1)
    assert snap["shown"]["key"] == "a"
    t.on_alarm(preset("p0", "XID", key="c"), NOON + 2)  # a P0 speaks through the mute
    assert facts.silence(t.snapshot(NOON + 2)) is None
    q = _term(quiet_enabled=True, quiet_start="11:00", quiet_end="13:00")
    q.on_alarm(preset("p1", "NVLink", key="b"), NOON)
    assert facts.silence(q.snapshot(NOON)) == "quiet hours until 13:00: only P0 speaks"
    m = _term()
    m.on_button("short", NOON)
    m.on_alarm(preset("p1", "NVLink", key="d"), NOON + 5)
    assert facts.silence(m.snapshot(NOON + 5)) == "muted until 12:15"


def test_without_speech_and_after_the_repetitions():
    t = _term()
    t.on_alarm(Alarm("fan", (255, 0, 0), "flash", "none", 1, 2, "k"), NOON)
    assert facts.silence(t.snapshot(NOON)) == "sent without speech (audio_mode none)"
    u = _term()
    u.on_alarm(preset("p0", "NCCL", key="a"), NOON)
    _drain(u, NOON)
    assert facts.silence(u.snapshot(NOON)) == "spoken in full: no repetition left"


def test_screen_colours_are_the_srgb_encoding():
    assert facts.TO_SCREEN[0] == 0 and facts.TO_SCREEN[255] == 255 and facts.TO_SCREEN[64] > 128
    assert facts.screen_rgb(bytes([0, 64, 255])) == bytes([0, facts.TO_SCREEN[64], 255])
