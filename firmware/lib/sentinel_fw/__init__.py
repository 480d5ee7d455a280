# Device shells of the GPU Sentinel terminal: thin wrappers that move bytes between the shared core
# (sentinel_core) and the ESP32's hardware. Kept empty so importing one shell does not load them all.
