"""Why is the shown alarm silent? The panel's answer (emulator/facts.py) from the core's reason
(sentinel_core.silence, the terminal's own rules) and its snapshot, for each state the terminal can be in:
acknowledged, muted until HH:MM, quiet hours, sent without speech, speech over."""

from emulator import facts
from sentinel_core import silence as core_silence
from sentinel_core.alarm import Alarm, preset
from sentinel_core.terminal import Terminal

NOON = 1764504000  # 12:00 UTC


def _term(**cfg):
    t = Terminal(dict({"speech_gap_s": 0, "quiet_enabled": False}, **cfg))
    t.set_health("clock", True, NOON)
    return t


def said(t, now, voice=None):
    """The panel's words for the shown alarm, as the engine publishes them."""
    snap = t.snapshot(now)
    return facts.silence(core_silence.reason(t, snap["shown"].get("key"), now), snap, voice)


def _drain(t, now):
    while True:
        u = t.next_utterance(now)
        if u is None:
            return
        t.speech_finished(now, u.seq)


def test_speaking_or_queued_is_not_silent():
    t = _term()
    t.on_alarm(preset("p0", "NCCL", key="a"), NOON)
    assert said(t, NOON) is None
    t.next_utterance(NOON)
    assert said(t, NOON) is None
    audible = {"mode": "wav", "available": True, "player": None}
    assert said(t, NOON, audible) is None
    deaf = {"mode": "device", "available": True, "player": "silent"}
    assert said(t, NOON, deaf) == "speaking, but nobody hears it: no audio device"


def test_acknowledged_p0_says_until_when():
    t = _term()
    t.on_alarm(preset("p0", "NCCL", key="a"), NOON)
    t.on_button("short", NOON + 60)
    assert said(t, NOON + 60) == "acknowledged: silent until 12:16"
    # a remote ACK of one incident: no global mute, no time to give
    u = _term()
    u.on_alarm(preset("p1", "NVLink", key="b"), NOON)
    u.on_ack("b", False, NOON)
    assert said(u, NOON) == "acknowledged: this incident stays silent"


def test_mute_holds_a_new_p1_and_quiet_hours_too():
    t = _term()
    t.on_alarm(preset("p0", "NCCL", key="a"), NOON)
    t.on_button("short", NOON)
    t.on_alarm(preset("p1", "NVLink", key="b"), NOON + 1)  # raised after the press: not acknowledged, muted
    snap = t.snapshot(NOON + 1)
    assert snap["shown"]["key"] == "a"
    t.on_alarm(preset("p0", "XID", key="c"), NOON + 2)  # a P0 speaks through the mute
    assert said(t, NOON + 2) is None
    q = _term(quiet_enabled=True, quiet_start="11:00", quiet_end="13:00")
    q.on_alarm(preset("p1", "NVLink", key="b"), NOON)
    assert said(q, NOON) == "quiet hours until 13:00: only P0 speaks"
    m = _term()
    m.on_button("short", NOON)
    m.on_alarm(preset("p1", "NVLink", key="d"), NOON + 5)
    assert said(m, NOON + 5) == "muted until 12:15"


def test_without_speech_and_after_the_repetitions():
    t = _term()
    t.on_alarm(Alarm("fan", (255, 0, 0), "flash", "none", 1, 2, "k"), NOON)
    assert said(t, NOON) == "sent without speech (audio_mode none)"
    u = _term()
    u.on_alarm(preset("p0", "NCCL", key="a"), NOON)
    _drain(u, NOON)
    assert said(u, NOON) == "its speech is over (said in full or cut short): its next alarm speaks"


def test_an_ack_that_cut_a_p0_short_then_an_unmute_is_not_called_spoken_in_full():
    t = _term(speech_gap_s=2)
    t.on_alarm(preset("p0", "NCCL", key="a"), NOON)
    u = t.next_utterance(NOON)
    t.on_button("short", NOON + 1)  # mid-sentence: the first of three repetitions
    t.speech_finished(NOON + 1, u.seq)
    t.on_unmute(None, NOON + 2)
    assert said(t, NOON + 2) == "its speech is over (said in full or cut short): its next alarm speaks"
    # a remote ACK of the one incident, then its unmute: the same
    r = _term(speech_gap_s=2)
    r.on_alarm(preset("p0", "NCCL", key="a"), NOON)
    r.on_ack("a", False, NOON)
    r.on_unmute("a", NOON + 1)
    assert said(r, NOON + 1) == "its speech is over (said in full or cut short): its next alarm speaks"
    # its next alarm speaks
    t.on_alarm(preset("p0", "NCCL again", key="a"), NOON + 3)
    assert said(t, NOON + 3) is None


def test_speech_held_by_quiet_hours_is_over_once_they_end():
    t = _term(quiet_enabled=True, quiet_start="11:00", quiet_end="12:00")
    t.on_alarm(preset("p1", "NVLink", key="b"), NOON - 60)
    assert said(t, NOON - 60) == "quiet hours until 12:00: only P0 speaks"
    assert said(t, NOON + 60) == "its speech is over (said in full or cut short): its next alarm speaks"


def test_screen_colours_are_the_srgb_encoding():
    assert facts.TO_SCREEN[0] == 0 and facts.TO_SCREEN[255] == 255 and facts.TO_SCREEN[64] > 128
    assert facts.screen_rgb(bytes([0, 64, 255])) == bytes([0, facts.TO_SCREEN[64], 255])
