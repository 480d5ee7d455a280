"""One Prometheus job scrapes boxes and emulators alike: after the same signed requests, sent byte for byte over
TCP to the emulator, to the board on CPython (tests/board_cpython.py) and to the board on the MicroPython Unix port
(tests/unixport.py), the three /metrics pages have the same families, with the same types and label sets, and the
same values for what the terminal counted; only the few families one shell alone measures differ.

Both shells write their page with sentinel_core.metrics (the one writer). Broken once to see this fail: the board
back on its own writer (main before the glue, sentinel_fw/metrics.py) fails it on `sentinel_health` vs
`sentinel_health_ok`, `flash_writes_total` vs `state_writes_total`, the missing refusals_total, accepted_total,
display_info, utterances_total families and the requests' `duplicate` outcome."""

import json
import time

import pytest
import unixport
from board_cpython import Board

from emulator.harness import Harness
from sentinel_core.signing import scope, sign

KEY_ID, SECRET = unixport.KEY_ID, unixport.SECRET
OK = {"text": "XID 79 on gpu-3", "color": "#FF0000", "light_mode": "flash", "audio_mode": "cycle", "repeat_times": 3}
# What one shell alone can measure (on CPython the board has no gc.mem_free(), so no heap_free_bytes there).
BOX_ONLY = {"sentinel_watchdog_feeds_total", "sentinel_heap_free_bytes"}
EMULATOR_ONLY = {"sentinel_frame_overruns_total", "sentinel_request_handle_seconds", "sentinel_engine_up"}
# Counted by the terminal or the glue from the requests alone: the same numbers on every shell.
SAME_VALUES = (
    "sentinel_requests_total",
    "sentinel_refusals_total",
    "sentinel_accepted_total",
    "sentinel_alarms_total",
    "sentinel_button_presses_total",
    "sentinel_active_alarms",
    "sentinel_shown_level",
    "sentinel_speech_dropped_total",
)


def requests():
    now = int(time.time())

    def signed(path, obj, secret=SECRET, key_id=KEY_ID, ts=None):
        body = json.dumps(obj).encode()
        ts = str(now) if ts is None else ts
        return (
            "POST",
            path,
            {
                "X-API-Key": key_id,
                "X-Timestamp": ts,
                "Content-Type": "application/json",
                "X-Signature": sign(secret.encode(), ts, body, scope("POST", path)),
            },
            body,
        )

    p0 = signed("/api/v1/send_msg", dict(OK, key="A03:gpu-worker-08", id="parity-1"))
    return [
        p0,
        p0,  # accepted, then a duplicate
        signed("/api/v1/send_msg", dict(OK, key="A03:gpu-worker-09", id="parity-2", color="#FFA500")),
        signed("/api/v1/ack", {"key": "A03:gpu-worker-08", "id": "parity-ack"}),
        signed("/api/v1/heartbeat", {"interval": 60, "id": "parity-hb"}),
        signed("/api/v1/unmute", {"id": "parity-unmute"}),
        signed("/api/v1/send_msg", OK, secret="not-the-secret-at-all-0000"),  # bad_signature
        signed("/api/v1/send_msg", OK, key_id="who"),  # unknown key
        signed("/api/v1/send_msg", OK, ts=str(now - 3600)),  # stale_timestamp
        signed("/api/v1/send_msg", dict(OK, text="x" * 2940)),  # too large
        signed("/api/v1/send_msg", dict(OK, color="red")),
    ]  # invalid


def parse(text):
    """{family: (type, {label-name tuples}, {sample: value})} of a page, checking its exposition format."""
    out = {}
    helped = set()
    for line in text.split("\n"):
        if not line:
            continue
        if line.startswith("# HELP "):
            helped.add(line.split(" ")[2])
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name in helped and name not in out, line
            out[name] = (kind, set(), {})
            continue
        key, value = line.rsplit(" ", 1)
        name = key.split("{")[0]
        fam = name if name in out else name.rsplit("_", 1)[0]  # a summary's _sum and _count
        assert fam in out, line
        labels = ()
        if "{" in key:
            assert key.endswith("}"), line
            labels = tuple(sorted(kv.split("=")[0] for kv in key[key.index("{") + 1 : -1].split(",")))
        out[fam][1].add(labels)
        out[fam][2][key] = float(value)
    return out


def scrape(port, sent):
    for method, path, headers, body in sent:
        code, _, _ = unixport.http_request(port, method, path, headers, body)
        assert code in (200, 400, 401, 413, 422), (path, code)
    code, headers, body = unixport.http_request(port, "GET", "/metrics")
    assert code == 200 and headers["content-type"].startswith("text/plain; version=0.0.4"), (code, headers)
    return parse(body.decode())


def pages(tmp_path):
    sent = requests()
    got = {}
    with Harness(str(tmp_path / "emu"), key_id=KEY_ID, secret=SECRET) as emu:
        got["emulator"] = scrape(emu.server.port, sent)
    (tmp_path / "board").mkdir()
    with Board(tmp_path / "board") as b:
        got["board on CPython"] = scrape(b.port, sent)
    if unixport.unavailable() is None:
        with unixport.Box() as box:
            got["board on MicroPython"] = scrape(box.port, sent)
    return got


def test_every_shell_publishes_the_same_families_and_counts(tmp_path):
    got = pages(tmp_path)
    emu = got.pop("emulator")
    assert EMULATOR_ONLY <= set(emu), sorted(emu)
    shared = set(emu) - EMULATOR_ONLY
    for shell, page in got.items():
        assert set(page) - BOX_ONLY == shared, (shell, sorted((set(page) - BOX_ONLY) ^ shared))
        assert "sentinel_watchdog_feeds_total" in page, shell
        for name in shared:
            assert page[name][0] == emu[name][0], (shell, name, page[name][0], emu[name][0])
            assert page[name][1] == emu[name][1], (shell, name, page[name][1], emu[name][1])
        for name in SAME_VALUES:
            assert page[name][2] == emu[name][2], (shell, name, page[name][2], emu[name][2])
    if "board on MicroPython" in got:
        assert "sentinel_heap_free_bytes" in got["board on MicroPython"]
    else:
        pytest.skip("the MicroPython Unix port: " + unixport.unavailable())


def test_the_inputs_are_counted_as_sent(tmp_path):
    # What the pages agree on is not zero everywhere: the requests above land where they should.
    with Harness(str(tmp_path / "emu"), key_id=KEY_ID, secret=SECRET) as emu:
        page = scrape(emu.server.port, requests())
    req = page["sentinel_requests_total"][2]
    assert req == {
        'sentinel_requests_total{outcome="accepted"}': 5.0,
        'sentinel_requests_total{outcome="duplicate"}': 1.0,
        'sentinel_requests_total{outcome="refused"}': 5.0,
    }, req
    ref = page["sentinel_refusals_total"][2]
    assert set(ref) == {
        'sentinel_refusals_total{code="%s"}' % c
        for c in ("bad_signature", "unknown_key", "stale_timestamp", "too_large", "invalid_field")
    }, ref
    assert page["sentinel_accepted_total"][2] == {
        'sentinel_accepted_total{kind="%s"}' % k: 1.0 + (k == "alarm") for k in ("alarm", "ack", "heartbeat", "unmute")
    }


# A label value with every character the text format escapes (a backslash, a double quote, a line feed).
HOSTILE = 'rack "A\\03"\nnext'
ESCAPED = '"rack \\"A\\\\03\\"\\nnext"'


def test_a_label_is_escaped_the_same_on_the_gateway_probe_and_emulator_pages(tmp_path):
    """Issue 38: one escaper (sentinel_core.metrics.label) behind the three writers. Broken once: the probe's old
    writer, which left the line feed raw, splits its sample across two lines and fails here."""
    from host_client.gateway.config import Config
    from host_client.gateway.metrics import metrics_text
    from host_client.gateway.service import Gateway
    from host_client.probes import config as probe_config
    from host_client.probes.daemon import Daemon

    gw = Gateway(Config.from_dict({}, env={}))
    gw.events_in[("alertmanager", HOSTILE)] = 1
    gateway = [x for x in metrics_text(gw).splitlines() if x.startswith("sentinel_gateway_events_total{")]

    d = Daemon(probe_config.build({"node": {"gateway": "http://127.0.0.1:9"}, "progress": {"enabled": False}}))
    d.counts[HOSTILE] = 1
    probe = [x for x in d.metrics().splitlines() if x.startswith("sentinel_probe_events_total{") and "rack" in x]

    with Harness(str(tmp_path / "emu"), key_id=KEY_ID, secret=SECRET) as emu:
        emu.engine.glue.refused[HOSTILE] = 1  # the one free-text label of the terminal's page: a refusal's code
        code, _, body = unixport.http_request(emu.server.port, "GET", "/metrics")
    assert code == 200
    emulator = [x for x in body.decode().splitlines() if x.startswith("sentinel_refusals_total{") and "rack" in x]

    assert gateway == ['sentinel_gateway_events_total{source="alertmanager",type=%s} 1' % ESCAPED]
    assert probe == ["sentinel_probe_events_total{type=%s} 1" % ESCAPED]
    assert emulator == ["sentinel_refusals_total{code=%s} 1" % ESCAPED]
