# The board, on the MicroPython Unix port: runs the firmware's own boot.py and main.py (startup, the asyncio tasks,
# the microdot server) over real sockets, with the project's fakes of machine, neopixel, network and ntptime.
# Started by tests/unixport.py as `micropython [-X heapsize=N] board.py ROOT`; ROOT is a directory laid out like
# the board's flash (/boot.py, /main.py, /config.json, /lib/...) and is mounted as this process's "/".
#
# Exit codes: 0 main.py returned, 3 the firmware called machine.reset() (the harness may boot it again: the state
# file on ROOT survives, as on flash), 4 the harness's own setup failed.
import sys

import vfs

ROOT = sys.argv[1]
# The fakes and this runner's shims come from ROOT/_harness (copied there by tests/unixport.py): once ROOT is "/",
# the host's other directories are out of reach, as on a board.
vfs.mount(vfs.VfsPosix(ROOT), "/")
import os  # noqa: E402

os.chdir("/")
sys.path[:] = ["", ".frozen", "/lib", "/_harness"]
try:
    os.stat("/lib/sentinel_fw")
    # The .mpy install on flash: it runs even on a build that has the firmware frozen in (the memory bench compares
    # both installs on one binary), as it would after deploy.py without --frozen.
    sys.path[:] = ["", "/lib", ".frozen", "/_harness"]
except OSError:
    pass

# machine, network and neopixel are built into the Unix port (and shadow files of the same name), so the fakes are
# installed in sys.modules under the board's names before anything imports them.
import fake_machine  # noqa: E402
import fake_neopixel  # noqa: E402
import fake_network  # noqa: E402
import fake_ntptime  # noqa: E402

sys.modules["machine"] = fake_machine
sys.modules["neopixel"] = fake_neopixel
sys.modules["network"] = fake_network
sys.modules["ntptime"] = fake_ntptime

# The Unix port's os.rename fails when both paths are absolute under a VFS mounted at "/" (ENOENT, a quirk of this
# port's path lookup; the board's FAT/littlefs VFS has no such problem): the state store renames /state.json.tmp to
# /state.json, so os is a thin shim that makes the target relative to "/" (the current directory).
import board_os  # noqa: E402

sys.modules["os"] = board_os

import harness  # noqa: E402 - loopback bind, fault injection, the console marker the harness waits for

harness.install()
try:
    import boot  # noqa: F401 - the board's boot.py, then its main.py, as the ESP32 runs them
    import main  # noqa: F401
except SystemExit as e:
    harness.report("exit %r" % (e.args,))
    sys.exit(3 if e.args and e.args[0] == "machine.reset()" else 1)
