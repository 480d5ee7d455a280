# The terminal's entry point. A crash outside the loop's own error handling resets the board after a pause that
# leaves time to press Ctrl-C at the REPL; the watchdog covers hangs.
# /safe_mode (written by deploy.py before it copies files) keeps the app, and so the watchdog, from starting: a
# running watchdog would reset the board in the middle of a copy once mpremote has stopped the main loop.
import gc
import os
import time

gc.collect()
if "safe_mode" in os.listdir("/"):
    print("[sentinel] safe mode (/safe_mode exists): not starting; remove it and reset to run")
else:
    try:
        from sentinel_fw import startup

        terminal = startup.boot()
        # The boot-only modules are out of sys.modules now; this was the last reference to their code.
        del startup
        from sentinel_fw import app

        app.main(terminal)
    except KeyboardInterrupt:
        print("[sentinel] stopped at the REPL")
    except Exception as e:  # noqa: BLE001 - whatever stops the app is printed, then the board resets
        import sys

        print("[sentinel] fatal error, resetting in 10 s:")
        sys.print_exception(e)
        time.sleep(10)
        import machine

        machine.reset()
