"""Random timelines against the terminal state machine (CPython only): alarms, presses, remote ACKs, heartbeats,
clock health, a voice that speaks and gets cut, reboots. The invariants are the promises an on-call engineer relies
on; the scenario file seeds the first examples so the known timelines are always among those tried."""

import datetime
import json
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sentinel_core.alarm import NORMAL, P0, P1, Alarm, preset
from sentinel_core.terminal import ACK_CAP, Terminal, incident_key

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOON = 1764504000
KEYS = ["A03:n1:NCCL_TIMEOUT", "A03:n2:XID_FATAL", "B01:n3:NVLINK", "C07:n4:OPTICS", None]
MODES = {P0: ("flash", (255, 0, 0)), P1: ("breath", (255, 165, 0)), NORMAL: ("solid", (0, 255, 0))}


def _scenario_configs():
    with open(os.path.join(ROOT, "tests", "vectors", "scenarios.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    return [c["config"] for c in cases if "config" in c]


def _hhmm(m):
    return "%02d:%02d" % (m // 60, m % 60)


configs = st.one_of(
    st.sampled_from(_scenario_configs()),
    # Quiet hours around the start time, so the quiet-hour promise is exercised in most runs.
    st.fixed_dictionaries(
        {
            "quiet_start": st.sampled_from(["11:00", "11:59", "23:00"]),
            "quiet_end": st.sampled_from(["12:01", "13:00", "13:00"]),
            "speech_queue": st.integers(1, 3),
            "mute_s": st.integers(30, 300),
        }
    ),
    st.fixed_dictionaries(
        {
            "utc_offset_min": st.integers(-720, 840),
            "quiet_start": st.integers(0, 1439).map(_hhmm),
            "quiet_end": st.integers(0, 1439).map(_hhmm),
            "speech_queue": st.integers(1, 4),
            "max_active": st.integers(1, 5),
            "mute_s": st.integers(30, 1800),
            "speech_gap_s": st.integers(0, 5),
        }
    ),
)


def _quiet_by_calendar(cfg, now):
    """Quiet hours computed independently, with datetime."""
    local = datetime.datetime.fromtimestamp(int(now), datetime.timezone.utc) + datetime.timedelta(
        minutes=cfg.get("utc_offset_min", 0)
    )
    m = local.hour * 60 + local.minute
    s = int(cfg.get("quiet_start", "22:00")[:2]) * 60 + int(cfg.get("quiet_start", "22:00")[3:])
    e = int(cfg.get("quiet_end", "08:00")[:2]) * 60 + int(cfg.get("quiet_end", "08:00")[3:])
    if not cfg.get("quiet_enabled", True) or s == e:
        return False
    return s <= m < e if s < e else (m >= s or m < e)


class TerminalMachine(RuleBasedStateMachine):
    @initialize(cfg=configs, synced=st.booleans())
    def setup(self, cfg, synced):
        self.cfg = dict(cfg)
        self.now = NOON
        self.t = Terminal(self.cfg)
        self.synced = synced
        if synced:
            self.t.set_health("clock", True, self.now)
        self.mute_s = self.t.mute_s
        self.mute_until = None  # the model's own record of what the operator asked for
        self.acked = {}
        self.spoken = []

    # ---- events ---------------------------------------------------------------------------------------------

    @rule(
        level=st.sampled_from([P0, P0, P1, NORMAL]),
        key=st.sampled_from(KEYS),
        audio=st.sampled_from(["once", "cycle", "cycle", "none"]),
        repeat=st.integers(1, 4),
        duration=st.one_of(st.none(), st.integers(1, 2000)),
        text=st.sampled_from(["XID 79", "optics", "ok"]),
    )
    def alarm(self, level, key, audio, repeat, duration, text):
        light, color = MODES[level]
        ik = self.t.on_alarm(Alarm(text, color, light, audio, repeat, level, key, None, duration), self.now)
        if audio == "none" or ik not in self.t.active:
            return
        until = self.acked.get(ik)
        acked = until is not None and until > self.now
        muted = self.mute_until is not None and self.now < self.mute_until
        quiet = self.synced and _quiet_by_calendar(self.cfg, self.now)
        full = len(self.t.queue) == self.t.queue.capacity
        if level == P0 and not acked:
            # A new fire speaks, whatever the mute or the hour.
            assert self.t.queue.find(ik) is not None or full
        if level < P0 and not acked and not muted and not quiet:
            # An unsynced clock errs on the side of speaking.
            assert self.t.queue.find(ik) is not None or full

    @rule(long=st.booleans())
    def button(self, long):
        before = [a.key for a in self.t.ordered() if not long or a.alarm.level != NORMAL]
        queued = [e.key for e in self.t.queue.entries]
        self.t.on_button("long" if long else "short", self.now)
        until = self.now + self.mute_s
        if not long:
            self.mute_until = until
            before += queued
        for k in before:
            self.acked[k] = until
        if self.t.speaking is not None:
            assert self.t.must_interrupt(self.now)
        if long:
            assert self.t.active == {} or all(a.since == self.now for a in self.t.active.values())

    @rule(key=st.sampled_from(KEYS), long=st.booleans())
    def remote_ack(self, key, long):
        if key is None:
            self.button(long)
            return
        self.t.on_ack(key, long, self.now)
        self.acked[key] = self.now + self.mute_s
        if long:
            assert key not in self.t.active

    @rule(interval=st.one_of(st.none(), st.integers(0, 600)))
    def heartbeat(self, interval):
        self.t.on_heartbeat(interval, self.now)

    @rule(dt=st.one_of(st.integers(0, 5), st.integers(5, 3000)))
    def advance(self, dt):
        self.now += dt

    @rule(ok=st.booleans())
    def clock(self, ok):
        self.t.set_health("clock", ok, self.now)
        self.synced = ok

    @rule(ok=st.booleans(), name=st.sampled_from(["network", "speech"]))
    def health(self, name, ok):
        self.t.set_health(name, ok, self.now)

    # ---- the voice ------------------------------------------------------------------------------------------

    @rule()
    def speak(self):
        u = self.t.next_utterance(self.now)
        if u is None:
            return
        self.spoken.append((self.now, u))
        until = self.acked.get(u.key)
        assert until is None or until <= self.now, "acknowledged incident spoken inside its mute"
        if u.level < P0:
            assert self.mute_until is None or self.now >= self.mute_until, "speech below P0 inside a mute"
            if self.synced:
                assert not _quiet_by_calendar(self.cfg, self.now), "speech below P0 inside quiet hours"

    @precondition(lambda self: self.t.speaking is not None)
    @rule(cut=st.booleans())
    def finish(self, cut):
        if cut and not self.t.must_interrupt(self.now):
            return
        self.t.speech_finished(self.now)
        assert self.t.speaking is None

    @rule()
    def reboot(self):
        self.t.tick(self.now)
        saved = json.loads(json.dumps(self.t.export_state()))
        shown = self.t.display(self.now)
        u = Terminal(self.cfg)
        if self.synced:
            u.set_health("clock", True, self.now)
        u.restore(saved, self.now)
        assert u.export_state()["alarms"] == saved["alarms"]
        assert not u.dirty
        if shown.level is None or shown.level > NORMAL:
            assert u.display(self.now).level == shown.level
        self.t = u

    # ---- invariants -----------------------------------------------------------------------------------------

    @invariant()
    def display_owned_by_the_highest_level(self):
        d = self.t.display(self.now)
        levels = [a.alarm.level for a in self.t.active.values()]
        if not levels:
            assert d.level is None and d.pattern not in ("flash", "breath", "solid")
        else:
            assert d.level == max(levels)
            assert d.pattern == self.t.shown().alarm.light_mode

    @invariant()
    def bounded(self):
        assert len(self.t.queue) <= self.t.queue.capacity
        assert len(self.t.active) <= self.t.max_active
        assert len(self.t.acked) <= ACK_CAP

    @invariant()
    def one_entry_per_incident(self):
        keys = [e.key for e in self.t.queue.entries]
        assert len(keys) == len(set(keys))
        for a in self.t.active.values():
            assert a.key == incident_key(a.alarm)

    @invariant()
    def export_round_trips(self):
        d = self.t.export_state()
        text = json.dumps(d)
        u = Terminal(self.cfg)
        if self.synced:
            u.set_health("clock", True, self.now)
        u.restore(json.loads(text), self.now)
        assert json.dumps(u.export_state()["alarms"]) == json.dumps(d["alarms"])
        assert u.mute_until == (d["mute_until"] if d["mute_until"] is not None and d["mute_until"] > self.now else None)

    @invariant()
    def snapshot_is_json(self):
        json.dumps(self.t.snapshot(self.now))


TerminalMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_terminal_machine = TerminalMachine.TestCase


def test_presets_drive_the_machine():
    # The RFC table through the same invariants, as a fixed example.
    m = TerminalMachine()
    m.setup(cfg={}, synced=True)
    m.alarm(P0, KEYS[0], "cycle", 3, None, "XID 79")
    m.speak()
    m.button(False)
    m.finish(True)
    m.alarm(P0, KEYS[1], "cycle", 3, None, "XID 79")
    m.speak()
    assert m.spoken[-1][1].key == KEYS[1]
    m.display_owned_by_the_highest_level()
    m.export_round_trips()
    assert preset("p1", "x").level == P1
