# Startup: from the config file to a running terminal, or to the config-error screen when the file cannot be used.
# Only the boot needs this module (and config, pins): a .mpy's bytecode sits in the heap, so all three are dropped
# from memory once the terminal is built.
import gc

from sentinel_fw import forget, log
from sentinel_fw.app import Sentinel


def build(config_path="/config.json", state_path="/state.json"):
    """Load the config and build the terminal from the real modules: a Sentinel, or a
    config_error.ConfigErrorTerminal."""
    cfg = load_config(config_path)
    if not isinstance(cfg, dict):
        return cfg
    # The file is read and checked: the config module and pins (which it imports) go before the terminal's modules
    # load, so their bytecode and the checking's garbage are not in the heap at boot's peak, building the terminal.
    _drop(("config", "pins"))
    return make_terminal(cfg, state_path)


def load_config(config_path):
    """The checked config (a dict), or the ConfigErrorTerminal that shows why it cannot be used."""
    from sentinel_fw import config

    try:
        return config.load(config_path)
    except config.ConfigError as e:
        # Loaded only on this path: a board with a good config never holds it, not even during boot.
        from sentinel_fw.config_error import ConfigErrorTerminal

        return ConfigErrorTerminal(str(e))


def make_terminal(cfg, state_path):
    """The Sentinel for a checked config, its state restored from state_path."""
    for w in cfg["warnings"]:
        log(w)
    import network
    import ntptime

    from sentinel_fw.clock import Clock
    from sentinel_fw.store import Store

    clock = Clock(ntptime, cfg["time"]["ntp_host"], cfg["time"]["resync_s"])
    return Sentinel(cfg, clock, Store(state_path), network.WLAN(network.STA_IF))


# Modules only the boot needs: their bytecode sits in the heap (a .mpy is loaded into RAM), so they are dropped
# once the terminal is built. Anything still calling into them keeps them alive; nothing does after boot() returns.
BOOT_ONLY = ("config", "pins", "startup")


def _drop(names):
    for name in names:
        forget("sentinel_fw", name)
    gc.collect()


def drop_boot_modules():
    _drop(BOOT_ONLY)


def boot(config_path="/config.json", state_path="/state.json"):
    """Build the terminal and return it, with the boot-only modules dropped (this one too: the caller lets go of
    it, then runs app.main(terminal)). A config that cannot be used shows config_error forever instead."""
    terminal = build(config_path, state_path)
    if not isinstance(terminal, Sentinel):
        terminal.run_forever()
    drop_boot_modules()
    return terminal
