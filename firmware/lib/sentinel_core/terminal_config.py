# The terminal's settings from a config dict, checked: every bad value is refused with a message naming it. Only
# building a Terminal needs this, so it is its own module: the board drops it from the heap once built.

from sentinel_core.alarm import is_int, is_num
from sentinel_core.health import Health
from sentinel_core.quiet import QuietHours, parse_hhmm
from sentinel_core.speech import SpeechQueue

# The settings a config may give, and their values when it does not.
DEFAULTS = {
    "mute_s": 900,
    "speech_gap_s": 2,
    "speech_queue": 8,
    "max_active": 16,
    "quiet_start": "22:00",
    "quiet_end": "08:00",
    "quiet_enabled": True,
    "utc_offset_min": 0,
    "heartbeat_misses": 2.5,
    "label_max": 32,
    "idle_pattern": "idle",
}


def _int_range(cfg, name, lo, hi):
    v = cfg[name]
    if not is_int(v) or v < lo or v > hi:
        raise ValueError("config %s: expected an int in %d..%d, got %r" % (name, lo, hi, v))
    return v


def settings(terminal, config):
    """Check config (None: the defaults; keys it does not know are ignored) and set the settings of the Terminal
    terminal by name: mute_s, speech_gap_s, max_active, label_max, idle_pattern as in DEFAULTS, quiet (a QuietHours
    from the quiet_* keys and utc_offset_min), health (a Health counting heartbeat_misses) and queue (a SpeechQueue of
    speech_queue entries). ValueError naming the first bad value, with nothing set."""
    cfg = dict(DEFAULTS)
    if config is not None:
        if not isinstance(config, dict):
            raise ValueError("config must be a dict")
        for k in DEFAULTS:
            if k in config:
                cfg[k] = config[k]
    mute_s = _int_range(cfg, "mute_s", 1, 86400)
    gap = cfg["speech_gap_s"]
    if not is_num(gap) or gap < 0 or gap > 600:
        raise ValueError("config speech_gap_s: expected seconds in 0..600, got %r" % (gap,))
    queue_cap = _int_range(cfg, "speech_queue", 1, 64)
    max_active = _int_range(cfg, "max_active", 1, 64)
    label_max = _int_range(cfg, "label_max", 4, 128)
    misses = cfg["heartbeat_misses"]
    if not is_num(misses) or misses < 1 or misses > 10:
        raise ValueError("config heartbeat_misses: expected a number in 1..10, got %r" % (misses,))
    if cfg["idle_pattern"] not in ("idle", "off"):
        raise ValueError('config idle_pattern: expected "idle" or "off", got %r' % (cfg["idle_pattern"],))
    idle = cfg["idle_pattern"]
    for name in ("quiet_start", "quiet_end"):
        try:
            parse_hhmm(cfg[name])
        except ValueError as e:
            raise ValueError("config %s: %s" % (name, e))
    _int_range(cfg, "utc_offset_min", -720, 840)
    if not isinstance(cfg["quiet_enabled"], bool):
        raise ValueError("config quiet_enabled: expected true or false, got %r" % (cfg["quiet_enabled"],))
    quiet = QuietHours(cfg["quiet_start"], cfg["quiet_end"], cfg["utc_offset_min"], cfg["quiet_enabled"])
    terminal.mute_s = mute_s
    terminal.speech_gap_s = gap
    terminal.max_active = max_active
    terminal.label_max = label_max
    terminal.idle_pattern = idle
    terminal.quiet = quiet
    terminal.health = Health(misses)
    terminal.queue = SpeechQueue(queue_cap)
