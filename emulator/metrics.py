"""/metrics in the Prometheus text exposition format (version 0.0.4), from the engine's counters and its snapshot."""

LEVELS = ("P0", "P1", "NORMAL")
HEALTH = ("clock", "network", "speech", "config")


def _esc(v):
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**kw):
    if not kw:
        return ""
    return "{" + ",".join('%s="%s"' % (k, _esc(v)) for k, v in sorted(kw.items())) + "}"


class _Out:
    def __init__(self):
        self.lines = []

    def family(self, name, kind, help_text):
        self.lines.append("# HELP %s %s" % (name, help_text))
        self.lines.append("# TYPE %s %s" % (name, kind))

    def sample(self, name, value, **labels):
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, float):
            text = repr(value)
        else:
            text = str(value)
        self.lines.append("%s%s %s" % (name, _labels(**labels), text))

    def text(self):
        return "\n".join(self.lines) + "\n"


def render_metrics(engine):
    m = engine.metrics.copy()
    view = engine.view
    snap = view.snapshot if view is not None else {}
    o = _Out()

    o.family("sentinel_requests_total", "counter", "Signed API requests by endpoint, outcome and HTTP status.")
    for (endpoint, outcome, status), n in sorted(m["requests"].items(), key=lambda kv: tuple(map(str, kv[0]))):
        o.sample("sentinel_requests_total", n, endpoint=endpoint, outcome=outcome, status=status)

    o.family("sentinel_alarms_total", "counter", "Accepted alarms by level.")
    for level in LEVELS:
        o.sample("sentinel_alarms_total", m["alarms"].get(level, 0), level=level)

    o.family("sentinel_button_presses_total", "counter", "ACK button presses (on-screen or keyboard) by kind.")
    for kind in ("short", "long"):
        o.sample("sentinel_button_presses_total", m["buttons"].get(kind, 0), kind=kind)

    o.family("sentinel_utterances_total", "counter", "Utterances handed to the voice, by how they ended.")
    for kind in ("completed", "cut"):
        o.sample("sentinel_utterances_total", m["utterances"].get(kind, 0), outcome=kind)

    o.family("sentinel_request_handle_seconds", "summary", "Time from a request reaching the engine's inbox "
             "to its answer.")
    o.sample("sentinel_request_handle_seconds_sum", float(m["handle_seconds_sum"]))
    o.sample("sentinel_request_handle_seconds_count", m["handle_count"])

    o.family("sentinel_frames_total", "counter", "Frames rendered by the engine.")
    o.sample("sentinel_frames_total", m["frames"])
    o.family("sentinel_frame_overruns_total", "counter", "Times the engine fell more than a frame behind.")
    o.sample("sentinel_frame_overruns_total", m["frame_overruns"])

    active = snap.get("active") or []
    o.family("sentinel_active_alarms", "gauge", "Alarms currently active, by level.")
    for level in LEVELS:
        o.sample("sentinel_active_alarms", sum(1 for a in active if a.get("level") == level), level=level)

    shown = snap.get("shown") or {}
    o.family("sentinel_display_info", "gauge", "What the matrix shows now (value is always 1).")
    o.sample("sentinel_display_info", 1, pattern=shown.get("pattern") or "unknown",
             level=shown.get("level") or "none")
    o.family("sentinel_shown_level", "gauge", "Level owning the display: 2 P0, 1 P1, 0 NORMAL, -1 none.")
    lv = shown.get("level")
    o.sample("sentinel_shown_level", {"P0": 2, "P1": 1, "NORMAL": 0}.get(lv, -1))

    mute = snap.get("mute") or {}
    o.family("sentinel_mute_remaining_seconds", "gauge", "Seconds left in the ACK mute (0: not muted).")
    o.sample("sentinel_mute_remaining_seconds", int(mute.get("remaining_s") or 0) if mute.get("active") else 0)
    quiet = snap.get("quiet") or {}
    o.family("sentinel_quiet_hours", "gauge", "1 inside quiet hours (no speech below P0).")
    o.sample("sentinel_quiet_hours", bool(quiet.get("active")))

    speech = snap.get("speech") or {}
    o.family("sentinel_speaking", "gauge", "1 while an utterance is being spoken.")
    o.sample("sentinel_speaking", speech.get("speaking") is not None)
    o.family("sentinel_speech_queued", "gauge", "Utterances waiting.")
    o.sample("sentinel_speech_queued", len(speech.get("queued") or []))
    o.family("sentinel_speech_dropped_total", "counter", "Utterances dropped because the queue was full.")
    o.sample("sentinel_speech_dropped_total", int(speech.get("dropped") or 0))

    health = snap.get("health") or {}
    o.family("sentinel_health_ok", "gauge", "1 when the named health check is fine.")
    for name in HEALTH:
        if name in health:
            o.sample("sentinel_health_ok", bool(health.get(name)), check=name)
    hb = health.get("heartbeat") or {}
    if hb:
        o.sample("sentinel_health_ok", bool(hb.get("ok", True)), check="heartbeat")

    o.family("sentinel_engine_up", "gauge", "1 while the engine thread runs.")
    o.sample("sentinel_engine_up", engine.alive and engine.error is None)
    return o.text()
