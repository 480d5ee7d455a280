# GPU Sentinel shared core: pure Python in the subset CPython >= 3.10 and MicroPython >= 1.23 share.
# Kept empty on purpose: importing the package must not pull every module into the ESP32's heap.
PROTOCOL_VERSION = 1
# The one version of the distribution (pyproject.toml reads it) and of the board's firmware.
VERSION = "0.1.0"
