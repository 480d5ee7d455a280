# The terminal's brain: which alarms are active, what the LEDs show, what the voice says next, the ACK mute, quiet
# hours and the terminal's own health. Both shells (firmware, emulator) feed it events and `now` (Unix seconds) and
# ask it questions; it never reads a clock and does no I/O, so the two behave identically. Rules: docs/STATE_MACHINE.md.

from sentinel_core.alarm import (
    LEVEL_NAMES,
    NORMAL,
    NORMAL_DURATION_S,
    P0,
    Active,
    check_alarm,
    check_now,
    incident_key,
    is_num,
)
from sentinel_core.compat import const
from sentinel_core.display import HEALTH_PATTERNS, IDLE_COLOR, OFF_COLOR, Display, ascii_label
from sentinel_core.quiet import format_hhmm
from sentinel_core.speech import Utterance

# The classes the annotations below name, for pyright alone (firmware/pyrightconfig.json defines _TYPING true): the
# constant folds to 0, so MicroPython's compiler drops the block and the board holds no global for them.
_TYPING = const(0)
if _TYPING:
    from sentinel_core.health import Health
    from sentinel_core.quiet import QuietHours
    from sentinel_core.speech import SpeechQueue

# "cycle" repeats come from the sender; a bound keeps one bad request from occupying the voice for an hour.
_MAX_REPEATS = const(10)
# A jump of `now` larger than this when the clock becomes synced is a clock step (ESP32 boots in 2000).
_CLOCK_STEP_S = const(3600)
# Acknowledged incidents remembered at most (remote ACKs may name incidents the terminal never saw).
ACK_CAP = 64


def _color_hex(c):
    return "#%02X%02X%02X" % (c[0], c[1], c[2])


class Terminal:
    # Set by sentinel_core.terminal_config.settings (boot-only), named here for readers and pyright (a bare
    # annotation costs nothing on MicroPython).
    mute_s: int
    speech_gap_s: "int | float"
    max_active: int
    label_max: int
    idle_pattern: str
    quiet: "QuietHours"
    health: "Health"
    queue: "SpeechQueue"

    def __init__(self, config=None):
        # Checking the config is boot-only code, in its own module so that the board can drop it once built: it
        # sets mute_s, speech_gap_s, max_active, label_max, idle_pattern, quiet, health and queue.
        from sentinel_core.terminal_config import settings

        settings(self, config)
        self.active = {}  # incident key -> Active
        self.mute_until = None
        self.acked = {}  # incident key -> acknowledged until
        self.ack_by = {}  # incident key -> who acknowledged it: "button", "page", or what an ACK request named
        self.speaking = None
        self._speaking_entry = None
        self._speaking_order = 0
        self._cut = False
        self._seq = 0
        self._order = 0
        self.state_version = 0
        self._saved_version = 0
        self.last_now = None  # the latest now seen (what a saved state records as saved_at)
        self.alarms_seen = 0
        self.evicted = 0
        self._last_display = None
        self._labelled = None  # the Active whose ASCII label _label is ("": it has none)
        self._label = None

    # ---- time -------------------------------------------------------------------------------------------------

    def tick(self, now):
        check_now(now)
        if self.last_now is None or now > self.last_now:
            self.last_now = now
        expired = None
        for a in self.active.values():
            if a.expires is not None and a.expires <= now:
                if expired is None:
                    expired = []
                expired.append(a)
        if expired is not None:
            persistent = False
            for a in expired:
                self._drop_active(a.key)
                if a.alarm.level != NORMAL:
                    persistent = True
            if persistent:
                self._changed()
        if self.mute_until is not None and self.mute_until <= now:
            self.mute_until = None
        if self.acked:
            old = None
            for k in self.acked:
                if self.acked[k] <= now:
                    if old is None:
                        old = []
                    old.append(k)
            if old is not None:
                for k in old:
                    del self.acked[k]
                    self.ack_by.pop(k, None)

    def _shift(self, delta):
        # The wall clock jumped (first NTP sync): every deadline measured on the old time base moves with it.
        for a in self.active.values():
            a.since += delta
            if a.expires is not None:
                a.expires += delta
        if self.mute_until is not None:
            self.mute_until += delta
        for k in self.acked:
            self.acked[k] += delta
        self.queue.shift(delta)
        self.health.shift(delta)

    # ---- bookkeeping ------------------------------------------------------------------------------------------

    def _changed(self):
        self.state_version += 1

    @property
    def dirty(self):
        return self.state_version != self._saved_version

    def mark_saved(self, version=None):
        self._saved_version = self.state_version if version is None else version

    def _drop_speech(self, key):
        e = self.queue.remove(key)
        if e is not None and e is self._speaking_entry:
            self._cut = True

    def _drop_active(self, key):
        a = self.active.pop(key, None)
        self._drop_speech(key)
        return a

    def _ack(self, key, until, by):
        self.acked[key] = until
        self.ack_by[key] = by
        while len(self.acked) > ACK_CAP:
            # Forget first what no longer matters: incidents not active, then the one whose mute ends soonest.
            first = None
            for k in self.acked:
                if first is None or (k not in self.active, -self.acked[k]) > (
                    first not in self.active,
                    -self.acked[first],
                ):
                    first = k
            del self.acked[first]
            self.ack_by.pop(first, None)

    def quiet_applies(self, now):
        # An unsynced clock does not know the local hour: speaking at night beats missing a fire by day.
        return self.health.clock and self.quiet.active(now)

    def permitted(self, level, key, now):
        """May speech of this level and incident start now?"""
        until = self.acked.get(key)
        if until is not None and until > now:
            return False
        if level < P0:
            if self.mute_until is not None and now < self.mute_until:
                return False
            if self.quiet_applies(now):
                return False
        return True

    # ---- events -----------------------------------------------------------------------------------------------

    def on_alarm(self, alarm, now):
        check_now(now)
        check_alarm(alarm)
        self.tick(now)
        key = incident_key(alarm)
        level = alarm.level
        self.alarms_seen += 1
        self._order += 1
        if level == NORMAL:
            if alarm.key is None:
                persistent = False
                for k in list(self.active.keys()):
                    if self._drop_active(k).alarm.level != NORMAL:
                        persistent = True
                for e in self.queue.entries:
                    if e is self._speaking_entry:
                        self._cut = True
                self.queue.clear()
                if persistent:
                    self._changed()
            elif key in self.active:
                if self._drop_active(key).alarm.level != NORMAL:
                    self._changed()
            duration = alarm.duration if alarm.duration is not None else NORMAL_DURATION_S
            self.active[key] = Active(alarm, now, now + duration, self._order)
        else:
            expires = None if alarm.duration is None else now + alarm.duration
            self.active[key] = Active(alarm, now, expires, self._order)
            self._changed()
        if len(self.active) > self.max_active:
            # The lowest level goes, the oldest among equals; the newcomer only when it is below everything else
            # (a green for an unknown incident must not push out a fire).
            victim = None
            for a in self.active.values():
                if (
                    victim is None
                    or a.alarm.level < victim.alarm.level
                    or (a.alarm.level == victim.alarm.level and a.order < victim.order)
                ):
                    victim = a
            self._drop_active(victim.key)
            self.evicted += 1
            if victim.alarm.level != NORMAL:
                self._changed()
            if victim.key == key:
                return key
        self._queue_speech(alarm, key, now)
        return key

    def _queue_speech(self, alarm, key, now):
        mode = alarm.audio_mode
        if mode == "none":
            count = 0
        elif mode == "once":
            count = 1
        else:
            count = alarm.repeat_times if alarm.repeat_times < _MAX_REPEATS else _MAX_REPEATS
        if count == 0 or not self.permitted(alarm.level, key, now):
            self._drop_speech(key)
            return
        busy = self._speaking_entry.key if self._speaking_entry is not None and self.speaking is not None else None
        e = self.queue.add(key, alarm, count, now, busy)
        if e is not None and alarm.level == P0 and self.speaking is not None and self.speaking.level < P0:
            self._cut = True

    def on_button(self, event, now, by="button"):
        """by: who pressed, shown beside each alarm it acknowledged ("button", the emulator's "page")."""
        if event != "short" and event != "long":
            raise ValueError('button event must be "short" or "long", got %r' % (event,))
        check_now(now)
        self.tick(now)
        if event == "short":
            self._mute_all(now, by)
        else:
            self._clear_all(now, by)

    def _mute_all(self, now, by):
        until = now + self.mute_s
        self.mute_until = until
        for k in self.active:
            self._ack(k, until, by)
        # Everything waiting was raised before the press: the operator has heard it.
        for e in self.queue.entries:
            self._ack(e.key, until, by)
        if self.speaking is not None:
            self._cut = True
        self.queue.clear()
        self._changed()

    def _clear_all(self, now, by):
        until = now + self.mute_s
        for k in list(self.active.keys()):
            if self.active[k].alarm.level != NORMAL:
                self._ack(k, until, by)
            self._drop_active(k)
        if self.speaking is not None:
            self._cut = True
        self.queue.clear()
        self._changed()

    def on_ack(self, key, long, now, by=None):
        """An ACK request (POST /api/v1/ack): by is what it says it came from, else "api request"."""
        if key is not None and (not isinstance(key, str) or not key):
            raise ValueError("ack key must be a non-empty string or None")
        if not isinstance(long, bool):
            raise ValueError("ack long must be true or false")
        check_now(now)
        # Words of more than 10 characters: the board does not intern them (its pool of names is nearly full).
        by = by or "api request"
        if key is None:
            self.on_button("long" if long else "short", now, by)
            return
        self.tick(now)
        self._ack(key, now + self.mute_s, by)
        self._drop_speech(key)
        if long:
            self.active.pop(key, None)
        self._changed()

    def on_unmute(self, key, now):
        """The way out of an ACK: key None ends the mute and every acknowledgement, a key only that incident's.
        What was cut off is not said again; the next alarm of an incident speaks."""
        if key is not None and (not isinstance(key, str) or not key):
            raise ValueError("unmute key must be a non-empty string or None")
        check_now(now)
        self.tick(now)
        if key is None:
            self.mute_until = None
            self.acked = {}
            self.ack_by = {}
        else:
            self.acked.pop(key, None)
            self.ack_by.pop(key, None)
        self._changed()

    def on_heartbeat(self, interval, now):
        check_now(now)
        if interval is not None and (not is_num(interval) or interval < 0 or interval > 86400):
            raise ValueError("heartbeat interval must be seconds in 0..86400 or None")
        self.tick(now)
        if self.health.beat(interval, now):
            self._changed()

    def set_health(self, name, ok, now, detail=None):
        check_now(now)
        if name not in ("clock", "network", "speech", "config"):
            raise ValueError("health name must be one of clock, network, speech, config; got %r" % (name,))
        if name == "clock" and ok and not self.health.clock and self.last_now is not None:
            delta = now - self.last_now
            # Shells call in every frame: a gap this large is the clock being set, not time passing.
            if delta > _CLOCK_STEP_S or delta < -_CLOCK_STEP_S:
                self._shift(delta)
                self.last_now = now
        self.health.set(name, ok)
        if name == "config":
            self.health.config_detail = None if ok else detail
        self.tick(now)

    # ---- what the LEDs show -----------------------------------------------------------------------------------

    def shown(self):
        """The Active that owns the display: the highest level, the newest among equals; None when idle."""
        best = None
        for a in self.active.values():
            if (
                best is None
                or a.alarm.level > best.alarm.level
                or (a.alarm.level == best.alarm.level and a.order > best.order)
            ):
                best = a
        return best

    def label(self, a):
        # Computed once per shown alarm (display() asks every frame), and kept for that one alone.
        if a is not self._labelled:
            t = ascii_label(a.alarm.text, self.label_max)
            if t is None:
                t = ascii_label(a.key.replace(":", " "), self.label_max)
            self._label = t if t is not None else ""
            self._labelled = a
        return self._label if self._label else None

    def display(self, now):
        """What the LEDs show now. While nothing changes the same Display object comes back (shells call this
        every frame and the ESP32's heap should not churn); treat it as read-only."""
        self.tick(now)
        night = self.quiet_applies(now)
        a = self.shown()
        if a is not None:
            al = a.alarm
            return self._display(al.light_mode, al.color, al.level, self.label(a), night, a.key)
        # Nothing shown: the last label's alarm, perhaps dropped since, is not kept alive for it.
        self._labelled = None
        self._label = None
        h = self.health
        hb_ok = h.heartbeat_ok(now)
        for name, pattern, color, text in HEALTH_PATTERNS:
            ok = hb_ok if name == "heartbeat" else getattr(h, name)
            if not ok:
                return self._display(pattern, color, None, text, night, None)
        if self.idle_pattern == "off":
            return self._display("off", OFF_COLOR, None, None, night, None)
        return self._display("idle", IDLE_COLOR, None, None, night, None)

    def _display(self, pattern, color, level, text, night, key):
        d = self._last_display
        if (
            d is not None
            and d.pattern == pattern
            and d.color is color
            and d.level == level
            and d.text == text
            and d.night == night
            and d.key == key
        ):
            return d
        if not isinstance(color, tuple):
            color = (color[0], color[1], color[2])
        d = Display(pattern, color, level, text, night, key)
        self._last_display = d
        return d

    # ---- what the voice says ----------------------------------------------------------------------------------

    def next_utterance(self, now):
        self.tick(now)
        if self.speaking is not None:
            return None
        top = -1
        for e in self.queue.due(now):
            if not self.permitted(e.alarm.level, e.key, now):
                # Held speech would go off hours later, out of context: drop it, the light still shows.
                self.queue.remove(e.key)
        for e in self.queue.entries:
            if e.alarm.level > top:
                top = e.alarm.level
        for e in self.queue.due(now):
            if e.alarm.level < top:
                # The voice stays with the most urgent level through its gaps: a P1 never slips between the
                # repetitions of a P0.
                return None
            self._seq += 1
            al = e.alarm
            u = Utterance(al.text, al.level, e.key, al.id, self._seq, e.of - e.remaining + 1, e.of)
            self.speaking = u
            self._speaking_entry = e
            self._speaking_order = e.order
            self._cut = False
            return u
        return None

    def must_interrupt(self, now):
        self.tick(now)
        if self.speaking is None:
            return False
        if self._cut:
            return True
        e = self._speaking_entry
        if e not in self.queue.entries:
            return True
        return not self.permitted(e.alarm.level, e.key, now)

    def speech_finished(self, now, seq=None):
        check_now(now)
        u = self.speaking
        if u is None or (seq is not None and seq != u.seq):
            return
        cut = self.must_interrupt(now)
        e = self._speaking_entry
        self.speaking = None
        self._speaking_entry = None
        self._cut = False
        if e not in self.queue.entries:
            return
        if e.order != self._speaking_order:
            # A repeat of the incident replaced the entry mid-sentence: its repetitions start now.
            return
        if cut:
            if self.permitted(e.alarm.level, e.key, now):
                e.due = now  # pre-empted by a P0: say it again later, in full
            else:
                self.queue.remove(e.key)
            return
        e.remaining -= 1
        if e.remaining <= 0:
            self.queue.remove(e.key)
        else:
            e.due = now + self.speech_gap_s

    # ---- status -----------------------------------------------------------------------------------------------

    def ordered(self):
        """Active alarms in display order."""
        # By hand: MicroPython's sort calls a key function at every comparison, and a (level, order) key is a tuple
        # each time (~1 KB of garbage per call with 16 alarms, on every state save and status page).
        out = []
        for a in self.active.values():
            lv = a.alarm.level
            i = len(out)
            while i > 0:
                b = out[i - 1]
                if lv < b.alarm.level or (lv == b.alarm.level and a.order < b.order):
                    break
                i -= 1
            out.insert(i, a)
        return out

    def snapshot(self, now):
        d = {}
        for k, v in self.snapshot_items(now):
            d[k] = list(self.active_rows(now)) if k == "active" else v
        return d

    def snapshot_items(self, now):
        """The snapshot's top-level entries in order, as (key, value), each built only when the next is asked for:
        the board streams its status page and so holds one entry at a time. "active" comes as None: its rows are
        active_rows(now)."""
        self.tick(now)
        yield "now", int(now)
        yield "version", self.state_version
        yield "shown", self.display(now).to_dict()
        yield "active", None
        queued = []
        for e in self.queue.entries:
            due = e.due - now
            queued.append(
                {
                    "key": e.key,
                    "level": LEVEL_NAMES[e.alarm.level],
                    "text": e.alarm.text,
                    "remaining": e.remaining,
                    "due_in_s": int(due) if due > 0 else 0,
                }
            )
        yield (
            "speech",
            {
                "speaking": None if self.speaking is None else self.speaking.to_dict(),
                "queued": queued,
                "capacity": self.queue.capacity,
                "dropped": self.queue.dropped,
            },
        )
        queued = None
        muted = self.mute_until is not None and now < self.mute_until
        acked = list(self.acked.keys())
        acked.sort()
        yield (
            "mute",
            {"active": muted, "remaining_s": int(self.mute_until - now) if muted else 0, "acknowledged": acked},
        )
        acked = None
        h = self.health
        yield (
            "quiet",
            {
                "active": self.quiet_applies(now),
                "enabled": self.quiet.enabled,
                "start": format_hhmm(self.quiet.start),
                "end": format_hhmm(self.quiet.end),
                "utc_offset_min": self.quiet.utc_offset_min,
                "applied": h.clock,
                "local_time": self.quiet.local_time(now),
            },
        )
        problems = h.problems(now)
        yield (
            "health",
            {
                "ok": not problems,
                "problems": problems,
                "clock": h.clock,
                "network": h.network,
                "speech": h.speech,
                "config": h.config,
                "config_detail": h.config_detail,
                "heartbeat": {
                    "armed": h.interval is not None,
                    "ok": h.heartbeat_ok(now),
                    "interval_s": h.interval,
                    "last_age_s": None if h.last_beat is None else int(now - h.last_beat),
                },
            },
        )
        yield "counters", {"alarms": self.alarms_seen, "evicted": self.evicted}

    def active_rows(self, now):
        """The snapshot's "active" list one row at a time: a dict per active alarm, in display order."""
        for a in self.ordered():
            al = a.alarm
            until = self.acked.get(a.key)
            yield {
                "key": a.key,
                "level": LEVEL_NAMES[al.level],
                "text": al.text,
                "color": _color_hex(al.color),
                "light_mode": al.light_mode,
                "audio_mode": al.audio_mode,
                "id": al.id,
                "age_s": int(now - a.since),
                "expires_in_s": None if a.expires is None else int(a.expires - now),
                "acknowledged": until is not None and until > now,
                "acknowledged_by": self.ack_by.get(a.key) if until is not None and until > now else None,
                "ack_remaining_s": int(until - now) if until is not None and until > now else 0,
            }

    # ---- persistence ------------------------------------------------------------------------------------------

    def export_state(self):
        """What must survive a reboot, as a small JSON-able dict (sentinel_core.persist)."""
        from sentinel_core import persist

        return persist.export_state(self)

    def restore(self, d, now):
        """Load a saved state (export_state(), or what persist.write_state wrote, parsed): the P0/P1 alarms, the mute,
        the acknowledgements and the heartbeat come back. ValueError naming what is wrong, with the state untouched,
        when the document is malformed or of a format this terminal does not read."""
        # Checking the document is boot-only code (sentinel_core.restore): the board drops it once restored.
        from sentinel_core.restore import parse_state

        s = parse_state(self, d, now)
        for k in list(self.active.keys()):
            if self.active[k].alarm.level != NORMAL:
                self._drop_active(k)
        for a in s.alarms:
            # Numbered from 1 up, the last in display order first: after the terminal's own, in the same order.
            a.order += self._order
            self.active[a.key] = a
        self._order += len(s.alarms)
        self.mute_until = s.mute_until
        self.acked = {}
        for k in s.acked:
            self._ack(k, s.acked[k], "before reboot")  # who acknowledged is not saved; not interned: > 10 chars
        if s.heartbeat is not None:
            self.health.interval = s.heartbeat
            self.health.last_beat = now
        self.state_version = s.version if s.version > self.state_version else self.state_version + 1
        self.mark_saved()
        self.tick(now)
