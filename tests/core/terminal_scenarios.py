# Replays the timelines in tests/vectors/scenarios.json against the terminal state machine: alarms, button
# presses, remote ACKs, heartbeats, health changes, clock ticks, a simulated voice and reboots, with the expected
# display, speech and status at each step. Runs on CPython and MicroPython alike.
import json

from sentinel_core.alarm import Alarm, level_from_name, preset
from sentinel_core.terminal import Terminal

VECTORS = "scenarios.json"


def _rgb(h):
    return (int(h[1:3], 16), int(h[3:5], 16), int(h[5:7], 16))


def make_alarm(spec):
    if "preset" in spec:
        return preset(
            spec["preset"], spec.get("text"), key=spec.get("key"), id=spec.get("id"), duration=spec.get("duration")
        )
    level = spec.get("level")
    return Alarm(
        spec["text"],
        _rgb(spec.get("color", "#FF0000")),
        spec.get("light_mode", "flash"),
        spec.get("audio_mode", "cycle"),
        spec.get("repeat_times", 3),
        None if level is None else level_from_name(level),
        spec.get("key"),
        spec.get("id"),
        spec.get("duration"),
    )


class Voice:
    """A chip that takes `talk` seconds per utterance and obeys interrupts, polled once a second."""

    def __init__(self):
        self.started = None
        self.said = []
        self.cuts = 0

    def run(self, t, now, seconds, talk):
        for s in range(seconds):
            tn = now + s
            if t.speaking is not None:
                if t.must_interrupt(tn):
                    t.speech_finished(tn)
                    self.cuts += 1
                elif self.started is not None and tn - self.started >= talk:
                    t.speech_finished(tn)
            if t.speaking is None:
                u = t.next_utterance(tn)
                if u is not None:
                    self.said.append(u.text)
                    self.started = tn


def _fail(name, i, what, want, got):
    raise AssertionError("%s step %d: %s: want %r, got %r" % (name, i, what, want, got))


def _new_terminal(case, now, synced):
    t = Terminal(case.get("config"))
    if synced:
        t.set_health("clock", True, now)
    return t


def run_case(case):
    name = case.get("name", "?")
    start = case["start"]
    t = _new_terminal(case, start, case.get("clock", True))
    voice = Voice()
    last = None
    for i in range(len(case["steps"])):
        step = case["steps"][i]
        now = start + step.get("at", 0)
        do = step.get("do")
        try:
            if do == "alarm":
                t.on_alarm(make_alarm(step["alarm"]), now)
            elif do == "button":
                t.on_button(step["event"], now)
            elif do == "ack":
                t.on_ack(step.get("key"), step.get("long", False), now)
            elif do == "heartbeat":
                t.on_heartbeat(step.get("interval"), now)
            elif do == "health":
                t.set_health(step["name"], step["ok"], now, step.get("detail"))
            elif do == "speak":
                u = t.next_utterance(now)
                last = None if u is None else u.text
            elif do == "finish":
                t.speech_finished(now)
            elif do == "voice":
                voice.said = []
                voice.run(t, now, step["for"], step.get("talk", 2))
            elif do == "reboot":
                # Through JSON text, as a shell stores it; the voice dies with the box.
                saved = json.loads(json.dumps(t.export_state()))
                t = _new_terminal(case, now, step.get("clock", True))
                t.restore(saved, now)
                voice = Voice()
            elif do == "raw_restore":
                t.restore(step["state"], now)
            elif do == "saved":
                t.mark_saved()
            elif do is not None:
                raise AssertionError("%s step %d: unknown action %r" % (name, i, do))
            if step.get("raises"):
                _fail(name, i, "ValueError", True, False)
        except ValueError as e:
            if not step.get("raises"):
                raise AssertionError("%s step %d: unexpected ValueError %s" % (name, i, e))
        exp = step.get("expect")
        if exp:
            _check(name, i, t, now, exp, last, voice)


def _check(name, i, t, now, exp, last, voice):
    shown = t.display(now).to_dict()
    snap = t.snapshot(now)
    for k in ("pattern", "color", "level", "text", "night", "key"):
        if k in exp and exp[k] != shown[k]:
            _fail(name, i, k, exp[k], shown[k])
    if "utter" in exp and exp["utter"] != last:
        _fail(name, i, "utter", exp["utter"], last)
    if "said" in exp and exp["said"] != voice.said:
        _fail(name, i, "said", exp["said"], voice.said)
    if "cuts" in exp and exp["cuts"] != voice.cuts:
        _fail(name, i, "cuts", exp["cuts"], voice.cuts)
    if "interrupt" in exp and exp["interrupt"] != t.must_interrupt(now):
        _fail(name, i, "interrupt", exp["interrupt"], not exp["interrupt"])
    got = {
        "active": [a["key"] for a in snap["active"]],
        "levels": [a["level"] for a in snap["active"]],
        "acknowledged": snap["mute"]["acknowledged"],
        "muted": snap["mute"]["active"],
        "mute_remaining": snap["mute"]["remaining_s"],
        "quiet": snap["quiet"]["active"],
        "local_time": snap["quiet"]["local_time"],
        "queued": [q["key"] for q in snap["speech"]["queued"]],
        "dropped": snap["speech"]["dropped"],
        "speaking": None if snap["speech"]["speaking"] is None else snap["speech"]["speaking"]["text"],
        "problems": snap["health"]["problems"],
        "health_ok": snap["health"]["ok"],
        "heartbeat_ok": snap["health"]["heartbeat"]["ok"],
        "dirty": t.dirty,
        "evicted": snap["counters"]["evicted"],
        "expires_in": [a["expires_in_s"] for a in snap["active"]],
    }
    for k in got:
        if k in exp and exp[k] != got[k]:
            _fail(name, i, k, exp[k], got[k])
