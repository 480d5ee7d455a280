# Device shells of the GPU Sentinel terminal: thin wrappers that move bytes between the shared core
# (sentinel_core) and the ESP32's hardware. Holds no shell, so importing one shell does not load them all.

# The board's console log and its one module-dropping helper live here, in the package every board module already
# holds, so app, build, server, startup and config_error import them without importing one another in a circle.
# (No other global: each is an entry of this package's dict, on the board's heap for good.)
quiet = False  # tests silence the console


def log(msg):
    if not quiet:
        print("[sentinel] " + msg)


def forget(package, name):
    """Drop the boot-only module package.name: once neither sys.modules nor its package refers to it, its bytecode
    leaves the heap. The board's one module-dropping helper (app, startup and build use it)."""
    import sys

    sys.modules.pop(package + "." + name, None)
    pkg = sys.modules.get(package)
    if pkg is not None and hasattr(pkg, name):
        delattr(pkg, name)
