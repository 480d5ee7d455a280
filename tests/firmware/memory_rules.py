# The heap rules of the main loop, on both interpreters.
from sentinel_fw import app


def test_gc_threshold_is_a_quarter_of_what_is_free_and_never_above_it():
    # gc.threshold() counts bytes allocated since the last collection: it must fire before what is free runs out.
    for free in (4096, 4900, 20000, 50000, 110 * 1024, 4 * 1024 * 1024):
        n = app.gc_every(free)
        assert 4096 <= n <= 65536 and n <= free, (free, n)
    assert app.gc_every(50000) == 12500
    assert app.gc_every(4 * 1024 * 1024) == 65536  # a PSRAM board: pauses bounded
    assert app.gc_every(1000) == 4096  # below that the collector runs when an allocation fails anyway
