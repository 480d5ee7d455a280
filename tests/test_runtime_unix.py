"""The firmware on a real MicroPython runtime: the Unix port (tests/unixport.py) runs the board's own main.py (boot,
the asyncio tasks, microdot) with the fakes, and these tests talk to it over real TCP, as the gateway does."""
import json
import time

import pytest
import unixport

from host_client import AlarmClient, preset
from host_client.errors import AuthError

pytestmark = pytest.mark.skipif(unixport.unavailable() is not None, reason=unixport.unavailable() or "")


def _status(box):
    return box.status()


def _get(box, path):
    code, _, body = box.request("GET", path)
    return code, body


@pytest.fixture(scope="module")
def box():
    b = unixport.Box()
    b.start()
    yield b
    print(b.console()[-4000:])  # shown with a failure: the box's console
    b.remove()


def _client(box, **kw):
    return AlarmClient(box.url, unixport.KEY_ID, unixport.SECRET, timeout=5, **kw)


def test_the_rfc_presets_over_tcp_light_the_box(box):
    c = _client(box)
    a = c.send(preset("p1", "NVLink down on gpu-07", key="nvl-07"))
    assert a.status == 200 and a.level == "P1" and not a.duplicate
    a = c.send(preset("p0", "NCCL deadlock on rank 3", key="nccl-3"))
    assert a.level == "P0"
    st = _status(box)
    keys = {x["key"]: x["level"] for x in st["active"]}
    assert keys.get("nccl-3") == "P0" and keys.get("nvl-07") == "P1", st["active"]
    assert st["shown"]["level"] == "P0" and st["shown"]["key"] == "nccl-3"
    a = c.send(preset("normal", key="nccl-3"))
    assert a.level == "NORMAL"
    levels = {x["key"]: x["level"] for x in _status(box)["active"]}
    assert levels["nccl-3"] == "NORMAL" and levels["nvl-07"] == "P1", levels  # the P0 cleared, its green shown


def test_a_retry_with_the_same_id_is_a_duplicate(box):
    c = _client(box)
    alarm = preset("p1", "optics flapping", key="opt-1", id="retry-id-1")
    assert not c.send(alarm).duplicate
    assert c.send(alarm).duplicate


def test_ack_and_heartbeat_over_tcp(box):
    c = _client(box)
    c.send(preset("p0", "XID 79 on gpu-2", key="xid-2"))
    a = c.ack(key="xid-2")
    assert a.status == 200 and a.answer["kind"] == "ack"
    st = _status(box)
    assert st["mute"]["active"] or any(x.get("acknowledged") for x in st["active"]), st
    h = c.heartbeat(interval=60)
    assert h.answer["kind"] == "heartbeat"
    c.ack(key="xid-2", long=True)
    assert "xid-2" not in {x["key"] for x in _status(box)["active"]}


def test_status_has_the_device_entry_and_metrics_parse(box):
    st = _status(box)
    dev = st["device"]
    assert dev["board"] == "esp32" and dev["name"] == "unix-box" and dev["heap_free"] > 0
    assert dev["wifi"]["connected"] is True and dev["http"]["requests"] >= 1
    code, body = _get(box, "/metrics")
    assert code == 200
    text = body.decode()
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            float(value)
            names.add(name.split("{")[0])
    assert any(n.startswith("sentinel_requests") for n in names), sorted(names)


def test_a_bad_signature_is_refused_with_the_cores_answer(box):
    c = AlarmClient(box.url, unixport.KEY_ID, "not-the-secret-0123456789", timeout=5)
    with pytest.raises(AuthError) as e:
        c.send(preset("p0", "forged", key="forged"))
    assert e.value.code == "bad_signature", e.value
    assert "forged" not in {x["key"] for x in _status(box)["active"]} and box.alive()


def test_state_survives_a_reboot_of_the_process():
    b = unixport.Box()
    try:
        b.start()
        _client(b).send(preset("p0", "survives a reset", key="keep-me"))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "keep-me" not in json.dumps(b.state()):
            time.sleep(0.1)
        b.stop()
        b.start()
        st = _status(b)
        assert [x["key"] for x in st["active"]] == ["keep-me"], st["active"]
    finally:
        b.remove()
