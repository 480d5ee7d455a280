# The firmware frozen into a MicroPython Unix-port build, for bench/bench_firmware.py's frozen-image figures (the
# same modules the ESP32 image freezes, firmware/manifest.py, on a port that runs here). Build with MicroPython's
# own tooling (docs/FIRMWARE.md "Memory"):
#   MICRODOT_DIR=... make -C <micropython>/ports/unix FROZEN_MANIFEST=$PWD/bench/manifest_unix.py ...
# include() is provided by MicroPython's tools/makemanifest.py.
include("$(MPY_DIR)/extmod/asyncio")  # noqa: F821 - the ESP32's boards/manifest.py freezes it too
include("../firmware/manifest.py", port_manifest=False)  # noqa: F821
