# Freezes the terminal into a custom MicroPython image for a plain ESP32 (no PSRAM): frozen bytecode and constants
# run from flash instead of being copied into the ~110 KB heap (bench/bench_firmware.py has the figures).
#
#   cd micropython/ports/esp32
#   MICRODOT_DIR=$(python -c 'import microdot, os; print(os.path.dirname(microdot.__file__))') \
#     make BOARD=ESP32_GENERIC FROZEN_MANIFEST=/path/to/gpu-sentinel/firmware/manifest.py
#   python3 /path/to/gpu-sentinel/firmware/deploy.py --frozen --flash build-ESP32_GENERIC/firmware.bin ...
#
# (build-ESP32_GENERIC/firmware.bin is the merged image written at 0x1000; docs/FIRMWARE.md has the details.)
# include(), package() and module() are provided by MicroPython's tools/makemanifest.py.
import os

# The port's own frozen modules (asyncio, neopixel...). bench/manifest_unix.py includes this file for a Unix-port
# build (the memory bench's frozen figures) with port_manifest=False: that port has no boards/manifest.py.
options.defaults(port_manifest=True)  # noqa: F821
if options.port_manifest:  # noqa: F821
    include("$(PORT_DIR)/boards/manifest.py")  # noqa: F821
package("sentinel_core", base_path="lib")  # noqa: F821
package("sentinel_fw", base_path="lib")  # noqa: F821
# Relative paths are resolved against this file's directory (firmware/).
_md = os.environ.get("MICRODOT_DIR")
if not _md:
    raise SystemExit("set MICRODOT_DIR to the microdot package directory (microdot 2.7.0, see the header)")
package("microdot", files=["__init__.py", "microdot.py"], base_path=os.path.dirname(_md))  # noqa: F821
