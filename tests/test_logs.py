"""host_client/logs.py, the one log dialect: real failures (a refused connection on loopback, a server that never
answers, a 503, a missing file) put in words, and a record rendered as one JSON line with an ISO-8601 UTC time or
as a text line."""

import io
import json
import logging
import re
import socket
import urllib.error
import urllib.request

from host_client.logs import error_words, iso_time, log_event, setup
from testkit.net import free_port
from testkit.terminal import LoopbackTerminal


def caught(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the error is what is looked at
        return e
    raise AssertionError("no error")


def test_network_errors_in_words_never_a_repr():
    refused = caught(lambda: urllib.request.urlopen("http://127.0.0.1:%d/" % free_port(), timeout=5))
    assert isinstance(refused, urllib.error.URLError)
    assert error_words(refused) == "connection refused"
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(4)  # connections complete, nobody answers
    try:
        slow = caught(lambda: urllib.request.urlopen("http://127.0.0.1:%d/" % mute.getsockname()[1], timeout=0.3))
    finally:
        mute.close()
    assert error_words(slow) == "timed out"
    with LoopbackTerminal({"k": b"s" * 32}, fail_first=1) as term:
        busy = caught(lambda: urllib.request.urlopen(urllib.request.Request(term.url + "/x", b"{}"), timeout=5))
    assert error_words(busy) == "HTTP 503 Service Unavailable"


def test_file_errors_name_the_file(tmp_path):
    gone = caught(lambda: open(tmp_path / "kmsg"))
    assert error_words(gone) == "No such file or directory: %s" % (tmp_path / "kmsg")
    assert error_words(ValueError("gpu_util must be a number")) == "gpu_util must be a number"
    assert error_words(RuntimeError()) == "RuntimeError"  # nothing to say but what it is


def test_a_record_is_one_json_line_with_an_iso_utc_time_or_a_text_line():
    out = io.StringIO()
    log = setup("sentinel.test_logs", fmt="json", stream=out)
    log_event(log, "node_drained", logging.WARNING, node="gpu-worker-08", reason="XID 79")
    log.info("prose, %d words", 2)
    a, b = [json.loads(ln) for ln in out.getvalue().splitlines()]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", a["ts"])
    assert {k: v for k, v in a.items() if k != "ts"} == {
        "severity": "warning",
        "logger": "sentinel.test_logs",
        "event": "node_drained",
        "node": "gpu-worker-08",
        "reason": "XID 79",
    }
    assert b["message"] == "prose, 2 words" and "event" not in b
    out = io.StringIO()
    log = setup("sentinel.test_logs", fmt="text", stream=out)
    log_event(log, "node_drained", logging.WARNING, node="gpu-worker-08")
    assert re.fullmatch(r"\S+Z WARNING node_drained node=\"gpu-worker-08\"\n", out.getvalue())
    assert iso_time(0.0) == "1970-01-01T00:00:00.000Z"
