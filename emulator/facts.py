"""The panel's facts in words, from what the engine publishes: computed once here, drawn as they are by the window
and the browser page (neither works a fact out again).

Above all it answers the question a silent alarm raises in the room: why is it not speaking? The reason is the
core's (sentinel_core.silence, from the terminal's own rules): an ACK of the same incident, the ACK mute (until
HH:MM), quiet hours (until HH:MM, only P0 speaks), an alarm sent without speech, speech that is over; the emulator
adds a voice nobody can hear (no audio device, no speech engine).
"""

import time

from sentinel_core import silence as core_silence

# The renderer's bytes are LED drive levels (linear light); a monitor expects sRGB-encoded values. Without this
# a dimmed matrix (brightness 96 of 255) would look muddy on screen while the real LEDs look bright.
TO_SCREEN = bytes(min(255, int(round(255 * (v / 255.0) ** (1 / 2.2)))) for v in range(256))

NO_DEVICE = "no audio device"


def screen_rgb(rgb):
    """Row-major LED drive levels -> the sRGB bytes a screen shows (what the room sees)."""
    return bytes(TO_SCREEN[v] for v in rgb)


def hhmm(snap, seconds_from_now):
    """Local HH:MM (the terminal's quiet-hours offset) of now + seconds, from a snapshot."""
    now = snap.get("now") or time.time()
    off = (snap.get("quiet") or {}).get("utc_offset_min") or 0
    t = time.gmtime(int(now + seconds_from_now + off * 60))
    return "%02d:%02d" % (t.tm_hour, t.tm_min)


def voice_state(voice):
    """(audible, reason) for the emulator's voice dict (View.voice); reason None when it is heard."""
    if not voice:
        return False, "no voice"
    if voice.get("mode") == "off":
        return False, "voice off (--no-voice)"
    if not voice.get("available"):
        return False, "no speech engine"
    if voice.get("audible") is False or (voice.get("mode") == "device" and voice.get("player") == "silent"):
        return False, NO_DEVICE
    return True, None


def fmt_mmss(seconds):
    s = max(0, int(seconds))
    return "%d:%02d" % (s // 60, s % 60)


def fmt_age(seconds):
    """How long an alarm has stood: "45s", "12m05s", "3h07m"."""
    s = max(0, int(seconds))
    if s < 60:
        return "%ds" % s
    if s < 3600:
        return "%dm%02ds" % (s // 60, s % 60)
    return "%dh%02dm" % (s // 3600, s % 3600 // 60)


# Who acknowledged, in the page's words: the core records "button" (the box's), "window" and "page" (the
# emulator's), "before reboot" (an ACK that survived a restart), or what an ACK request named ("api request" by
# default). The core's words above 10 characters are not interned on the board, whose pool of names is nearly full.
ACK_BY_WORDS = {
    "button": "the button",
    "window": "the window",
    "page": "the page",
    "before reboot": "before a restart",
    "api request": "an ACK request",
}


def alarm_line(a):
    """One active alarm in a line: level, age, ACK state and by whom, text."""
    if a.get("acknowledged"):
        by = a.get("acknowledged_by")
        ack = "ACK by %s, muted %s more" % (ACK_BY_WORDS.get(by, by or "?"), fmt_mmss(a.get("ack_remaining_s", 0)))
    else:
        ack = "not acknowledged" if a.get("level") != "NORMAL" else "recovered"
    return "%s  %s  %s  %s" % (a.get("level"), fmt_age(a.get("age_s", 0)), ack, a.get("text") or "")


def silence(reason, snap, voice=None):
    """Why the shown alarm is not being spoken, in words, from the core's reason (sentinel_core.silence.reason);
    None when it is speaking and heard, will speak, or nothing is shown."""
    shown = snap.get("shown") or {}
    if shown.get("level") is None:
        return None
    if reason is None:
        speaking = (snap.get("speech") or {}).get("speaking")
        if voice is not None and speaking and speaking.get("key") == shown.get("key"):
            audible, why = voice_state(voice)
            return None if audible else "speaking, but nobody hears it: %s" % why
        return None
    mute = snap.get("mute") or {}
    if reason == core_silence.ACKED:
        if mute.get("active"):
            return "acknowledged: silent until %s" % hhmm(snap, mute.get("remaining_s", 0))
        return "acknowledged: this incident stays silent"
    if reason == core_silence.NO_SPEECH:
        return "sent without speech (audio_mode none)"
    if reason == core_silence.MUTED:
        return "muted until %s" % hhmm(snap, mute.get("remaining_s", 0))
    if reason == core_silence.QUIET:
        return "quiet hours until %s: only P0 speaks" % (snap.get("quiet") or {}).get("end")
    return "its speech is over (said in full or cut short): its next alarm speaks"


def panel(view):
    """Everything the window's panel and the browser page show: the facts as data, and `lines`, each line's words
    as both draw them."""
    snap = (view.snapshot if view else None) or {}
    voice = view.voice if view else None
    shown = snap.get("shown") or {}
    active = snap.get("active") or []
    counts = {}
    for a in active:
        counts[a.get("level")] = counts.get(a.get("level"), 0) + 1
    speech = snap.get("speech") or {}
    speaking = speech.get("speaking")
    mute = snap.get("mute") or {}
    quiet = snap.get("quiet") or {}
    health = snap.get("health") or {}
    hb = health.get("heartbeat") or {}
    audible, voice_reason = voice_state(voice)
    why = silence(getattr(view, "silence", None), snap, voice)
    queued = len(speech.get("queued") or [])
    level = shown.get("level")
    pattern = shown.get("pattern") or "?"
    summary = ", ".join("%d %s" % (counts[k], k) for k in ("P0", "P1", "NORMAL") if k in counts)
    span = "%s-%s" % (quiet.get("start"), quiet.get("end"))
    lines = {
        "badge": "%s  %s" % (level, pattern) if level else pattern.replace("_", " ").upper(),
        "counts": ("active: " + summary) if summary else "no active alarm",
        # every active alarm, in the terminal's display order (P0 first, then P1, NORMAL; oldest first in a level)
        "alarms": [alarm_line(a) for a in active],
        # Not "speaking" when nobody can hear it: the utterance only takes its time.
        "speech": (
            "%s %s/%s: %s"
            % ("speaking" if audible else "not heard", speaking.get("n"), speaking.get("of"), speaking.get("text"))
            if speaking
            else "voice idle" + (", %d queued" % queued if queued else "")
        ),
        "silence": "SILENT: " + why if why else "",
        "voice": "" if audible else "voice silent: %s (light only)" % voice_reason,
        "mute": (
            "MUTED until %s (%s left)" % (hhmm(snap, mute.get("remaining_s", 0)), fmt_mmss(mute.get("remaining_s", 0)))
            if mute.get("active")
            else "sound on"
            if audible
            else "not muted"
        ),
        "quiet": (
            "QUIET HOURS %s (only P0 speaks)" % span
            if quiet.get("active")
            else "quiet hours %s  local %s" % (span, quiet.get("local_time") or "")
            if quiet and quiet.get("enabled", True)
            else ""
        ),
    }
    return {
        "level": level,
        "pattern": shown.get("pattern"),
        "label": shown.get("text"),
        "counts": counts,
        "text": active[0].get("text") if active else None,
        "alarms": [
            {
                "key": a.get("key"),
                "level": a.get("level"),
                "text": a.get("text"),
                "age_s": a.get("age_s"),
                "acknowledged": bool(a.get("acknowledged")),
                "acknowledged_by": a.get("acknowledged_by"),
            }
            for a in active
        ],
        "speaking": None
        if not speaking
        else {"n": speaking.get("n"), "of": speaking.get("of"), "text": speaking.get("text")},
        "queued": queued,
        "silence": why,
        "voice": {
            "audible": audible,
            "reason": voice_reason,
            "mode": (voice or {}).get("mode"),
            "error": (voice or {}).get("error"),
        },
        "mute": {
            "active": bool(mute.get("active")),
            "remaining_s": mute.get("remaining_s", 0),
            "until": hhmm(snap, mute.get("remaining_s", 0)) if mute.get("active") else None,
        },
        "quiet": {
            "active": bool(quiet.get("active")),
            "enabled": quiet.get("enabled", True),
            "start": quiet.get("start"),
            "end": quiet.get("end"),
            "local_time": quiet.get("local_time"),
        },
        "health": {
            "clock": health.get("clock", True),
            "network": health.get("network", True),
            "voice": bool(health.get("speech", True)) and audible,
            "heartbeat": hb.get("ok", True) if hb.get("armed") else None,
            "problems": health.get("problems") or [],
        },
        "button_pressed": bool(view.button_pressed) if view else False,
        "lines": lines,
    }
