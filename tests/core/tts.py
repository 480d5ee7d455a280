# TTS chip frames on both interpreters: the vectors in tests/vectors/tts.json (datasheet frames, tags, splitting,
# replies, decoding) and the encoders' common interface.
from binascii import unhexlify

from sentinel_core import tts_decode, tts_reply, tts_syn6288, tts_text, tts_xfs5152

VECTORS = "tts.json"

CHIPS = {"syn6288": tts_syn6288, "xfs5152": tts_xfs5152}
SYNTH_ARGS = ("volume", "speed", "music", "music_volume", "tone", "raw", "max_text")
FIXED = {"stop": "STOP", "pause": "PAUSE", "resume": "RESUME", "status": "STATUS", "sleep": None, "wake": "WAKE"}


def unhex(s):
    return unhexlify(s.replace(" ", ""))


def hexs(b):
    return " ".join("%02X" % x for x in b)


def _call(case, fn, *args, **kw):
    """fn(*args, **kw), or the check that it raised the case's error with the case's words in the message."""
    want = case.get("error")
    try:
        got = fn(*args, **kw)
    except Exception as e:
        if want is None:
            raise
        assert type(e).__name__ == want, "raised %s (%s), want %s" % (type(e).__name__, e, want)
        assert case["message_has"] in str(e), "message %r lacks %r" % (str(e), case["message_has"])
        return None
    assert want is None, "no %s raised, got %r" % (want, got)
    return got


def _synthesize(case, mod):
    kw = {}
    for k in SYNTH_ARGS:
        if k in case:
            kw[k] = case[k]
    frames = _call(case, mod.synthesize, case["text"], **kw)
    if frames is None:
        return
    want = case["frames"]
    got = [hexs(f) for f in frames]
    assert len(got) == len(want), "%d frames, want %d: %r" % (len(got), len(want), got)
    for i in range(len(want)):
        assert isinstance(frames[i], bytes), "frame %d is %s, not bytes" % (i, type(frames[i]).__name__)
        assert got[i] == want[i], "frame %d:\n got  %s\n want %s" % (i, got[i], want[i])
    if "chunks" in case:
        spoken = []
        for f in frames:
            text = mod.decode(f)["text"]
            spoken.append(text[text.rfind("]") + 1 :] if not case.get("raw") else text)
        assert spoken == case["chunks"], "chunks %r" % spoken


def run_case(case):
    mod = CHIPS[case["chip"]]
    op = case["op"]
    if op == "synthesize":
        _synthesize(case, mod)
    elif op in FIXED:
        enc = mod.Encoder()
        got = getattr(enc, op)()
        assert hexs(got) == case["frame"], "%s: got %s" % (op, hexs(got))
        name = FIXED[op] or ("POWER_DOWN" if mod is tts_syn6288 else "SLEEP")
        assert getattr(mod, name) == got
        assert mod.decode(got)["cmd"] == got[3]
    elif op == "baud":
        got = _call(case, mod.set_baud, case["rate"])
        if got is not None:
            assert hexs(got) == case["frame"], "got %s" % hexs(got)
    elif op == "reply":
        data = None if case["bytes"] is None else unhex(case["bytes"])
        for r in (mod.parse_reply(data), mod.Encoder().parse_reply(data)):
            assert r.codes == case["codes"], "codes %r" % r.codes
            assert r.summary == case["summary"], "summary %r" % r.summary
            assert r.busy == case["busy"], "busy %r" % r.busy
            assert r.unknown == case["unknown"], "unknown %r" % r.unknown
    elif op == "decode":
        got = _call(case, mod.decode, unhex(case["frame"]))
        if got is not None:
            assert got["cmd"] == case["cmd"] and got["param"] == case["param"], repr(got)
            assert got["text"] == case["text"], repr(got)
    else:
        raise ValueError("unknown op %r" % op)


def test_encoders_share_one_interface():
    for enc in (tts_syn6288.Encoder(volume=5), tts_xfs5152.Encoder(volume=5)):
        frames = enc.synthesize("GPU 3 down")
        assert len(frames) == 1 and isinstance(frames[0], bytes)
        for op in ("stop", "pause", "resume", "status", "sleep"):
            assert isinstance(getattr(enc, op)(), bytes)
        assert enc.parse_reply(b"\x41\x4f").summary == "idle"
        assert enc.volume_range[0] == 0 and enc.speed_range[0] == 0
        assert enc.name in ("syn6288", "xfs5152")


def test_encoder_defaults_and_per_call_overrides():
    enc = tts_syn6288.Encoder(volume=5, speed=2, music=1)
    assert tts_syn6288.decode(enc.synthesize("a")[0])["text"] == "[v5][t2]a"
    assert tts_syn6288.decode(enc.synthesize("a", volume=9)[0])["text"] == "[v9][t2]a"
    assert tts_syn6288.decode(enc.synthesize("a")[0])["param"] == 0x0B
    enc = tts_xfs5152.Encoder(speed=4, tone=6)
    assert tts_xfs5152.decode(enc.synthesize("a", volume=1)[0])["text"] == "[v1][s4][t6]a"


def test_bad_configuration_fails_at_construction():
    for make in (
        lambda: tts_syn6288.Encoder(volume=17),
        lambda: tts_syn6288.Encoder(music=-1),
        lambda: tts_syn6288.Encoder(max_text=2),
        lambda: tts_xfs5152.Encoder(tone=11),
        lambda: tts_xfs5152.Encoder(speed="fast"),
    ):
        try:
            make()
        except ValueError:
            continue
        raise AssertionError("no ValueError")


def test_bad_call_leaves_encoder_intact():
    enc = tts_xfs5152.Encoder(volume=3)
    before = enc.synthesize("ok")
    try:
        enc.synthesize("ok", volume=99)
    except ValueError as e:
        assert "volume" in str(e) and "99" in str(e)
    else:
        raise AssertionError("no ValueError")
    assert enc.volume == 3 and enc.synthesize("ok") == before


def test_split_frames_stay_under_the_limit_and_join_back():
    text = "告警：" + "节点 gpu-worker-08 的 NVLink 降速，" * 9 + "🔥" * 7 + "x" * 130
    for mod in (tts_syn6288, tts_xfs5152):
        for max_text in (4, 5, 22, 63, 200):
            frames = mod.synthesize(text, raw=True, max_text=max_text)
            spoken = []
            for f in frames:
                d = mod.decode(f)
                assert len(d["data"]) <= max_text, "%d > %d" % (len(d["data"]), max_text)
                spoken.append(d["text"])
            assert "".join(spoken) == text


def test_utf16_round_trip_both_byte_orders():
    text = "A你😀𠀀\n"
    for big in (True, False):
        data = tts_text.encode(text, big)
        assert len(data) == 2 * tts_text.units(text) == 14
        assert tts_decode.text(data, big) == text
    assert tts_text.encode("😀", True) == b"\xd8\x3d\xde\x00"
    assert tts_text.encode("😀", False) == b"\x3d\xd8\x00\xde"


def test_reply_accepts_an_int_and_refuses_other_types():
    assert tts_reply.parse_reply(0x4E).busy is True
    assert tts_reply.parse_reply(bytearray(b"\x4f")).summary == "idle"
    assert tts_reply.parse_reply(memoryview(b"\x45")).error
    for bad in ("AO", 300, [0x41]):
        try:
            tts_reply.parse_reply(bad)
        except TypeError:
            continue
        raise AssertionError("no TypeError for %r" % (bad,))


def test_every_byte_value_has_a_reply_name():
    r = tts_reply.parse_reply(bytes(range(256)))
    assert len(r.codes) == 256 and r.unknown == 251
    assert r.summary == "error"


def test_tags_count_against_the_frame_limit():
    frames = tts_syn6288.synthesize("y" * 100, volume=16, speed=5, music_volume=16)
    # 14 units of tags leave 86 units of text in the first frame, 14 in the second.
    assert [len(tts_syn6288.decode(f)["data"]) for f in frames] == [200, 56]


def test_lone_surrogate_is_spoken_as_replacement():
    for mod in (tts_syn6288, tts_xfs5152):
        frames = mod.synthesize("a" + chr(0xD800) + "b")
        assert mod.decode(frames[0])["text"] == "a\ufffdb"


def test_the_board_never_loads_the_frame_reader_nor_the_command_builder():
    # Encoding, chip replies and the UART driver's imports must not pull tts_decode or tts_command into the board's
    # heap. The modules are imported afresh, then the originals are put back for the other tests.
    import sys

    names = (
        "sentinel_core.tts_decode",
        "sentinel_core.tts_command",
        "sentinel_core.tts_syn6288",
        "sentinel_core.tts_xfs5152",
        "sentinel_core.tts_frame",
        "sentinel_core.tts_text",
        "sentinel_core.tts_reply",
    )
    saved = {}
    for name in names:
        if name in sys.modules:
            saved[name] = sys.modules.pop(name)
    try:
        for name in names[2:]:
            __import__(name)
        assert "sentinel_core.tts_decode" not in sys.modules
        assert "sentinel_core.tts_command" not in sys.modules
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
