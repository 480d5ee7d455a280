# The terminal's entry point. A crash outside the loop's own error handling resets the board after a pause that
# leaves time to press Ctrl-C at the REPL; the watchdog covers hangs.
import gc
import time

gc.collect()
try:
    from sentinel_fw import app
    app.main()
except KeyboardInterrupt:
    print("[sentinel] stopped at the REPL")
except Exception as e:
    import sys
    print("[sentinel] fatal error, resetting in 10 s:")
    sys.print_exception(e)
    time.sleep(10)
    import machine
    machine.reset()
