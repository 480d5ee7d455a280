# Request vectors: every refusal code, the RFC gateway's requests byte for byte, replay and clock rules.
# Each case runs its steps in order against one fresh Receiver, on both interpreters.
from binascii import unhexlify

from _vectors import load

from sentinel_core.alarm import LEVEL_NAMES, color_hex
from sentinel_core.keyring import KeyRing
from sentinel_core.receiver import Receiver
from sentinel_core.refusal_codes import CODES

VECTORS = "requests.json"
_keys = None


def _keyring():
    global _keys
    if _keys is None:
        _keys = load("requests.json")["keys"]
    return KeyRing(_keys)


def _alarm_fields(alarm):
    return {
        "level": LEVEL_NAMES[alarm.level],
        "text": alarm.text,
        "color": color_hex(alarm.color),
        "light_mode": alarm.light_mode,
        "audio_mode": alarm.audio_mode,
        "repeat_times": alarm.repeat_times,
        "key": alarm.key,
        "id": alarm.id,
        "duration": alarm.duration,
    }


def run_case(case):
    r = Receiver(_keyring(), window=case.get("window", 300), replay_capacity=case.get("capacity", 64))
    if "restore" in case:
        r.replay.restore(case["restore"])
    for n, step in enumerate(case["steps"]):
        body = unhexlify(step["body_hex"]) if "body_hex" in step else step["body"].encode()
        res = r.handle(step["method"], step["path"], step["headers"], body, step["now"], step["synced"])
        where = "%s step %d" % (case["name"], n)
        assert res.status == step["status"], "%s: status %d %r" % (where, res.status, res.answer)
        if res.status != 200:
            assert res.answer["ok"] is False
            assert res.answer["error"] == step["error"], "%s: %r" % (where, res.answer)
            assert CODES[res.answer["error"]] == res.status
            assert len(res.answer["message"]) > 5
            assert res.kind is None and res.alarm is None
            continue
        assert res.answer["ok"] is True
        if "kind" in step:
            assert res.kind == step["kind"], where
        if "duplicate" in step:
            assert res.duplicate == step["duplicate"], where
            assert res.answer["duplicate"] == step["duplicate"], where
        if res.duplicate:
            assert res.alarm is None, where
        if "alarm" in step:
            got = _alarm_fields(res.alarm)
            for k in step["alarm"]:
                assert got[k] == step["alarm"][k], "%s: %s=%r, want %r" % (where, k, got[k], step["alarm"][k])
        for field in ("ack", "heartbeat", "unmute"):
            if field in step:
                got = res.payload if field == "unmute" else getattr(res, field)
                for k in step[field]:
                    assert got[k] == step[field][k], "%s: %s.%s" % (where, field, k)
        assert res.body_bytes().startswith(b'{"')


def test_replay_memory_is_bounded():
    from sentinel_core.replay import ReplayGuard

    g = ReplayGuard(window=300, capacity=8)
    for i in range(100):
        g.accept(1000 + i, b"m%d" % i, None, 1000 + i, True)
    assert len(g) <= 8
    assert g.floor >= 1000 + 100 - 8 - 1


def test_floor_survives_export():
    from sentinel_core.replay import ReplayGuard

    g = ReplayGuard()
    g.accept(5000, b"x", None, 5000, True)
    h = ReplayGuard()
    h.restore(g.export())
    assert h.floor == 5000
    h.restore({"replay_floor": "junk"})
    h.restore(None)
    assert h.floor == 5000
