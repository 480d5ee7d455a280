"""/metrics of the emulator: the core's writer (sentinel_core.metrics, the box's too) over the engine's shell glue,
with the figures only the emulator measures (their three families written by the core's family() too)."""

from sentinel_core import metrics


def _page(engine, now):
    m = engine.metrics
    with m.lock:
        shell = {"state_writes_total": m.state_writes, "uptime_seconds": engine.uptime_s()}
        overruns = m.frame_overruns
        handled = (float(m.handle_seconds_sum), m.handle_count)
    f = metrics.family
    own = (
        f(
            "# HELP sentinel_frame_overruns_total Times the engine fell more than a frame behind.\n"
            "# TYPE sentinel_frame_overruns_total counter\n",
            "sentinel_frame_overruns_total %s\n",
            overruns,
        ),
        f(
            "# HELP sentinel_request_handle_seconds Time from a request reaching the engine to its answer.\n"
            "# TYPE sentinel_request_handle_seconds summary\n",
            "sentinel_request_handle_seconds_sum %s\nsentinel_request_handle_seconds_count %s\n",
            handled,
        ),
        f(
            "# HELP sentinel_engine_up 1 while the engine thread runs.\n# TYPE sentinel_engine_up gauge\n",
            "sentinel_engine_up %s\n",
            engine.alive and engine.error is None,
        ),
    )
    return "".join(metrics.parts(engine.glue, now, shell)) + "".join("".join(x) for x in own)


def render_metrics(engine):
    """The page. Written in the engine thread (the glue and its terminal are that thread's), or directly once the
    engine has stopped."""
    if engine.alive and engine.error is None:
        try:
            return engine.call(lambda terminal, now: _page(engine, now))
        except TimeoutError:
            pass
    return _page(engine, engine.clock())
