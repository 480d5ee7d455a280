# Reading a saved state (sentinel_core.persist's document) back: checked completely into a Saved, which
# Terminal.restore then applies (the terminal alone writes its own fields). Only a boot needs it, so it is its own
# module: the board drops it once the state is restored.

from sentinel_core.alarm import NORMAL, Active, Alarm, check_alarm, check_now, is_int, is_num

# What persist writes (its FORMAT, rows of len(persist.ROW) fields; a test holds them equal): not imported from it,
# so that restoring does not load the writer. Format 1, an object per alarm, is read too.
FORMAT = 2
ROW_LEN = 10


class Saved:
    """A saved state, checked, by name: format (the document's "v": FORMAT, or 1), version (the state_version it was
    saved at), alarms (an Active per P0/P1 in the order to add them, the last in display order first, their order
    numbered from 1), mute_until, acked ({incident key: until}) and heartbeat (the armed interval in seconds, or
    None); every deadline moved onto the terminal's current time base."""

    format: int
    version: int
    alarms: list
    mute_until: "int | float | None"
    acked: dict
    heartbeat: "int | None"


def _alarm(x, v):
    if v == 1:
        if not isinstance(x, dict):
            raise ValueError("not an object")
        # Missing fields become values check_alarm refuses, so a damaged file is reported, never half-restored.
        x = [
            x.get("key"),
            x.get("text"),
            x.get("level"),
            x.get("color"),
            x.get("light_mode", ""),
            x.get("audio_mode", ""),
            x.get("repeat_times", 0),
            x.get("id"),
            x.get("since"),
            x.get("expires"),
        ]
    elif not isinstance(x, list) or len(x) != ROW_LEN:
        raise ValueError("not a row of %d fields" % ROW_LEN)
    col = x[3]
    if not isinstance(col, list) or len(col) != 3:
        raise ValueError("color must be [r, g, b]")
    al = Alarm(x[1], (col[0], col[1], col[2]), x[4], x[5], x[6], x[2], x[0], x[7], None)
    check_alarm(al)
    if al.level == NORMAL:
        raise ValueError("NORMAL alarms are not kept")
    since = x[8]
    expires = x[9]
    if not is_num(since) or (expires is not None and not is_num(expires)):
        raise ValueError("since/expires must be numbers")
    if expires is not None:
        al.duration = expires - since
    return al, since, expires


def parse_state(term, d, now):
    """The Saved of the document d for the Terminal term (its clock health and max_active) at now; ValueError naming
    what is wrong (an unknown format, a bad field) before anything changes."""
    check_now(now)
    if not isinstance(d, dict):
        raise ValueError("state must be a dict")
    v = d.get("v")
    if v != FORMAT and v != 1:
        raise ValueError("state format %r is not %d (nor 1)" % (v, FORMAT))
    saved_at = d.get("saved_at")
    if saved_at is not None and not is_num(saved_at):
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
        restored.append(Active(al, since + delta, None if expires is None else expires + delta, 0))
    mute_until = d.get("mute_until")
    if mute_until is not None and not is_num(mute_until):
        raise ValueError("state mute_until must be a number or null")
    acked = d.get("acked", {})
    if not isinstance(acked, dict):
        raise ValueError("state acked must be an object")
    out = {}
    for k in acked:
        if not isinstance(k, str) or not is_num(acked[k]):
            raise ValueError("state acked must map keys to deadlines")
        out[k] = acked[k] + delta
    hb = d.get("heartbeat")
    if hb is not None and (not is_int(hb) or hb <= 0):
        raise ValueError("state heartbeat must be a positive int or null")
    version = d.get("version", 0)
    if not is_int(version):
        raise ValueError("state version must be an int")
    restored.reverse()
    for i in range(len(restored)):
        restored[i].order = i + 1
    s = Saved()
    s.format = v
    s.version = version
    s.alarms = restored
    s.mute_until = None if mute_until is None else mute_until + delta
    s.acked = out
    s.heartbeat = hb
    return s
