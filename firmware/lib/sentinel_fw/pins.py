# Default GPIO assignment per board. hardware/PINOUT.md documents the same numbers (a test compares them).
# ESP32 (WROOM-32): GPIO 6-11 drive the SPI flash; 0, 2, 5, 12, 15 are strapping pins; 1/3 are the USB serial
# console; 34-39 are input-only without pull-ups. ESP32-S3: 26-32 flash (33-37 octal PSRAM), 19/20 USB,
# 43/44 console, 0, 3, 45, 46 strapping.

DEFAULTS = {
    "esp32": {"pixels": 13, "tts_tx": 25, "tts_rx": 26, "tts_busy": 27, "button": 32, "button_led": 33},
    "esp32s3": {"pixels": 4, "tts_tx": 17, "tts_rx": 18, "tts_busy": 5, "button": 6, "button_led": 7},
}
# UART used for the TTS chip: UART0 is the REPL console on both boards.
TTS_UART = {"esp32": 2, "esp32s3": 1}

# Pins that must never be used: taking them bricks the flash or the console.
FORBIDDEN = {
    "esp32": (1, 3, 6, 7, 8, 9, 10, 11),
    "esp32s3": (19, 20, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 43, 44),
}
# Pins that decide the boot mode when sampled at reset: usable, but a wired load can stop the board booting.
STRAPPING = {"esp32": (0, 2, 5, 12, 15), "esp32s3": (0, 3, 45, 46)}
INPUT_ONLY = {"esp32": (34, 35, 36, 37, 38, 39), "esp32s3": ()}
MAX_GPIO = {"esp32": 39, "esp32s3": 48}
OUTPUTS = ("pixels", "tts_tx", "button_led")
NAMES = ("pixels", "tts_tx", "tts_rx", "tts_busy", "button", "button_led")
# Pins that may be left out (null): the terminal works without a BUSY line or a lit button.
OPTIONAL = ("tts_busy", "button_led")


def check(board, pins):
    """Problems with a pin map as a list of strings (empty: fine). Warnings are prefixed "warning:"."""
    out = []
    seen = {}
    for name in NAMES:
        n = pins.get(name)
        if n is None:
            if name not in OPTIONAL:
                out.append("pins.%s: required" % name)
            continue
        if not isinstance(n, int) or isinstance(n, bool) or n < 0 or n > MAX_GPIO[board]:
            out.append("pins.%s: %r is not a GPIO number of the %s" % (name, n, board))
            continue
        if n in FORBIDDEN[board]:
            out.append("pins.%s: GPIO%d is used by the flash, PSRAM, USB or console on the %s" % (name, n, board))
        if name in OUTPUTS and n in INPUT_ONLY[board]:
            out.append("pins.%s: GPIO%d is input-only on the %s" % (name, n, board))
        if name == "button" and n in INPUT_ONLY[board]:
            out.append("warning: pins.button: GPIO%d has no internal pull-up: fit a 10k pull-up to 3V3" % n)
        if n in STRAPPING[board]:
            out.append("warning: pins.%s: GPIO%d is a strapping pin: the board may not boot with it loaded" % (name, n))
        if n in seen:
            out.append("pins.%s: GPIO%d is already pins.%s" % (name, n, seen[n]))
        seen[n] = name
    return out
