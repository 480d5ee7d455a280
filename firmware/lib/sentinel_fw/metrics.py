# GET /metrics in Prometheus text format, with the emulator's metric names where they mean the same thing.
# Loaded for each scrape and dropped after it (Sentinel.metrics_parts): its bytecode is not held between scrapes.
# Read straight from the terminal, one line at a time (the server writes each as it comes): no status document is
# built for a scrape.
import gc

from sentinel_fw import ticks

# Every family as one text, a line each: name (after "sentinel_"), type, label=values or "-", help. One string
# constant is one heap object while the module is loaded, where a name, a help text and a label each were one
# (about 1 KB more beside every line of a scrape). The values come in this order from _values().
_FAMILIES = (
    "requests_total counter outcome=accepted,refused Signed API requests by outcome.\n"
    "alarms_total counter level=NORMAL,P1,P0 Accepted alarms by level.\n"
    "button_presses_total counter kind=short,long ACK button presses by kind.\n"
    "frames_total counter - Frames sent to the LED matrix.\n"
    "active_alarms gauge level=NORMAL,P1,P0 Alarms currently active, by level.\n"
    "shown_level gauge - Level owning the display: 2 P0, 1 P1, 0 NORMAL, -1 none.\n"
    "mute_remaining_seconds gauge - Seconds left in the ACK mute (0: not muted).\n"
    "quiet_hours gauge - 1 inside quiet hours (no speech below P0).\n"
    "speaking gauge - 1 while an utterance is being spoken.\n"
    "health gauge check=clock,network,speech,config 1 when the named health check is fine.\n"
    "watchdog_feeds_total counter - Hardware watchdog feeds.\n"
    "flash_writes_total counter - State writes to flash.\n"
    "heap_free_bytes gauge - Free MicroPython heap.\n"
    "uptime_seconds gauge - Seconds since boot.\n"
)


def _values(sentinel, now):
    # One item per line of _FAMILIES: a tuple of its samples' values (one for a family without labels), or None
    # (left out).
    t = sentinel.terminal
    t.tick(now)
    yield sentinel.requests - sentinel.refused, sentinel.refused
    yield tuple(sentinel.alarms)
    p = sentinel.presses
    yield p["short"], p["long"]
    yield (sentinel.pixels.frames,)
    n = [0, 0, 0]
    for x in t.active.values():
        n[x.alarm.level] += 1
    yield tuple(n)
    lv = t.display(now).level
    yield (-1 if lv is None else lv,)
    muted = t.mute_until is not None and now < t.mute_until
    yield (int(t.mute_until - now) if muted else 0,)
    yield (1 if t.quiet_applies(now) else 0,)
    yield (0 if t.speaking is None else 1,)
    h = t.health
    yield 1 if h.clock else 0, 1 if h.network else 0, 1 if h.speech else 0, 1 if h.config else 0
    yield (sentinel.watchdog.feeds,)
    st = sentinel.store
    yield (0 if st is None else st.writes,)
    try:
        yield (gc.mem_free(),)
    except AttributeError:
        yield None
    yield (ticks.diff(ticks.ms(), sentinel.started_ms) // 1000,)


def parts(sentinel, now):
    """The page in pieces, one line each (the HELP and TYPE lines of a family together)."""
    pos = 0
    for v in _values(sentinel, now):
        end = _FAMILIES.find("\n", pos)
        name, kind, labels, text = _FAMILIES[pos:end].split(" ", 3)
        pos = end + 1
        if v is None:
            continue
        yield "# HELP sentinel_%s %s\n# TYPE sentinel_%s %s\n" % (name, text, name, kind)
        if labels == "-":
            yield "sentinel_%s %s\n" % (name, v[0])
        else:
            key, names = labels.split("=")
            i = 0
            for label in names.split(","):
                yield 'sentinel_%s{%s="%s"} %s\n' % (name, key, label, v[i])
                i += 1
