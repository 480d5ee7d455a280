# Why an active alarm is not being spoken: the terminal's own rule (Terminal.permitted) says whether, its state says
# which hold applies. The emulator's panel and page say it in words. The board has no panel and never loads this
# module. (The terminal keeps no record of how an incident's speech ended: on the board that record's code and state
# cost the small-heap storm its recovery, so an alarm whose speech is over is OVER, spoken in full or cut short.)

from sentinel_core.alarm import NORMAL, P0

ACKED = 3  # an ACK of this incident holds it
MUTED = 4  # the ACK mute holds everything below P0
QUIET = 5  # quiet hours hold everything below P0
NO_SPEECH = 6  # sent with audio_mode "none"
OVER = 7  # its speech is over: every repetition said, or cut short by an ACK or a hold that has since ended


def reason(terminal, key, now):
    """None while the incident's alarm speaks or will (queued), when it is not active, or for a NORMAL that said
    its piece; else ACKED, NO_SPEECH, MUTED, QUIET or OVER."""
    a = terminal.active.get(key)
    if a is None:
        return None
    u = terminal.speaking
    if (u is not None and u.key == key) or terminal.queue.find(key) is not None:
        return None
    level = a.alarm.level
    held = None
    if not terminal.permitted(level, key, now):
        # which of permitted()'s holds, in its order
        until = terminal.acked.get(key)
        if until is not None and until > now:
            held = ACKED
        elif level < P0 and terminal.mute_until is not None and now < terminal.mute_until:
            held = MUTED
        else:
            held = QUIET
    if held == ACKED:
        return held
    if a.alarm.audio_mode == "none":
        return NO_SPEECH
    if held is not None:
        return held
    if level == NORMAL:
        return None
    return OVER
