# What a running terminal can take without a restart (the emulator's SIGHUP). Its own module, not terminal_config's:
# the board never reloads its settings, and each line in a boot-time module is heap it must find at boot.
from sentinel_core.terminal_config import settings

# The others size its health and its speech queue, which hold live state: they take effect at the next start.
LIVE = ("mute_s", "speech_gap_s", "label_max", "idle_pattern", "quiet")
RESTART_KEYS = ("speech_queue", "max_active", "heartbeat_misses")


class _Scratch:
    pass


def apply_live(terminal, config):
    """Check config as settings() does (ValueError naming the first bad value, with nothing set) and give the running
    terminal its LIVE settings. Returns the quiet hours now in force, as the status shows them."""
    s = _Scratch()
    settings(s, config)
    for name in LIVE:
        setattr(terminal, name, getattr(s, name))
    return terminal.quiet
