# Unit checks of the pieces below the request handler: strict JSON, epochs, presets.
from sentinel_core import epoch, strictjson
from sentinel_core.alarm import NORMAL, P0, P1, PRESETS, RECOVERED_TEXT, color_hex, preset


def _refused(body):
    try:
        strictjson.loads(body)
    except ValueError:
        return True
    return False


def test_strict_json_same_on_both_interpreters():
    assert strictjson.loads(b'{"a":[1,-2.5e3,true,false,null],"b":"\\u4f60\xf0\x9f\x98\x80"}') == {
        "a": [1, -2500.0, True, False, None],
        "b": "\u4f60\U0001f600",
    }
    for bad in (
        b"[1,]",
        b'{"a":1,}',
        b"01",
        b"NaN",
        b"-Infinity",
        b"[1] 2",
        b"{'a':1}",
        b"",
        b" ",
        b'"\\ud800"',
        b'"\\udc00"',
        b'"\\ud83d\\ude00"',
        b'"\x01"',
        b"[" * 9 + b"]" * 9,
        b"1e",
        b"-",
        b"+1",
        b"0x1",
    ):
        assert _refused(bad), bad


def test_strict_json_depth_limit_allows_reasonable_nesting():
    assert strictjson.loads(b"[[[[[[[[]]]]]]]]") == [[[[[[[[]]]]]]]]


def test_epochs():
    assert epoch.to_unix(0, 2000) == 946684800
    assert epoch.to_unix(0, 1970) == 0
    assert epoch.from_unix(1787000000, 2000) == 1787000000 - 946684800
    assert epoch.from_unix(epoch.to_unix(12345, 2000), 2000) == 12345
    try:
        epoch.offset_for(1980)
    except ValueError:
        return
    raise AssertionError("unknown epoch accepted")


def test_rfc_table_presets():
    p0 = preset("p0", "x")
    assert (color_hex(p0.color), p0.light_mode, p0.audio_mode, p0.repeat_times, p0.level) == (
        "#FF0000",
        "flash",
        "cycle",
        3,
        P0,
    )
    p1 = preset("p1", "x")
    assert (color_hex(p1.color), p1.light_mode, p1.audio_mode, p1.repeat_times, p1.level) == (
        "#FFA500",
        "breath",
        "once",
        1,
        P1,
    )
    ok = preset("normal")
    assert (color_hex(ok.color), ok.light_mode, ok.audio_mode, ok.level, ok.duration, ok.text) == (
        "#00FF00",
        "solid",
        "once",
        NORMAL,
        10,
        RECOVERED_TEXT,
    )
    assert sorted(PRESETS) == ["normal", "p0", "p1"]


def test_wire_round_trip_v1_only():
    a = preset("p0", "NCCL", key="k", id="i")
    assert sorted(a.to_wire(v1_only=True)) == ["audio_mode", "color", "light_mode", "repeat_times", "text"]
    w = a.to_wire()
    assert w["level"] == "P0" and w["key"] == "k" and w["id"] == "i"
