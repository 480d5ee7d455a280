# GET /metrics in Prometheus text format, with the emulator's metric names where they mean the same thing.
# Imported on the first scrape only: a box nobody scrapes does not pay its bytecode in heap.

LEVELS = ("NORMAL", "P1", "P0")


def _line(out, name, value, labels=None):
    if labels:
        out.append("%s{%s} %s" % (name, ",".join('%s="%s"' % kv for kv in labels), value))
    else:
        out.append("%s %s" % (name, value))


def _family(out, name, kind, text):
    out.append("# HELP %s %s" % (name, text))
    out.append("# TYPE %s %s" % (name, kind))


def render(sentinel, now):
    st = sentinel.status(now)
    dev = st["device"]
    out = []
    _family(out, "sentinel_requests_total", "counter", "Signed API requests by outcome.")
    _line(out, "sentinel_requests_total", sentinel.requests - sentinel.refused, (("outcome", "accepted"),))
    _line(out, "sentinel_requests_total", sentinel.refused, (("outcome", "refused"),))
    _family(out, "sentinel_alarms_total", "counter", "Accepted alarms by level.")
    for i in range(3):
        _line(out, "sentinel_alarms_total", sentinel.alarms[i], (("level", LEVELS[i]),))
    _family(out, "sentinel_button_presses_total", "counter", "ACK button presses by kind.")
    _line(out, "sentinel_button_presses_total", sentinel.presses["short"], (("kind", "short"),))
    _line(out, "sentinel_button_presses_total", sentinel.presses["long"], (("kind", "long"),))
    _family(out, "sentinel_frames_total", "counter", "Frames sent to the LED matrix.")
    _line(out, "sentinel_frames_total", dev["matrix"]["frames"])
    _family(out, "sentinel_active_alarms", "gauge", "Alarms currently active, by level.")
    for lv in LEVELS:
        _line(out, "sentinel_active_alarms", sum(1 for a in st["active"] if a.get("level") == lv), (("level", lv),))
    _family(out, "sentinel_shown_level", "gauge", "Level owning the display: 2 P0, 1 P1, 0 NORMAL, -1 none.")
    lv = st["shown"].get("level")
    _line(out, "sentinel_shown_level", LEVELS.index(lv) if lv in LEVELS else -1)
    mute = st["mute"]
    _family(out, "sentinel_mute_remaining_seconds", "gauge", "Seconds left in the ACK mute (0: not muted).")
    _line(out, "sentinel_mute_remaining_seconds", int(mute.get("remaining_s") or 0) if mute.get("active") else 0)
    _family(out, "sentinel_quiet_hours", "gauge", "1 inside quiet hours (no speech below P0).")
    _line(out, "sentinel_quiet_hours", 1 if st["quiet"].get("active") else 0)
    _family(out, "sentinel_speaking", "gauge", "1 while an utterance is being spoken.")
    _line(out, "sentinel_speaking", 0 if st["speech"].get("speaking") is None else 1)
    _family(out, "sentinel_health", "gauge", "1 when the named health check is fine.")
    for name in ("clock", "network", "speech", "config"):
        _line(out, "sentinel_health", 1 if st["health"].get(name) else 0, (("check", name),))
    _family(out, "sentinel_watchdog_feeds_total", "counter", "Hardware watchdog feeds.")
    _line(out, "sentinel_watchdog_feeds_total", dev["watchdog"]["feeds"])
    _family(out, "sentinel_flash_writes_total", "counter", "State writes to flash.")
    _line(out, "sentinel_flash_writes_total", dev["flash"]["writes"] if dev["flash"] else 0)
    if "heap_free" in dev:
        _family(out, "sentinel_heap_free_bytes", "gauge", "Free MicroPython heap.")
        _line(out, "sentinel_heap_free_bytes", dev["heap_free"])
    _family(out, "sentinel_uptime_seconds", "gauge", "Seconds since boot.")
    _line(out, "sentinel_uptime_seconds", dev["uptime_s"])
    out.append("")
    return "\n".join(out).encode()
