# The terminal's /metrics, one schema and one writer for both shells (the box streams the pieces, the emulator joins
# them): Prometheus text exposition format 0.0.4. One Prometheus job scrapes boxes and emulators alike, so a family
# means the same on both; the few only one shell can measure say so in the schema. The values come from the shell
# glue (sentinel_core.shell: its counters and its terminal) and from the figures the shell measures about itself.
# On the board this module is loaded for a scrape and dropped after it (sentinel_fw.app.metrics_parts).

# Every family, a line each, in the page's order: its name after "sentinel_", type, labels, help. Labels: "-" none;
# "name=a,b,c" a fixed set, whose values come as numbers in that order; "name" alone, values that vary (error codes),
# which come as {label value: number}. One text rather than a tuple of strings per family: the board loads this
# module for every scrape, and the tuples held ~3 KB more beside it (bench/bench_firmware.py's /metrics peak). Both
# shells publish every family here but BOX_ONLY; the emulator adds its own (emulator/metrics.py, written by lines()
# too). family(name) reads a line by its name.
FAMILIES = """
requests_total counter outcome=accepted,duplicate,refused Signed API requests by outcome.
refusals_total counter code Refused requests by error code.
accepted_total counter kind Accepted new requests by kind: alarm, ack, heartbeat, unmute.
alarms_total counter level=NORMAL,P1,P0 Accepted alarms by level.
button_presses_total counter kind=short,long ACK button presses by kind.
utterances_total counter outcome=completed,cut,failed Utterances by how they ended.
frames_total counter - Frames rendered.
active_alarms gauge level=NORMAL,P1,P0 Active alarms by level.
shown_level gauge - Level shown: 2 P0, 1 P1, 0 NORMAL, -1 none.
display_info gauge pattern The pattern shown (always 1).
mute_remaining_seconds gauge - Seconds left in the ACK mute.
quiet_hours gauge - 1 inside quiet hours.
speaking gauge - 1 while speaking.
speech_queued gauge - Utterances waiting.
speech_dropped_total counter - Utterances dropped, queue full.
health_ok gauge check=clock,network,speech,config,heartbeat 1 when the health check is fine.
state_writes_total counter - Saves of the state kept across restarts.
uptime_seconds gauge - Seconds since start.
watchdog_feeds_total counter - Hardware watchdog feeds.
heap_free_bytes gauge - Free MicroPython heap.
"""
BOX_ONLY = ("watchdog_feeds_total", "heap_free_bytes")


def family(name, more=""):
    """(type, labels, help) of the family called name (after "sentinel_"; labels as in FAMILIES), from FAMILIES
    or more (a shell's own, in the same form); KeyError when neither has it."""
    for text in (FAMILIES, more):
        i = text.find("\n" + name + " ")
        if i >= 0:
            return text[i + 2 + len(name):text.find("\n", i + 1)].split(" ", 2)
    raise KeyError("no metric family sentinel_" + name)


def values(glue, now, shell):
    """(family name, value) for every family of the page, in its order. value: a number for a family without
    labels, the numbers in the schema's order for a fixed label set, {label value: number} for varying ones,
    (sum, count) for a summary; a bool counts as 0 or 1. shell: {family name: value} of the shell's own figures
    (state_writes_total and uptime_seconds, and those the schema gives to it alone); what it leaves out is not on
    its page."""
    t = glue.terminal
    t.tick(now)
    yield "requests_total", glue.requests
    yield "refusals_total", glue.refusals
    yield "accepted_total", glue.kinds
    yield "alarms_total", glue.alarms
    yield "button_presses_total", glue.presses
    yield "utterances_total", glue.utterances
    yield "frames_total", glue.frames
    c = [0, 0, 0]
    for x in t.active.values():
        c[x.alarm.level] += 1
    yield "active_alarms", c
    d = t.display(now)
    yield "shown_level", -1 if d.level is None else d.level
    yield "display_info", {d.pattern: 1}
    muted = t.mute_until is not None and now < t.mute_until
    yield "mute_remaining_seconds", int(t.mute_until - now) if muted else 0
    yield "quiet_hours", t.quiet_applies(now)
    yield "speaking", t.speaking is not None
    yield "speech_queued", len(t.queue.entries)
    yield "speech_dropped_total", t.queue.dropped
    h = t.health
    yield "health_ok", (h.clock, h.network, h.speech, h.config, h.heartbeat_ok(now))
    for name in shell:
        yield name, shell[name]


def lines(glue, now, shell, more=""):
    """The page in pieces: a family's HELP and TYPE lines together, then a line per sample. more: the shell's own
    families, in FAMILIES' form."""
    # v's shape follows the family's labels (values()): pyright sees only their union, hence the ignores below.
    for name, v in values(glue, now, shell):
        kind, labels, text = family(name, more)
        yield "# HELP sentinel_%s %s\n# TYPE sentinel_%s %s\n" % (name, text, name, kind)
        if kind == "summary":
            yield "sentinel_%s_sum %s\nsentinel_%s_count %s\n" % (name, v[0], name, v[1])  # pyright: ignore
        elif labels == "-":
            yield "sentinel_%s %s\n" % (name, int(v) if v is True or v is False else v)
        elif "=" in labels:
            label, fixed = labels.split("=")
            i = 0
            for lv in fixed.split(","):
                yield 'sentinel_%s{%s="%s"} %s\n' % (name, label, lv, int(v[i]))  # pyright: ignore
                i += 1
        else:
            for lv in sorted(v):  # pyright: ignore
                yield 'sentinel_%s{%s="%s"} %s\n' % (name, labels, lv, v[lv])  # pyright: ignore
