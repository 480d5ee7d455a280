# Quiet hours: local time from a UTC offset, windows that cross midnight and windows that do not.
from sentinel_core.quiet import QuietHours, format_hhmm, local_minute, parse_hhmm

# 2025-11-30 00:00:00 UTC
MIDNIGHT = 1764460800


def _refused(fn, *args):
    try:
        fn(*args)
    except ValueError:
        return True
    return False


def test_parse_and_format():
    assert parse_hhmm("00:00") == 0
    assert parse_hhmm("22:00") == 1320
    assert parse_hhmm("23:59") == 1439
    assert format_hhmm(480) == "08:00"
    for bad in ("24:00", "7:00", "07:60", "0700", "07-00", "", None, 700, "ab:cd", " 7:00"):
        assert _refused(parse_hhmm, bad), bad


def test_local_minute_with_offsets():
    assert local_minute(MIDNIGHT, 0) == 0
    assert local_minute(MIDNIGHT, 480) == 480
    assert local_minute(MIDNIGHT, -300) == 1440 - 300
    assert local_minute(MIDNIGHT + 59, 0) == 0
    assert local_minute(MIDNIGHT + 60.9, 0) == 1
    assert local_minute(MIDNIGHT + 86399, 330) == (1439 + 330) % 1440


def test_window_across_midnight():
    q = QuietHours("22:00", "08:00", 0)
    inside = (22 * 60, 23 * 60 + 59, 0, 3 * 60, 7 * 60 + 59)
    outside = (8 * 60, 12 * 60, 21 * 60 + 59)
    for m in inside:
        assert q.contains(m), m
    for m in outside:
        assert not q.contains(m), m


def test_window_within_a_day():
    q = QuietHours("12:00", "14:00", 0)
    assert q.contains(720) and q.contains(839)
    assert not q.contains(840) and not q.contains(719) and not q.contains(0)


def test_empty_window_and_disabled():
    assert not QuietHours("08:00", "08:00").contains(480)
    q = QuietHours(enabled=False)
    assert not q.active(MIDNIGHT)
    assert QuietHours().active(MIDNIGHT)


def test_active_uses_the_offset():
    # 15:30 UTC is 23:30 in UTC+8 (quiet) and 10:30 in UTC-5 (not quiet).
    t = MIDNIGHT + 15 * 3600 + 1800
    assert QuietHours(utc_offset_min=480).active(t)
    assert not QuietHours(utc_offset_min=-300).active(t)
    assert QuietHours(utc_offset_min=480).local_time(t) == "23:30"


def test_bad_offsets_are_refused():
    for off in (-721, 841, "480", 1.5, True):
        assert _refused(QuietHours, "22:00", "08:00", off), off


def test_live_settings_reach_a_running_terminal_and_a_bad_one_changes_nothing():
    # the emulator's SIGHUP: quiet hours and the mute change on the running terminal, its queue and health stay
    from sentinel_core.live_settings import apply_live
    from sentinel_core.terminal import Terminal

    t = Terminal({"quiet_start": "22:00", "quiet_end": "08:00", "utc_offset_min": 0})
    queue, health = t.queue, t.health
    assert t.quiet.active(MIDNIGHT)
    q = apply_live(t, {"quiet_enabled": False, "mute_s": 60, "speech_queue": 2})
    assert q is t.quiet and not t.quiet.enabled and not t.quiet.active(MIDNIGHT)
    assert t.mute_s == 60 and t.queue is queue and t.health is health
    assert _refused(apply_live, t, {"quiet_start": "25:00", "mute_s": 5})
    assert not t.quiet.enabled and t.mute_s == 60
