"""The gateway's /metrics writer: Prometheus text exposition 0.0.4 of a Gateway's counters, lanes and HTTP front."""

from __future__ import annotations

from host_client.exposition import Page

from .acks import write_metrics as write_acks
from .front_status import FrontStatus
from .stats import LATENCY_BUCKETS


def metrics_text(gw, front: FrontStatus | None = None) -> str:
    """The gateway's /metrics page (Prometheus text format 0.0.4) from its counters and lanes, and front: the status
    of the HTTP front that serves it (server.py's IngestFront.status, handed over by application.py)."""
    page = Page()
    fam, lab, lines = page.family, page.labels, page.lines

    with gw.lock:
        events = dict(gw.events_in)
        rejected = dict(gw.rejected)
        suppressed = dict(gw.suppressed)
        dkeys = len(gw.debouncer)
        dev = gw.debouncer.evicted
        unrouted = gw.unrouted
        stale = dict(gw.stale)
        not_durable = gw.not_durable
    fam("sentinel_gateway_events_total", "counter", "Events received, by source and type.")
    for (s, t), n in sorted(events.items()):
        lines.append("sentinel_gateway_events_total%s %d" % (lab(source=s, type=t), n))
    fam("sentinel_gateway_events_rejected_total", "counter", "Events refused with a 4xx, by reason.")
    for (s, c), n in sorted(rejected.items()):
        lines.append("sentinel_gateway_events_rejected_total%s %d" % (lab(source=s, code=c), n))
    fam("sentinel_gateway_debounce_suppressed_total", "counter", "Events suppressed by the debounce window.")
    for (s, t), n in sorted(suppressed.items()):
        lines.append("sentinel_gateway_debounce_suppressed_total%s %d" % (lab(source=s, type=t), n))
    fam("sentinel_gateway_debounce_keys", "gauge", "Keys in debounce memory.")
    lines.append("sentinel_gateway_debounce_keys %d" % dkeys)
    fam("sentinel_gateway_debounce_evicted_total", "counter", "Keys evicted before their window ended (cap).")
    lines.append("sentinel_gateway_debounce_evicted_total %d" % dev)
    fam("sentinel_gateway_unrouted_total", "counter", "Incidents no route or default took.")
    lines.append("sentinel_gateway_unrouted_total %d" % unrouted)
    fam(
        "sentinel_gateway_stale_firing_total",
        "counter",
        "Firings dropped because their incident (fingerprint "
        "and startsAt) was resolved within the resolved memory: an HA peer's late copy.",
    )
    for s_, n in sorted(stale.items()):
        lines.append("sentinel_gateway_stale_firing_total%s %d" % (lab(source=s_), n))
    fam(
        "sentinel_gateway_not_durable_total",
        "counter",
        "Events answered 503 because the pending queue could not be saved (the sender retries).",
    )
    lines.append("sentinel_gateway_not_durable_total %d" % not_durable)
    fam("sentinel_gateway_persist_failures_total", "counter", "Failed saves of a terminal's pending queue.")
    for name, p in gw.persisters.items():
        lines.append("sentinel_gateway_persist_failures_total%s %d" % (lab(terminal=name), p.failed))
    fam("sentinel_gateway_persist_ok", "gauge", "1 if the last save of the terminal's pending queue succeeded.")
    for name, p in gw.persisters.items():
        lines.append("sentinel_gateway_persist_ok%s %d" % (lab(terminal=name), 0 if p.broken else 1))

    per = {}
    for name, lane in gw.lanes.items():
        with lane.cond:
            per[name] = (lane.stats.copy(), len(lane.items), lane.up)
    fam("sentinel_gateway_alarms_total", "counter", "Alarms by terminal and outcome.")
    for name, (st, _d, _up) in per.items():
        for outcome, n in st.alarms.items():
            lines.append("sentinel_gateway_alarms_total%s %d" % (lab(terminal=name, outcome=outcome), n))
    fam(
        "sentinel_gateway_incidents_total",
        "counter",
        "Incidents by terminal and fate (alone, folded into a "
        "summary, attached to the alarm already standing for that node's fault, delivered, expired, dropped, "
        "refused, dead-lettered, stale: a firing after its resolve).",
    )
    for name, (st, _d, _up) in per.items():
        for fate, n in st.incidents.items():
            lines.append("sentinel_gateway_incidents_total%s %d" % (lab(terminal=name, fate=fate), n))
    fam("sentinel_gateway_heartbeats_total", "counter", "Heartbeats sent, by terminal and outcome.")
    for name, (st, _d, _up) in per.items():
        lines.append("sentinel_gateway_heartbeats_total%s %d" % (lab(terminal=name, outcome="ok"), st.heartbeats_ok))
        lines.append(
            "sentinel_gateway_heartbeats_total%s %d" % (lab(terminal=name, outcome="failed"), st.heartbeats_failed)
        )
    fam("sentinel_gateway_queue_depth", "gauge", "Alarms waiting per terminal.")
    for name, (_st, depth, _up) in per.items():
        lines.append("sentinel_gateway_queue_depth%s %d" % (lab(terminal=name), depth))
    fam("sentinel_gateway_terminal_up", "gauge", "1 if the last request to the terminal got an answer.")
    for name, (_st, _d, up) in per.items():
        lines.append("sentinel_gateway_terminal_up%s %d" % (lab(terminal=name), 1 if up else 0))
    fam("sentinel_gateway_delivery_latency_seconds", "histogram", "From alarm queued to terminal's 200.")
    for name, (st, _d, _up) in per.items():
        lat = st.latency
        acc = 0
        for i, b in enumerate(LATENCY_BUCKETS):
            acc += lat.buckets[i]
            lines.append(
                "sentinel_gateway_delivery_latency_seconds_bucket%s %d" % (lab(terminal=name, le=repr(float(b))), acc)
            )
        acc += lat.buckets[-1]
        lines.append("sentinel_gateway_delivery_latency_seconds_bucket%s %d" % (lab(terminal=name, le="+Inf"), acc))
        lines.append("sentinel_gateway_delivery_latency_seconds_sum%s %.6f" % (lab(terminal=name), lat.total))
        lines.append("sentinel_gateway_delivery_latency_seconds_count%s %d" % (lab(terminal=name), lat.count))
    write_acks(gw.acks, fam, lab, lines, sorted(gw.lanes), gw.clock())
    if front is not None:
        fam("sentinel_gateway_connections", "gauge", "Client connections the HTTP front holds open.")
        lines.append("sentinel_gateway_connections %d" % front.connections)
        fam(
            "sentinel_gateway_accept_paused_total",
            "counter",
            "Times the HTTP front stopped accepting connections for want of file descriptors or memory.",
        )
        lines.append("sentinel_gateway_accept_paused_total %d" % front.accept_failures)
        fam("sentinel_gateway_max_connections", "gauge", "Connections the HTTP front holds at most (shedding).")
        lines.append("sentinel_gateway_max_connections %d" % front.max_connections)
        fam(
            "sentinel_gateway_connections_shed_total",
            "counter",
            "Connections closed to make room at max_connections (the oldest idle, else the oldest slow).",
        )
        lines.append("sentinel_gateway_connections_shed_total %d" % front.shed)
        fam(
            "sentinel_gateway_request_timeouts_total",
            "counter",
            "Requests answered 408 and closed: the head or the body did not arrive within its deadline.",
        )
        lines.append('sentinel_gateway_request_timeouts_total{phase="head"} %d' % front.head_timeouts)
        lines.append('sentinel_gateway_request_timeouts_total{phase="body"} %d' % front.body_timeouts)
        fam(
            "sentinel_gateway_partial_bodies_refused_total",
            "counter",
            "Requests answered 503 and closed: incomplete bodies together over max_partial_body_bytes.",
        )
        lines.append("sentinel_gateway_partial_bodies_refused_total %d" % front.partial_refused)
    return page.text()
