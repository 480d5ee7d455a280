"""The panel's facts in words, from what the engine publishes: one source for the window and the browser page.

Above all it answers the question a silent alarm raises in the room: why is it not speaking? An earlier ACK of the
same incident, the ACK mute (until HH:MM), quiet hours (until HH:MM, only P0 speaks), an alarm sent without speech,
or a voice nobody can hear (no audio device, no speech engine).
"""

import time

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


def silence(snap, voice=None):
    """Why the shown alarm is not being spoken, in words; None when it is speaking, will speak, or nothing is shown.

    The order is the state machine's: an acknowledged incident is silent at any level; the ACK mute and quiet hours
    hold speech below P0 only.
    """
    shown = snap.get("shown") or {}
    level = shown.get("level")
    if level is None:
        return None
    row = None
    for a in snap.get("active") or []:
        if a.get("key") == shown.get("key"):
            row = a
            break
    if row is None:
        return None
    speech = snap.get("speech") or {}
    speaking = speech.get("speaking")
    if speaking and speaking.get("key") == row.get("key"):
        audible, why = voice_state(voice)
        return None if audible or voice is None else "speaking, but nobody hears it: " + why
    if any(q.get("key") == row.get("key") for q in speech.get("queued") or []):
        return None
    mute = snap.get("mute") or {}
    if row.get("acknowledged"):
        if mute.get("active"):
            return "acknowledged: silent until %s" % hhmm(snap, mute.get("remaining_s", 0))
        return "acknowledged: this incident stays silent"
    if row.get("audio_mode") == "none":
        return "sent without speech (audio_mode none)"
    if level != "P0":
        if mute.get("active"):
            return "muted until %s" % hhmm(snap, mute.get("remaining_s", 0))
        quiet = snap.get("quiet") or {}
        if quiet.get("active"):
            return "quiet hours until %s: only P0 speaks" % quiet.get("end")
    if level == "NORMAL":
        return None
    return "spoken in full: no repetition left"


def panel(view):
    """Everything the window's panel and the browser page show, as plain data."""
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
    out = {
        "level": shown.get("level"),
        "pattern": shown.get("pattern"),
        "label": shown.get("text"),
        "counts": counts,
        "text": active[0].get("text") if active else None,
        "speaking": None
        if not speaking
        else {"n": speaking.get("n"), "of": speaking.get("of"), "text": speaking.get("text")},
        "queued": len(speech.get("queued") or []),
        "silence": silence(snap, voice),
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
    }
    return out
