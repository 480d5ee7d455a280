# The ACK button debouncer: raw sample timelines in tests/vectors/scenarios_button.json.
from sentinel_core.button import TICKS_PERIOD, Button, ticks_diff

VECTORS = "scenarios_button.json"


def run_case(case):
    b = Button(case["debounce_ms"], case["long_ms"])
    got = []
    for t, level in case["samples"]:
        ev = b.sample(level, t)
        if ev is not None:
            got.append([t, ev])
    if got != case["events"]:
        raise AssertionError("%s: want %r, got %r" % (case.get("name"), case["events"], got))


def test_ticks_diff_wraps():
    assert ticks_diff(5, TICKS_PERIOD - 5) == 10
    assert ticks_diff(TICKS_PERIOD - 5, 5) == -10
    assert ticks_diff(1000, 400) == 600


def test_bad_arguments_are_refused():
    for args in ((-1, 3000), (30, 30), (30, 10), ("30", 3000), (True, 3000)):
        try:
            Button(args[0], args[1])
        except ValueError:
            continue
        raise AssertionError("accepted %r" % (args,))


def test_defaults_are_30ms_and_3s():
    b = Button()
    assert (b.debounce_ms, b.long_ms) == (30, 3000)


def test_pressed_reflects_the_debounced_level():
    b = Button(30, 3000)
    b.sample(False, 0)
    b.sample(True, 10)
    assert not b.pressed
    b.sample(True, 40)
    assert b.pressed
