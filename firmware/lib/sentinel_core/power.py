# The LED current estimate and the budget it must stay under, the way WLED's automatic brightness limiter
# (wled00/bus_manager.cpp) counts it: a WS2812 channel at 255 draws ma_per_led / 3, so a frame draws
#     sum over every byte of the frame  x  ma_per_led / 765   mA.
# Not counted (as in WLED): the ~1 mA each LED draws when dark and the controller's own draw. Subtract both from
# the supply's rating to get the budget (hardware/POWER.md: a 16x16 box on a 5 V 4 A supply runs with
# light.budget_ma = 2000, leaving room for the 256 mA the dark LEDs draw, the ESP32, the TTS amplifier and margin).

from sentinel_core.compat import const

# WLED's default: 55 mA per LED at full white (the datasheet's 60 mA is rarely reached).
MA_PER_LED = const(55)
# WLED's default budget of 850 mA less the 120 mA it reserves for the ESP32.
BUDGET_MA = const(730)


def units_max(budget_ma, ma_per_led):
    """The largest byte sum a frame may have: units * ma_per_led / 765 <= budget_ma, exactly, in integers."""
    return budget_ma * 765 // ma_per_led


def estimate_ma(frame, ma_per_led=MA_PER_LED):
    """WLED's estimate for a frame (any bytes-like of channel bytes), in mA, rounded up."""
    return (sum(frame) * ma_per_led + 764) // 765


def within(frame, budget_ma, ma_per_led=MA_PER_LED):
    """True when the frame's exact (unrounded) estimate does not exceed budget_ma."""
    return sum(frame) * ma_per_led <= budget_ma * 765
