"""Properties of the TTS chip frames on CPython, checked against CPython's own utf-16 codecs as an oracle.

The shared vectors (tests/vectors/tts.json) run on both interpreters through tests/core/tts.py; here hypothesis
looks for texts and settings those vectors missed, seeded with every text the vectors hold.
"""

import json
import pathlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sentinel_core import tts_reply, tts_syn6288, tts_text, tts_xfs5152

VECTORS = json.loads((pathlib.Path(__file__).parent / "vectors" / "tts.json").read_text("utf-8"))["cases"]
VECTOR_TEXTS = sorted({c["text"] for c in VECTORS if c["op"] == "synthesize" and c.get("text")})

CODEC = {tts_syn6288: "utf-16-be", tts_xfs5152: "utf-16-le"}
CHIPS = pytest.mark.parametrize("mod", [tts_syn6288, tts_xfs5152], ids=["syn6288", "xfs5152"])

# Text a person or a gateway could send: any code point but lone surrogates (a str from valid UTF-8 has none),
# with CJK, emoji, punctuation and brackets made common.
texts = st.text(
    st.one_of(
        st.characters(exclude_categories=("Cs",)),
        st.sampled_from("你好告警，。！？、；： ,.!?[]\n\t😀🔥𠀀xX0"),
    ),
    min_size=1,
    max_size=400,
)


def tag_settings(mod):
    if mod is tts_syn6288:
        return st.fixed_dictionaries(
            {},
            optional={
                "volume": st.integers(0, 16),
                "speed": st.integers(0, 5),
                "music": st.integers(0, 15),
                "music_volume": st.integers(0, 16),
            },
        )
    return st.fixed_dictionaries(
        {}, optional={"volume": st.integers(0, 10), "speed": st.integers(0, 10), "tone": st.integers(0, 10)}
    )


def check_frame(mod, frame):
    """Length field and (SYN6288) checksum computed here, independently of the module's decode()."""
    assert frame[0] == 0xFD
    length = frame[1] << 8 | frame[2]
    assert length == len(frame) - 3
    if mod is tts_syn6288:
        x = 0
        for b in frame[:-1]:
            x ^= b
        assert frame[-1] == x
        payload = frame[5:-1]
    else:
        payload = frame[5:]
    assert frame[3] == 0x01 and frame[4] & 7 == 3
    # Strict decoding by CPython's codec fails on a split surrogate pair or an odd byte count.
    return payload, payload.decode(CODEC[mod])


def spoken(mod, text, raw, kw, max_text):
    frames = mod.synthesize(text, raw=raw, max_text=max_text, **kw)
    head = (
        tts_syn6288.tags(kw.get("volume"), kw.get("speed"), kw.get("music_volume"))
        if mod is tts_syn6288
        else tts_xfs5152.tags(kw.get("volume"), kw.get("speed"), kw.get("tone"))
    )
    chunks = []
    for f in frames:
        payload, decoded = check_frame(mod, f)
        assert len(payload) <= max_text
        assert decoded.startswith(head)
        assert mod.decode(f)["text"] == decoded
        chunks.append(decoded[len(head) :])
    return frames, head, chunks


@CHIPS
@settings(max_examples=150, deadline=None)
@given(data=st.data(), text=texts, raw=st.booleans(), max_text=st.one_of(st.just(200), st.integers(40, 400)))
def test_split_frames_join_back_to_the_text(mod, data, text, raw, max_text):
    kw = data.draw(tag_settings(mod))
    frames, head, chunks = spoken(mod, text, raw, kw, max_text)
    assert "".join(chunks) == (text if raw else tts_text.plain(text))
    assert all(chunks)
    # A cut lands where the rule says (see reference_chunks); only a raw tag may pull it earlier.
    budget_units = (max_text - 2 * len(head)) // 2
    if raw and "[" in text:
        for i in range(len(chunks) - 1):
            units = tts_text.units(chunks[i])
            assert 2 * units >= budget_units - 1 or chunks[i + 1].startswith("["), (units, budget_units)
    else:
        assert chunks == reference_chunks(text if raw else tts_text.plain(text), budget_units)


BREAK_CHARS = {chr(u) for u in tts_text.BREAKS}


def reference_chunks(text, budget_units):
    """The chunking rule of docs/TTS.md written again over code points rather than UTF-16 bytes."""

    def size(c):
        return 2 if ord(c) > 0xFFFF else 1

    out = []
    while text:
        if sum(size(c) for c in text) <= budget_units:
            out.append(text)
            break
        w = u = 0
        while u + size(text[w]) <= budget_units:
            u += size(text[w])
            w += 1
        cut = w
        before = 0
        for j in range(w):
            if text[j] in BREAK_CHARS and 2 * before >= u:
                cut = j + 1
            before += size(text[j])
        out.append(text[:cut])
        text = text[cut:]
    return out


@CHIPS
@settings(max_examples=60, deadline=None)
@given(text=texts, max_text=st.integers(4, 40))
def test_tiny_frames_never_split_a_surrogate_pair(mod, text, max_text):
    frames, _, chunks = spoken(mod, text, True, {}, max_text)
    assert "".join(chunks) == text


@CHIPS
@pytest.mark.parametrize("text", VECTOR_TEXTS)
def test_vector_texts_hold_the_properties(mod, text):
    for max_text in (200, 23, 4):
        _, _, chunks = spoken(mod, text, False, {}, max_text)
        assert chunks == reference_chunks(tts_text.plain(text), max_text // 2)


def test_vectors_agree_with_cpython_codecs():
    """Every synthesis vector's frames are the chunks it lists, framed by hand and encoded by CPython."""
    n = 0
    for case in VECTORS:
        if case["op"] != "synthesize" or "frames" not in case:
            continue
        mod = tts_syn6288 if case["chip"] == "syn6288" else tts_xfs5152
        for h in case["frames"]:
            _, decoded = check_frame(mod, bytes.fromhex(h))
            n += 1
        if "chunks" in case:
            text = case["text"] if case.get("raw") else tts_text.plain(case["text"])
            assert "".join(case["chunks"]) == text, case["name"]
    assert n >= 50


@given(st.binary(max_size=64))
@settings(max_examples=300, deadline=None)
@example(b"")
@example(bytes(range(256)))
@example(b"\x41\x4f")
def test_reply_parser_never_raises(data):
    r = tts_reply.parse_reply(data)
    assert len(r.codes) == len(data)
    assert r.unknown == sum(1 for b in data if b not in tts_reply.NAMES)
    assert r.summary in ("error", "busy", "idle", "accepted", "init", "unknown", "none")
    assert (r.summary == "none") == (len(data) == 0)


@CHIPS
@given(st.binary(max_size=80))
@settings(max_examples=300, deadline=None)
def test_decode_refuses_garbage_with_value_error_only(mod, data):
    try:
        mod.decode(data)
    except ValueError:
        pass


@CHIPS
@given(st.integers(-5, 30), st.integers(-5, 30))
@settings(max_examples=80, deadline=None)
def test_tags_are_range_checked(mod, volume, speed):
    lo_v, hi_v = mod.VOLUME
    lo_s, hi_s = mod.SPEED
    ok = lo_v <= volume <= hi_v and lo_s <= speed <= hi_s
    try:
        frames = mod.synthesize("x", volume=volume, speed=speed)
    except ValueError as e:
        assert not ok
        assert ("volume" in str(e)) or ("speed" in str(e))
    else:
        assert ok and len(frames) == 1


@CHIPS
def test_a_long_alarm_body_stays_small(mod):
    # The receiver's 2 KB body limit bounds the text: the frames for it stay a handful.
    frames = mod.synthesize("告警" * 700)
    assert len(frames) == 14 and all(len(f) <= 206 for f in frames)
