# What of the terminal's state survives a reboot (active P0/P1, the mute, acknowledged incidents, the heartbeat
# interval) as a small JSON-able document, and the strict reading of it back. The shell writes it to flash only when
# Terminal.dirty says it changed: flash wears, and a reboot loop must not rewrite it on every boot.

import io
import json

from sentinel_core.alarm import NORMAL, Alarm
from sentinel_core.terminal import Active, check_alarm, incident_key

# 2: each alarm is a row [key, text, level, [r, g, b], light_mode, audio_mode, repeat_times, id, since, expires]
# (ROW names the fields); 1 had an object per alarm with those keys, and is still read. Rows make the file ~40 %
# smaller, and so the text and the parsed document a reboot holds while restoring.
FORMAT = 2
ROW = ("key", "text", "level", "color", "light_mode", "audio_mode", "repeat_times", "id", "since", "expires")


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v):
    return (isinstance(v, int) or isinstance(v, float)) and not isinstance(v, bool)


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
    json.dump(term._last_now, f)
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


def _alarm(x, v):
    if v == 1:
        if not isinstance(x, dict):
            raise ValueError("not an object")
        # Missing fields become values check_alarm refuses, so a damaged file is reported, never half-restored.
        x = [x.get("key"), x.get("text"), x.get("level"), x.get("color"), x.get("light_mode", ""),
             x.get("audio_mode", ""), x.get("repeat_times", 0), x.get("id"), x.get("since"), x.get("expires")]
    elif not isinstance(x, list) or len(x) != len(ROW):
        raise ValueError("not a row of %d fields" % len(ROW))
    col = x[3]
    if not isinstance(col, list) or len(col) != 3:
        raise ValueError("color must be [r, g, b]")
    al = Alarm(x[1], (col[0], col[1], col[2]), x[4], x[5], x[6], x[2], x[0], x[7], None)
    check_alarm(al)
    if al.level == NORMAL:
        raise ValueError("NORMAL alarms are not kept")
    since = x[8]
    expires = x[9]
    if not _is_num(since) or (expires is not None and not _is_num(expires)):
        raise ValueError("since/expires must be numbers")
    if expires is not None:
        al.duration = expires - since
    return al, since, expires


def parse_state(term, d, now):
    """Check a saved document completely before anything changes. Returns (actives, mute_until, acked, heartbeat
    interval, version) with every deadline moved onto the terminal's current time base."""
    if not isinstance(d, dict):
        raise ValueError("state must be a dict")
    v = d.get("v")
    if v != FORMAT and v != 1:
        raise ValueError("state format %r is not %d (nor 1)" % (v, FORMAT))
    saved_at = d.get("saved_at")
    if saved_at is not None and not _is_num(saved_at):
        raise ValueError("state saved_at must be a number or null")
    # Deadlines are absolute when both clocks can be trusted; otherwise keep the time that remained at the save.
    if saved_at is None or (term.health.clock and now >= saved_at):
        delta = 0
    else:
        delta = now - saved_at
    alarms = d.get("alarms", [])
    if not isinstance(alarms, list) or len(alarms) > term.max_active:
        raise ValueError("state alarms must be a list of at most %d" % term.max_active)
    restored = []
    for i in range(len(alarms)):
        try:
            al, since, expires = _alarm(alarms[i], v)
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError("state alarm %d: %s" % (i, e))
        restored.append(Active(incident_key(al), al, since + delta, None if expires is None else expires + delta, 0))
    mute_until = d.get("mute_until")
    if mute_until is not None and not _is_num(mute_until):
        raise ValueError("state mute_until must be a number or null")
    acked = d.get("acked", {})
    if not isinstance(acked, dict):
        raise ValueError("state acked must be an object")
    out = {}
    for k in acked:
        if not isinstance(k, str) or not _is_num(acked[k]):
            raise ValueError("state acked must map keys to deadlines")
        out[k] = acked[k] + delta
    hb = d.get("heartbeat")
    if hb is not None and (not _is_int(hb) or hb <= 0):
        raise ValueError("state heartbeat must be a positive int or null")
    version = d.get("version", 0)
    if not _is_int(version):
        raise ValueError("state version must be an int")
    return restored, None if mute_until is None else mute_until + delta, out, hb, version
