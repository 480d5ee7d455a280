# The replay memory under pressure, on both interpreters: preallocated at boot, recorded all or nothing, a retry of
# a request that was not applied is applied, and a storm of 200 distinct signed alarms in one second is accepted
# while every replay of them is still refused.
import json

from sentinel_core import replay as replay_mod
from sentinel_core.keyring import KeyRing
from sentinel_core.receiver import Receiver
from sentinel_core.replay import CAPACITY, DUPLICATE, ReplayGuard
from sentinel_core.signing import sign

SECRET = b"0123456789abcdef0123456789abcdef"
NOW = 1764460800


def _receiver(**kw):
    return Receiver(KeyRing({"gw": SECRET}), **kw)


def _req(msg_id, ts=NOW, text="XID 79 on gpu-3"):
    body = json.dumps(
        {
            "text": text,
            "color": "#FF0000",
            "light_mode": "flash",
            "audio_mode": "cycle",
            "repeat_times": 3,
            "level": "P0",
            "key": "k-" + msg_id,
            "id": msg_id,
        }
    ).encode()
    ts = str(ts)
    return {
        "Content-Type": "application/json",
        "X-API-Key": "gw",
        "X-Timestamp": ts,
        "X-Signature": sign(SECRET, ts, body),
    }, body


def _post(r, req, now=NOW, commit=True):
    return r.handle("POST", "/api/v1/send_msg", req[0], req[1], now, True, commit)


def test_the_table_is_allocated_when_the_guard_is_made():
    g = ReplayGuard()
    assert g.capacity == CAPACITY >= 200
    assert len(g._keys) == CAPACITY * 19 and len(g._ts) == CAPACITY  # 10 B of MAC, a flag, 8 B of id digest
    keys = g._keys
    for i in range(CAPACITY + 10):
        g.accept(NOW + i, b"mac-%d" % i, "id-%d" % i, NOW + i, True)
    assert g._keys is keys and len(keys) == CAPACITY * 19  # never grown, never replaced


def test_a_request_not_committed_is_not_remembered_and_its_retry_is_applied():
    r = _receiver()
    req = _req("not-applied")
    first = _post(r, req, commit=False)
    assert first.status == 200 and first.pending and not first.duplicate
    # The shell could not apply it (say, a MemoryError in the state machine) and never committed: the sender's retry,
    # byte for byte the same request, is new, not a duplicate of an alarm the terminal never showed.
    again = _post(r, req, commit=False)
    assert again.status == 200 and not again.duplicate and again.pending
    r.commit(again)
    assert not again.pending
    third = _post(r, req)
    assert third.status == 200 and third.duplicate


def test_a_memory_error_while_recording_leaves_the_guard_as_it_was():
    r = _receiver()
    _post(r, _req("before"))
    g = r.replay
    n, floor, keys = len(g), g.floor, bytes(g._keys)
    real = replay_mod._id_digest

    def broken(msg_id):
        raise MemoryError("injected")

    replay_mod._id_digest = broken
    try:
        res = _post(r, _req("during"))
    finally:
        replay_mod._id_digest = real
    assert res.status == 503 and res.answer["error"] == "busy" and "try again" in res.answer["message"]
    assert len(g) == n and g.floor == floor and bytes(g._keys) == keys
    # Memory is back: the same request is accepted (the guard was not poisoned), then a duplicate.
    assert _post(r, _req("during")).duplicate is False
    assert _post(r, _req("during")).duplicate is True
    assert _post(r, _req("after")).status == 200


def test_a_storm_of_200_distinct_alarms_in_one_second_is_accepted_and_replays_refused():
    r = _receiver()
    reqs = [_req("storm-%d" % i, ts=NOW + (i * 2) // 200) for i in range(200)]  # signed within 1 s
    for i, q in enumerate(reqs):
        res = _post(r, q, now=NOW + 1)
        assert res.status == 200 and not res.duplicate, (i, res.answer)
    for i, q in enumerate(reqs):
        res = _post(r, q, now=NOW + 1)
        assert res.status == 200 and res.duplicate, (i, res.answer)
    # The first P0 after the storm, and every later one, is accepted.
    for i in range(60):
        res = _post(r, _req("after-%d" % i, ts=NOW + 2), now=NOW + 2)
        assert res.status == 200 and not res.duplicate, (i, res.answer)


def test_forgetting_raises_the_floor_so_an_evicted_request_never_replays():
    g = ReplayGuard(window=300, capacity=4)
    for i in range(6):
        g.accept(NOW + i, b"mac-%d" % i, None, NOW + i, True)
    assert len(g) == 4 and g.floor == NOW + 1
    for i in (0, 1):  # forgotten: refused by the floor, never accepted again
        try:
            g.check(NOW + i, b"mac-%d" % i, None, NOW + 6, True)
            raise AssertionError("replay of an evicted entry accepted")
        except Exception as e:  # noqa: BLE001 - the refusal is judged by its code, the same on both interpreters
            assert getattr(e, "code", None) == "stale_timestamp", e
    for i in (2, 3, 4, 5):
        assert g.check(NOW + i, b"mac-%d" % i, None, NOW + 6, True) == DUPLICATE
