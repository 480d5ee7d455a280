"""/metrics of the emulator: the core's writer (sentinel_core.metrics, the box's too) over the engine's shell glue,
with the figures only the emulator measures."""

from sentinel_core import metrics

# The emulator's own families, in sentinel_core.metrics.FAMILIES' form.
FAMILIES = """
frame_overruns_total counter - Times the engine fell more than a frame behind.
request_handle_seconds summary - Time from a request reaching the engine to its answer.
engine_up gauge - 1 while the engine thread runs.
"""


def _page(engine, now):
    m = engine.metrics
    with m.lock:
        shell = {"state_writes_total": m.state_writes, "uptime_seconds": engine.uptime_s(),
                 "frame_overruns_total": m.frame_overruns,
                 "request_handle_seconds": (float(m.handle_seconds_sum), m.handle_count),
                 "engine_up": engine.alive and engine.error is None}
    return "".join(metrics.lines(engine.glue, now, shell, FAMILIES))


def render_metrics(engine):
    """The page. Written in the engine thread (the glue and its terminal are that thread's), or directly once the
    engine has stopped."""
    if engine.alive and engine.error is None:
        try:
            return engine.call(lambda terminal, now: _page(engine, now))
        except TimeoutError:
            pass
    return _page(engine, engine.clock())
