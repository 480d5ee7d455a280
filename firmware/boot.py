# Runs first at every reset. Kept tiny: anything that fails here happens before the REPL is usable.
import gc

try:
    import esp

    esp.osdebug(None)  # keep the ESP-IDF's log lines off the console the operator reads
except ImportError:
    pass
gc.collect()
