# Why an active alarm is not being spoken, from the terminal's own rules (Terminal.hold) and record of speech cut
# short (Terminal.hushed): the emulator's panel and page say it in words. The board has no panel and never loads it.

from sentinel_core.alarm import NORMAL
from sentinel_core.terminal import ACKED

NO_SPEECH = 6  # sent with audio_mode "none"
SPOKEN = 7  # every repetition was said


def reason(terminal, key, now):
    """None while the incident's alarm speaks or will (queued), when it is not active, or for a NORMAL that said
    its piece; else ACKED, NO_SPEECH, MUTED, QUIET (Terminal.hold), CUT_BY_ACK, HELD (Terminal.hushed) or SPOKEN."""
    a = terminal.active.get(key)
    if a is None:
        return None
    u = terminal.speaking
    if (u is not None and u.key == key) or terminal.queue.find(key) is not None:
        return None
    level = a.alarm.level
    held = terminal.hold(level, key, now)
    if held == ACKED:
        return held
    if a.alarm.audio_mode == "none":
        return NO_SPEECH
    if held is not None:
        return held
    if level == NORMAL:
        return None
    return terminal.hushed.get(key, SPOKEN)
