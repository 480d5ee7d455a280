# GET /metrics in Prometheus text format, with the emulator's metric names where they mean the same thing.
# Loaded for each scrape and dropped after it (Sentinel.metrics_parts): its bytecode is not held between scrapes.
# Read straight from the terminal, one line at a time (the server writes each as it comes): no status document is
# built for a scrape.
import gc

from sentinel_fw import ticks


def _family(name, kind, text, *samples):
    # samples: (labels, value); labels is "" or the text between the braces. One piece per line: a family built by
    # += left each shorter copy behind, and the server writes each piece as it comes anyway.
    yield "# HELP %s %s\n# TYPE %s %s\n" % (name, text, name, kind)
    for labels, value in samples:
        yield "%s{%s} %s\n" % (name, labels, value) if labels else "%s %s\n" % (name, value)


def parts(sentinel, now):
    """The page in pieces, one line each (the HELP and TYPE lines of a family together)."""
    t = sentinel.terminal
    t.tick(now)
    yield from _family("sentinel_requests_total", "counter", "Signed API requests by outcome.",
                       ('outcome="accepted"', sentinel.requests - sentinel.refused),
                       ('outcome="refused"', sentinel.refused))
    a = sentinel.alarms
    yield from _family("sentinel_alarms_total", "counter", "Accepted alarms by level.",
                       ('level="NORMAL"', a[0]), ('level="P1"', a[1]), ('level="P0"', a[2]))
    p = sentinel.presses
    yield from _family("sentinel_button_presses_total", "counter", "ACK button presses by kind.",
                       ('kind="short"', p["short"]), ('kind="long"', p["long"]))
    yield from _family("sentinel_frames_total", "counter", "Frames sent to the LED matrix.",
                       ("", sentinel.pixels.frames))
    n = [0, 0, 0]
    for x in t.active.values():
        n[x.alarm.level] += 1
    yield from _family("sentinel_active_alarms", "gauge", "Alarms currently active, by level.",
                       ('level="NORMAL"', n[0]), ('level="P1"', n[1]), ('level="P0"', n[2]))
    lv = t.display(now).level
    yield from _family("sentinel_shown_level", "gauge", "Level owning the display: 2 P0, 1 P1, 0 NORMAL, -1 none.",
                       ("", -1 if lv is None else lv))
    muted = t.mute_until is not None and now < t.mute_until
    yield from _family("sentinel_mute_remaining_seconds", "gauge", "Seconds left in the ACK mute (0: not muted).",
                       ("", int(t.mute_until - now) if muted else 0))
    yield from _family("sentinel_quiet_hours", "gauge", "1 inside quiet hours (no speech below P0).",
                       ("", 1 if t.quiet_applies(now) else 0))
    yield from _family("sentinel_speaking", "gauge", "1 while an utterance is being spoken.",
                       ("", 0 if t.speaking is None else 1))
    h = t.health
    yield from _family("sentinel_health", "gauge", "1 when the named health check is fine.",
                       ('check="clock"', 1 if h.clock else 0), ('check="network"', 1 if h.network else 0),
                       ('check="speech"', 1 if h.speech else 0), ('check="config"', 1 if h.config else 0))
    yield from _family("sentinel_watchdog_feeds_total", "counter", "Hardware watchdog feeds.",
                       ("", sentinel.watchdog.feeds))
    st = sentinel.store
    yield from _family("sentinel_flash_writes_total", "counter", "State writes to flash.",
                       ("", 0 if st is None else st.writes))
    try:
        free = gc.mem_free()
    except AttributeError:
        free = None
    if free is not None:
        yield from _family("sentinel_heap_free_bytes", "gauge", "Free MicroPython heap.", ("", free))
    yield from _family("sentinel_uptime_seconds", "gauge", "Seconds since boot.",
                       ("", ticks.diff(ticks.ms(), sentinel.started_ms) // 1000))
