# What of the terminal's state survives a reboot (active P0/P1, the mute, acknowledged incidents, the heartbeat
# interval) as a small JSON-able document. The shell writes it to flash only when Terminal.dirty says it changed:
# flash wears, and a reboot loop must not rewrite it on every boot. Reading it back is sentinel_core.restore, which
# only a boot needs (the board drops it once restored).

import io
import json

from sentinel_core.alarm import NORMAL

# 2: each alarm is a row [key, text, level, [r, g, b], light_mode, audio_mode, repeat_times, id, since, expires]
# (ROW names the fields); 1 had an object per alarm with those keys, and is still read. Rows make the file ~40 %
# smaller, and so the text and the parsed document a reboot holds while restoring.
FORMAT = 2
ROW = ("key", "text", "level", "color", "light_mode", "audio_mode", "repeat_times", "id", "since", "expires")


def export_state(term):
    """The state as a dict: what write_state writes, read back (the format is defined once, by write_state)."""
    buf = io.StringIO()
    write_state(term, buf)
    # MicroPython's StringIO has getvalue(); the ESP32 stubs leave it out.
    return json.loads(buf.getvalue())  # pyright: ignore[reportAttributeAccessIssue]


def write_state(term, f, extra=None):
    """The state document, with extra's keys added, written as JSON into the text stream f. The board writes its
    state file this way on every change: one row list is refilled for each alarm, so the document is never built in
    the heap."""
    w = f.write
    w('{"v": %d, "version": %d, "saved_at": ' % (FORMAT, term.state_version))
    json.dump(term.last_now, f)
    w(', "alarms": [')
    col = [0, 0, 0]
    row = [None, None, 0, col, None, None, 0, None, 0, None]
    sep = ""
    for a in term.ordered():
        al = a.alarm
        if al.level == NORMAL:
            continue
        row[0] = al.key
        row[1] = al.text
        row[2] = al.level
        col[0] = al.color[0]
        col[1] = al.color[1]
        col[2] = al.color[2]
        row[4] = al.light_mode
        row[5] = al.audio_mode
        row[6] = al.repeat_times
        row[7] = al.id
        row[8] = a.since
        row[9] = a.expires
        w(sep)
        json.dump(row, f)
        sep = ", "
    w('], "mute_until": ')
    json.dump(term.mute_until, f)
    w(', "acked": ')
    json.dump(term.acked, f)
    w(', "heartbeat": ')
    json.dump(term.health.interval, f)
    if extra:
        for k in extra:
            w(", ")
            json.dump(k, f)
            w(": ")
            json.dump(extra[k], f)
    w("}")
