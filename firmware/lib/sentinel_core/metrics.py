# The terminal's /metrics, one schema and one writer for both shells (the box streams the pieces, the emulator joins
# them): Prometheus text exposition format 0.0.4. One Prometheus job scrapes boxes and emulators alike, so a family
# means the same on both; the box's own two (watchdog feeds, free heap) are here too, written when the box gives
# their value, and the emulator's own three (emulator/metrics.py) go through family() as well.
# The values come from the shell glue (sentinel_core.shell: its counters and its terminal) and from the figures the
# shell measures about itself.
#
# The schema is parts() itself: one family() call per family, in the page's order, each with its HELP and TYPE text
# and its sample line as literals. Nothing is parsed at a scrape and no table is built. The literals are long on
# purpose: MicroPython interns (for good) only strings of 10 characters or less, and on the board (once it runs on
# this writer, docs/SHELL_CONTRACT.md) this module is loaded for a scrape and dropped after it, so a long literal
# leaves the heap with it where a name or type of its own ("counter", "health_ok") would stay interned. Interned
# names are what the board on the glue ran short of: on the Unix port the 7th pool of names is ~14 KB in one block,
# which a heap a storm had fragmented could not give, and from then on no module could load (tests/
# test_runtime_unix.py's small-heap storm; n_qstr after boot, a state write and a scrape: 1243 with the board's own
# writer, 1269 on the glue with the space-separated family text this replaces, 1257 with this; the pool ends
# between 1260 and 1269).


def label(v):
    """A label value as the text format writes it: backslash, double quote and line feed escaped. The one escaper:
    the host's pages (host_client/exposition.py, the gateway's and the probe's) use it too. Its name and its one
    literal are what the board already holds: `label` is interned by the terminal, and the escapes are one string
    of more than 10 characters, split here (short literals would be interned for good, and the board's pool of
    names is full: tests/test_runtime_unix.py's small-heap storm failed with the short ones)."""
    e = '\\ \\\\ " \\" \n \\n'.split(" ")  # what, then how it is written; the backslash first
    v = str(v)
    i = 0
    while i < 6:
        v = v.replace(e[i], e[i + 1])
        i += 2
    return v


def family(text, sample, v, names=None):
    """The lines of one family: text, its HELP and TYPE lines; then a line per sample, sample % (label value,
    number) or sample % number without labels. v: a number (a bool counts as 0 or 1) without labels; with names (a
    fixed label set), the numbers in names' order; else {label value: number} (values that vary, such as error
    codes); for a summary (sample with two numbers), (sum, count)."""
    yield text
    if names is not None:
        i = 0
        for lv in names:
            yield sample % (lv, int(v[i]))
            i += 1
    elif isinstance(v, dict):
        for lv in sorted(v):
            yield sample % (label(lv), v[lv])
    elif isinstance(v, tuple):
        yield sample % v
    else:
        yield sample % (int(v) if v is True or v is False else v)


def parts(glue, now, extra):
    """The page in pieces. extra: {family name (after "sentinel_"): value} of the figures the shell measures itself:
    state_writes_total and uptime_seconds (both shells), watchdog_feeds_total and heap_free_bytes (the box's own); a
    family the shell leaves out is not on its page. The emulator's own families follow (emulator/metrics.py, written
    with family() too)."""
    t = glue.terminal
    t.tick(now)
    yield from family(
        "# HELP sentinel_requests_total Signed API requests by outcome.\n# TYPE sentinel_requests_total counter\n",
        'sentinel_requests_total{outcome="%s"} %s\n',
        glue.requests,
        ("accepted", "duplicate", "refused"),
    )
    yield from family(
        "# HELP sentinel_refusals_total Refused requests by error code.\n# TYPE sentinel_refusals_total counter\n",
        'sentinel_refusals_total{code="%s"} %s\n',
        glue.refused,
    )
    yield from family(
        "# HELP sentinel_accepted_total Accepted new requests by kind: alarm, ack, heartbeat, unmute.\n"
        "# TYPE sentinel_accepted_total counter\n",
        'sentinel_accepted_total{kind="%s"} %s\n',
        glue.accepted,
    )
    levels = ("NORMAL", "P1", "P0")
    yield from family(
        "# HELP sentinel_alarms_total Accepted alarms by level.\n# TYPE sentinel_alarms_total counter\n",
        'sentinel_alarms_total{level="%s"} %s\n',
        glue.alarms,
        levels,
    )
    yield from family(
        "# HELP sentinel_button_presses_total ACK button presses by kind.\n"
        "# TYPE sentinel_button_presses_total counter\n",
        'sentinel_button_presses_total{kind="%s"} %s\n',
        glue.presses,
        ("short", "long"),
    )
    yield from family(
        "# HELP sentinel_utterances_total Utterances by how they ended.\n# TYPE sentinel_utterances_total counter\n",
        'sentinel_utterances_total{outcome="%s"} %s\n',
        glue.utterances,
        ("completed", "cut", "failed"),
    )
    yield from family(
        "# HELP sentinel_frames_total Frames rendered.\n# TYPE sentinel_frames_total counter\n",
        "sentinel_frames_total %s\n",
        glue.frames,
    )
    c = [0, 0, 0]
    for x in t.active.values():
        c[x.alarm.level] += 1
    yield from family(
        "# HELP sentinel_active_alarms Active alarms by level.\n# TYPE sentinel_active_alarms gauge\n",
        'sentinel_active_alarms{level="%s"} %s\n',
        c,
        levels,
    )
    c = None
    d = t.display(now)
    yield from family(
        "# HELP sentinel_shown_level Level shown: 2 P0, 1 P1, 0 NORMAL, -1 none.\n# TYPE sentinel_shown_level gauge\n",
        "sentinel_shown_level %s\n",
        -1 if d.level is None else d.level,
    )
    yield from family(
        "# HELP sentinel_display_info The pattern shown (always 1).\n# TYPE sentinel_display_info gauge\n",
        'sentinel_display_info{pattern="%s"} %s\n',
        {d.pattern: 1},
    )
    d = None
    muted = t.mute_until is not None and now < t.mute_until
    yield from family(
        "# HELP sentinel_mute_remaining_seconds Seconds left in the ACK mute.\n"
        "# TYPE sentinel_mute_remaining_seconds gauge\n",
        "sentinel_mute_remaining_seconds %s\n",
        int(t.mute_until - now) if muted else 0,
    )
    yield from family(
        "# HELP sentinel_quiet_hours 1 inside quiet hours.\n# TYPE sentinel_quiet_hours gauge\n",
        "sentinel_quiet_hours %s\n",
        t.quiet_applies(now),
    )
    yield from family(
        "# HELP sentinel_speaking 1 while speaking.\n# TYPE sentinel_speaking gauge\n",
        "sentinel_speaking %s\n",
        t.speaking is not None,
    )
    yield from family(
        "# HELP sentinel_speech_queued Utterances waiting.\n# TYPE sentinel_speech_queued gauge\n",
        "sentinel_speech_queued %s\n",
        len(t.queue.entries),
    )
    yield from family(
        "# HELP sentinel_speech_dropped_total Utterances dropped, queue full.\n"
        "# TYPE sentinel_speech_dropped_total counter\n",
        "sentinel_speech_dropped_total %s\n",
        t.queue.dropped,
    )
    h = t.health
    yield from family(
        "# HELP sentinel_health_ok 1 when the health check is fine.\n# TYPE sentinel_health_ok gauge\n",
        'sentinel_health_ok{check="%s"} %s\n',
        (h.clock, h.network, h.speech, h.config, h.heartbeat_ok(now)),
        ("clock", "network", "speech", "config", "heartbeat"),
    )
    h = None
    # The shell's own figures: (its key in extra, HELP and TYPE, sample).
    for name, text, sample in (
        (
            "state_writes_total",
            "# HELP sentinel_state_writes_total Saves of the state kept across restarts.\n"
            "# TYPE sentinel_state_writes_total counter\n",
            "sentinel_state_writes_total %s\n",
        ),
        (
            "uptime_seconds",
            "# HELP sentinel_uptime_seconds Seconds since start.\n# TYPE sentinel_uptime_seconds gauge\n",
            "sentinel_uptime_seconds %s\n",
        ),
        (
            "watchdog_feeds_total",
            "# HELP sentinel_watchdog_feeds_total Hardware watchdog feeds.\n"
            "# TYPE sentinel_watchdog_feeds_total counter\n",
            "sentinel_watchdog_feeds_total %s\n",
        ),
        (
            "heap_free_bytes",
            "# HELP sentinel_heap_free_bytes Free MicroPython heap.\n# TYPE sentinel_heap_free_bytes gauge\n",
            "sentinel_heap_free_bytes %s\n",
        ),
    ):
        v = extra.get(name)
        if v is not None:
            yield from family(text, sample, v)
