# The 8x8 icons of the matrix: one per alarm level and one per health state. 8 column bytes each, bit 0 = the
# top row. The rows after each name below are the source of truth ('#' lit); tests/test_render_props.py checks
# the bytes against them. IDLE is a heartbeat trace that tiles horizontally: the idle pattern scrolls it.
from sentinel_core import alarm
from sentinel_core.display import HEALTH_PATTERNS

# p0 ...##... ...##... ...##... ...##... ...##... ........ ...##... ...##...
P0 = b"\x00\x00\x00\xdf\xdf\x00\x00\x00"

# p1 ...##... ..#..#.. ..#..#.. .#.##.#. .#.##.#. #......# #..##..# ########
P1 = b"\xe0\x98\x86\xd9\xd9\x86\x98\xe0"

# normal ........ .......# ......## #....##. ##..##.. .####... ..##.... ........
NORMAL = b"\x18\x30\x60\x60\x30\x18\x0c\x06"

# idle ........ ..#..... ..#..... .#.#.... #..#..## ...#.#.. ....#... ........
IDLE = b"\x10\x08\x06\x38\x40\x20\x10\x10"

# clock ..####.. .#....#. #..#...# #..#...# #..###.# #......# .#....#. ..####..
CLOCK = b"\x3c\x42\x81\x9d\x91\x91\x42\x3c"

# network ..####.. .#....#. #..##..# ..#..#.. ...##... ........ ...##... ...##...
NETWORK = b"\x04\x02\x09\xd5\xd5\x09\x02\x04"

# speech ...#.... ..##.... ####.#.# ####..#. ####.#.# ..##.... ...#.... ........
SPEECH = b"\x1c\x1c\x3e\x7f\x00\x14\x08\x14"

# heartbeat .##..##. #..##..# #......# #......# .#....#. ..#..#.. ...##... ........
HEARTBEAT = b"\x0e\x11\x21\x42\x42\x21\x11\x0e"

# config ..####.. .##..##. .....##. ....##.. ...##... ...##... ........ ...##...
CONFIG = b"\x00\x02\x03\xb1\xb9\x0f\x06\x00"

# Display.level (an alarm level: sentinel_core.alarm's constants) -> icon.
LEVEL = {alarm.NORMAL: NORMAL, alarm.P1: P1, alarm.P0: P0}
# Display.pattern -> icon for the patterns that are not alarms: idle, and each health pattern by the check it names
# (health_clock CLOCK, ..., config_error CONFIG: display.HEALTH_PATTERNS spells those names, see render.py for why).
_BY_CHECK = {"clock": CLOCK, "network": NETWORK, "speech": SPEECH, "heartbeat": HEARTBEAT, "config": CONFIG}
PATTERN = {pattern: _BY_CHECK[check] for check, pattern, _color, _text in HEALTH_PATTERNS}
PATTERN["idle"] = IDLE
del _BY_CHECK, alarm
