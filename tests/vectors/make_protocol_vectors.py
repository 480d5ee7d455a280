"""Regenerates signing.json and requests.json. Signatures come from CPython's stdlib hmac (not from the core),
so the vectors are an independent reference. Run: .venv/bin/python tests/vectors/make_protocol_vectors.py"""

import hashlib
import hmac
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
RFC_KEY_ID = "gpu_cluster_sentinel"
RFC_SECRET = "AI#TrainSecureHMACSecretKey2026"  # the RFC's published example secret: tests only
NOW = 1787000000


def sig(secret, ts, body, path="/api/v1/send_msg", method="POST"):
    """v1 (the RFC) for send_msg: HMAC(ts LF body); v1.1 for every other endpoint: HMAC(METHOD SP path LF ts LF
    body), written out here independently of the core's signing.scope."""
    prefix = b"" if path == "/api/v1/send_msg" else ("%s %s\n" % (method, path)).encode()
    return hmac.new(secret.encode(), prefix + ts.encode() + b"\n" + body, hashlib.sha256).hexdigest()


def go_marshal(text, color, light, audio, repeat):
    """Go's encoding/json for the RFC's HardwareRequestPayload: field order, no spaces, raw UTF-8, and <, >, &
    escaped as \\u003c, \\u003e, \\u0026."""
    t = json.dumps(text, ensure_ascii=False)
    t = t.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    t = t.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return (
        '{"text":%s,"color":"%s","light_mode":"%s","audio_mode":"%s","repeat_times":%d}'
        % (t, color, light, audio, repeat)
    ).encode()


def rfc_body(text, critical):
    if critical:
        return go_marshal(text, "#FF0000", "flash", "cycle", 3)
    return go_marshal(text, "#FFA500", "breath", "once", 1)


RFC_TEXTS = [
    ("nccl", "训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁，全环算力挂起", True),
    ("xid", "硬件致命故障，机架 B12 节点 gpu-node-117 第 3 号卡发生驱动级报错", True),
    ("util", "算力水准预警，机架 C01 节点 gpu-worker-3 算力利用率突降至百分之 2", True),
    ("nvlink", "算力水准预警，机架 A03 节点 gpu-worker-08 算力利用率突降至百分之 37", False),
    ("html", 'rack <A03> & node "x"', False),
    ("recovered", "训练集群已恢复正常", False),
]


def signing_cases():
    cases = []
    for name, text, crit in RFC_TEXTS:
        body = rfc_body(text, crit)
        cases.append(
            {
                "name": "rfc_" + name,
                "secret": RFC_SECRET,
                "timestamp": str(NOW),
                "body": body.decode(),
                "signature": sig(RFC_SECRET, str(NOW), body),
            }
        )
    odd = [
        ("empty_body", "k", "0", b""),
        ("one_byte", "k", "1", b"{"),
        ("secret_64", "s" * 64, "1787000000", b"{}"),
        ("secret_65", "s" * 65, "1787000000", b"{}"),
        ("secret_200_utf8", "密钥" * 40, "1787000000", b'{"text":"x"}'),
        ("emoji", "k", "1787000001", json.dumps({"text": "GPU 🔥 down"}, ensure_ascii=False).encode()),
        ("escaped_emoji", "k", "1787000001", json.dumps({"text": "GPU 🔥 down"}).encode()),
        ("newline_in_body", "k", "1787000002", b'{"text":\n"a"}\n'),
        ("max_body", "k", "1787000003", b'{"text":"' + b"x" * 2036 + b'"}'),
        ("binary", "k", "1787000004", bytes(range(256))),
        ("ts_2000_epoch_bug", "k", "840315200", b"{}"),
    ]
    for name, secret, ts, body in odd:
        c = {"name": name, "secret": secret, "timestamp": ts, "signature": sig(secret, ts, body)}
        try:
            c["body"] = body.decode()
        except UnicodeDecodeError:
            c["body_hex"] = body.hex()
        cases.append(c)
    # v1.1: every signed endpoint but send_msg signs its method and path too. The same body and timestamp give a
    # different signature on each endpoint.
    same = b'{"id":"m-1"}'
    for path in ("/api/v1/ack", "/api/v1/heartbeat", "/api/v1/unmute", "/api/v1/send_msg"):
        cases.append(
            {
                "name": "v1_1_" + path.rsplit("/", 1)[1],
                "secret": RFC_SECRET,
                "timestamp": str(NOW),
                "method": "POST",
                "path": path,
                "body": same.decode(),
                "signature": sig(RFC_SECRET, str(NOW), same, path),
            }
        )
    rfc = rfc_body(RFC_TEXTS[0][1], True)
    cases.append(
        {
            "name": "v1_1_rfc_body_on_ack",
            "secret": RFC_SECRET,
            "timestamp": str(NOW),
            "method": "POST",
            "path": "/api/v1/ack",
            "body": rfc.decode(),
            "signature": sig(RFC_SECRET, str(NOW), rfc, "/api/v1/ack"),
        }
    )
    # A spread of texts and secrets: every script the room may hear, every length class.
    words = ["训练", "NCCL", "é", "ß", "ø", "Ж", "日本語", "한국어", "عربى", " ", "🔥", "0", "\\", '"', "/"]
    for i in range(60):
        text = "".join(words[(i * 7 + k * 3) % len(words)] for k in range(1 + i % 13))
        secret = "secret-%d-%s" % (i, "x" * (i * 3 % 90))
        body = json.dumps(
            {"text": text, "level": ["P0", "P1", "NORMAL"][i % 3], "id": "m%d" % i}, ensure_ascii=bool(i % 2)
        ).encode()
        ts = str(NOW + i * 37)
        cases.append(
            {
                "name": "spread_%d" % i,
                "secret": secret,
                "timestamp": ts,
                "body": body.decode(),
                "signature": sig(secret, ts, body),
            }
        )
    return cases


KEYS = {RFC_KEY_ID: RFC_SECRET, "rot-2026-11": "second key for rotation"}


def req(
    body,
    now=NOW,
    ts=None,
    key_id=RFC_KEY_ID,
    secret=None,
    path="/api/v1/send_msg",
    method="POST",
    ctype="application/json",
    synced=True,
    drop=None,
    signature=None,
    extra_headers=None,
    signed_for=None,
):
    if isinstance(body, (dict, list)):
        body = json.dumps(body, ensure_ascii=False).encode()
    elif isinstance(body, str):
        body = body.encode()
    ts = str(now if ts is None else ts)
    secret = secret or KEYS.get(key_id, "unknown")
    headers = {
        "X-API-Key": key_id,
        "X-Timestamp": ts,
        "X-Signature": signature if signature is not None else sig(secret, ts, body, signed_for or path),
    }
    if ctype is not None:
        headers["Content-Type"] = ctype
    for d in drop or ():
        headers.pop(d, None)
    headers.update(extra_headers or {})
    step = {"method": method, "path": path, "headers": headers, "now": now, "synced": synced}
    try:
        step["body"] = body.decode()
    except UnicodeDecodeError:
        step["body_hex"] = body.hex()
    return step


def expect(step, status, error=None, **fields):
    step["status"] = status
    if error:
        step["error"] = error
    step.update(fields)
    return step


def one(name, step, **cfg):
    c = {"name": name, "steps": [step]}
    c.update(cfg)
    return c


P0 = {"text": "训练集群紧急预警", "color": "#FF0000", "light_mode": "flash", "audio_mode": "cycle", "repeat_times": 3}


def request_cases():
    cases = []
    # The RFC's gateway, byte for byte.
    for name, text, crit in RFC_TEXTS:
        s = req(rfc_body(text, crit))
        lvl = "P0" if crit else "P1"
        cases.append(
            one("rfc_" + name, expect(s, 200, kind="alarm", duplicate=False, alarm={"level": lvl, "text": text}))
        )
    cases.append(one("rotation_second_key", expect(req(P0, key_id="rot-2026-11"), 200, kind="alarm")))
    cases.append(
        one(
            "header_names_any_case",
            expect({**req(P0), "headers": {k.lower(): v for k, v in req(P0)["headers"].items()}}, 200, kind="alarm"),
        )
    )
    cases.append(one("content_type_with_charset", expect(req(P0, ctype="application/json; charset=utf-8"), 200)))
    # Presets and optional fields.
    cases.append(
        one(
            "normal_defaults",
            expect(
                req({"text": "训练集群已恢复正常", "level": "NORMAL"}),
                200,
                alarm={
                    "level": "NORMAL",
                    "color": "#00FF00",
                    "light_mode": "solid",
                    "duration": 10,
                    "audio_mode": "once",
                },
            ),
        )
    )
    cases.append(
        one(
            "text_only_is_p1",
            expect(req({"text": "hello"}), 200, alarm={"level": "P1", "color": "#FFA500", "light_mode": "breath"}),
        )
    )
    cases.append(one("explicit_level_wins", expect(req({**P0, "level": "P1"}), 200, alarm={"level": "P1"})))
    cases.append(
        one(
            "key_id_duration",
            expect(
                req({**P0, "key": "A03:gpu-worker-08:NCCL_TIMEOUT", "id": "m-1", "duration": 600}),
                200,
                alarm={"key": "A03:gpu-worker-08:NCCL_TIMEOUT", "id": "m-1", "duration": 600},
            ),
        )
    )
    cases.append(one("unknown_fields_ignored", expect(req({**P0, "future": {"x": [1, 2]}, "v": 2}), 200)))
    cases.append(one("lowercase_color", expect(req({**P0, "color": "#ff00aa"}), 200, alarm={"color": "#FF00AA"})))
    cases.append(one("text_max_bytes", expect(req({**P0, "text": "x" * 400}), 200)))
    cases.append(one("text_max_chinese", expect(req({**P0, "text": "警" * 133}), 200)))
    cases.append(
        one("ack", expect(req({"key": "A03"}, path="/api/v1/ack"), 200, kind="ack", ack={"key": "A03", "long": False}))
    )
    cases.append(
        one(
            "ack_long",
            expect(req({"long": True}, path="/api/v1/ack"), 200, kind="ack", ack={"key": None, "long": True}),
        )
    )
    cases.append(
        one(
            "heartbeat",
            expect(req({"interval": 30}, path="/api/v1/heartbeat"), 200, kind="heartbeat", heartbeat={"interval": 30}),
        )
    )
    cases.append(one("heartbeat_empty", expect(req({}, path="/api/v1/heartbeat"), 200, kind="heartbeat")))
    # 400: JSON.
    for n, b in [
        ("trailing_comma_obj", '{"text":"x",}'),
        ("trailing_comma_arr", '{"text":"x","a":[1,]}'),
        ("leading_zero", '{"text":"x","repeat_times":03}'),
        ("nan", '{"text":"x","repeat_times":NaN}'),
        ("infinity", '{"text":"x","duration":Infinity}'),
        ("single_quotes", "{'text':'x'}"),
        ("trailing_garbage", '{"text":"x"} y'),
        ("two_values", '{"text":"x"}{"text":"y"}'),
        ("truncated", '{"text":"x"'),
        ("empty", ""),
        ("bare_word", "hello"),
        ("lone_surrogate", '{"text":"\\ud83d"}'),
        ("control_char", '{"text":"a\tb"}'),
        ("bad_escape", '{"text":"\\x41"}'),
        ("deep", "[" * 20 + "]" * 20),
        ("comment", '{"text":"x"} // c'),
    ]:
        cases.append(one("json_" + n, expect(req(b), 400, "bad_json")))
    cases.append(one("not_utf8", expect(req(b'{"text":"\xff\xfe"}'), 400, "bad_encoding")))
    for n, raw in [
        ("overlong_utf8", b"\xc0\xaf"),
        ("encoded_surrogate", b"\xed\xa0\x80"),
        ("above_10ffff", b"\xf4\x90\x80\x80"),
        ("truncated_utf8", b"\xe4\xbd"),
        ("lone_continuation", b"\x80"),
        ("latin1", b"caf\xe9"),
    ]:
        cases.append(one(n, expect(req(b'{"text":"' + raw + b'"}'), 400, "bad_encoding")))
    for n, raw in [
        ("duplicate_key", '{"text":"a","text":"b"}'),
        ("duplicate_escaped", '{"text":"a","t\\u0065xt":"b"}'),
        ("duplicate_nested", '{"text":"a","x":{"k":1,"k":2}}'),
        ("duplicate_level", '{"text":"a","level":"P1","level":"P0"}'),
    ]:
        cases.append(one("json_" + n, expect(req(raw), 400, "bad_json")))
    cases.append(
        one("json_same_key_other_objects", expect(req('{"text":"a","x":{"text":1},"y":[{"k":1},{"k":2}]}'), 200))
    )
    cases.append(one("text_with_visible_and_marks", expect(req({**P0, "text": "\u200fשלום GPU\u200b 7"}), 200)))
    cases.append(one("text_emoji_zwj", expect(req({**P0, "text": "\U0001f468\u200d\U0001f4bb down"}), 200)))
    cases.append(one("utf8_4byte_ok", expect(req({"text": "GPU \U0001f525 down"}), 200)))
    cases.append(one("escaped_pair_refused", expect(req('{"text":"\\ud83d\\ude00"}'), 400, "bad_json")))
    # 422: schema.
    bad_fields = [
        ("not_object", [1, 2]),
        ("string_body", '"x"'),
        ("number_body", "42"),
        ("null_body", "null"),
        ("text_missing", {k: v for k, v in P0.items() if k != "text"}),
        ("text_empty", {**P0, "text": ""}),
        ("text_blank", {**P0, "text": "   "}),
        ("text_number", {**P0, "text": 5}),
        ("text_too_long", {**P0, "text": "x" * 401}),
        ("text_too_long_cjk", {**P0, "text": "警" * 134}),
        ("text_newline", {**P0, "text": "a\nb"}),
        ("color_name", {**P0, "color": "red"}),
        ("color_short", {**P0, "color": "#FFF"}),
        ("color_no_hash", {**P0, "color": "FF0000"}),
        ("color_bad_hex", {**P0, "color": "#GG0000"}),
        ("color_plus", {**P0, "color": "#+12345"}),
        ("color_0x", {**P0, "color": "#0x1234"}),
        ("color_number", {**P0, "color": 16711680}),
        ("light_unknown", {**P0, "light_mode": "strobe"}),
        ("audio_unknown", {**P0, "audio_mode": "loud"}),
        ("light_case", {**P0, "light_mode": "Flash"}),
        ("repeat_zero", {**P0, "repeat_times": 0}),
        ("repeat_big", {**P0, "repeat_times": 11}),
        ("repeat_float", {**P0, "repeat_times": 3.0}),
        ("repeat_bool", {**P0, "repeat_times": True}),
        ("repeat_string", {**P0, "repeat_times": "3"}),
        ("repeat_negative", {**P0, "repeat_times": -1}),
        ("repeat_huge", {**P0, "repeat_times": 10**30}),
        ("level_unknown", {**P0, "level": "P2"}),
        ("level_lower", {**P0, "level": "p0"}),
        ("level_number", {**P0, "level": 0}),
        ("key_empty", {**P0, "key": ""}),
        ("key_long", {**P0, "key": "k" * 65}),
        ("key_number", {**P0, "key": 7}),
        ("id_long", {**P0, "id": "i" * 65}),
        ("duration_zero", {**P0, "duration": 0}),
        ("duration_float", {**P0, "duration": 1.5}),
        ("duration_huge", {**P0, "duration": 10**9}),
    ]
    # Text that shows or says nothing, or rewrites what is shown: C0/C1 controls, bidi overrides, invisibles only.
    bad_fields += [
        ("text_nel", {**P0, "text": "GPU\u0085down"}),
        ("text_csi", {**P0, "text": "GPU \u009b31m down"}),
        ("text_del", {**P0, "text": "GPU\u007f"}),
        ("text_line_separator", {**P0, "text": "a\u2028b"}),
        ("text_rlo", {**P0, "text": "GPU \u202e7 UPG"}),
        ("text_lri", {**P0, "text": "\u2066x\u2069"}),
        ("text_zwsp_only", {**P0, "text": "\u200b\u200b"}),
        ("text_bom_only", {**P0, "text": "\ufeff"}),
        ("text_ideographic_spaces", {**P0, "text": "\u3000\u3000"}),
        ("text_nbsp_only", {**P0, "text": "\u00a0"}),
        ("text_hangul_filler", {**P0, "text": "\u3164"}),
        ("text_variation_selectors", {**P0, "text": " \ufe0f\u200d"}),
        ("key_rlo", {**P0, "key": "A03\u202e"}),
        ("id_c1", {**P0, "id": "m\u0090"}),
        ("key_zwsp", {**P0, "key": "\u200b"}),
    ]
    for n, b in bad_fields:
        cases.append(one("schema_" + n, expect(req(b), 422, "invalid_field")))
    cases.append(one("ack_bad_long", expect(req({"long": "yes"}, path="/api/v1/ack"), 422, "invalid_field")))
    for n, v in (("negative", -1), ("over_an_hour", 3601), ("float", 1.5), ("string", "60"), ("bool", True)):
        cases.append(
            one(
                "heartbeat_bad_interval_" + n,
                expect(req({"interval": v}, path="/api/v1/heartbeat"), 422, "invalid_field"),
            )
        )
    # 0 disarms the dead-man's switch (docs/PROTOCOL.md): the way out of NO HEARTBEAT.
    cases.append(
        one(
            "heartbeat_disarm",
            expect(req({"interval": 0}, path="/api/v1/heartbeat"), 200, kind="heartbeat", heartbeat={"interval": 0}),
        )
    )
    cases.append(one("unmute", expect(req({}, path="/api/v1/unmute"), 200, kind="unmute", unmute={"key": None})))
    cases.append(
        one(
            "unmute_one_incident",
            expect(
                req({"key": "A03", "id": "u-1"}, path="/api/v1/unmute"),
                200,
                kind="unmute",
                unmute={"key": "A03", "id": "u-1"},
            ),
        )
    )
    cases.append(one("unmute_bad_key", expect(req({"key": 3}, path="/api/v1/unmute"), 422, "invalid_field")))
    cases.append(one("unmute_get", expect(req({}, path="/api/v1/unmute", method="GET"), 405, "method_not_allowed")))
    # 401: authentication.
    for h in ("X-API-Key", "X-Timestamp", "X-Signature"):
        cases.append(one("missing_" + h.lower(), expect(req(P0, drop=[h]), 401, "missing_auth")))
    for n, ts in [
        ("negative", "-5"),
        ("float", "1787000000.5"),
        ("words", "now"),
        ("hex", "0x6a"),
        ("too_long", "1" * 13),
        ("empty_ts", ""),
    ]:
        s = req(P0, ts=ts)
        cases.append(one("timestamp_" + n, expect(s, 401, "missing_auth" if ts == "" else "bad_timestamp")))
    cases.append(one("unknown_key", expect(req(P0, key_id="intruder", secret="guess"), 401, "unknown_key")))
    cases.append(one("wrong_secret", expect(req(P0, secret="AI#TrainSecureHMACSecretKey2025"), 401, "bad_signature")))
    good = req(P0)
    cases.append(
        one(
            "uppercase_signature",
            expect(req(P0, signature=good["headers"]["X-Signature"].upper()), 401, "bad_signature"),
        )
    )
    cases.append(
        one("short_signature", expect(req(P0, signature=good["headers"]["X-Signature"][:63]), 401, "bad_signature"))
    )
    cases.append(
        one(
            "signature_of_other_body",
            expect({**req(P0), "body": json.dumps({**P0, "text": "forged"}, ensure_ascii=False)}, 401, "bad_signature"),
        )
    )
    cases.append(
        one(
            "signature_other_ts",
            expect({**req(P0), "headers": {**req(P0)["headers"], "X-Timestamp": str(NOW + 1)}}, 401, "bad_signature"),
        )
    )
    cases.append(one("stale_past", expect(req(P0, ts=NOW - 301), 401, "stale_timestamp")))
    cases.append(one("stale_future", expect(req(P0, ts=NOW + 301), 401, "stale_timestamp")))
    cases.append(one("window_edge_past", expect(req(P0, ts=NOW - 300), 200)))
    cases.append(one("window_edge_future", expect(req(P0, ts=NOW + 300), 200)))
    cases.append(one("window_configurable", expect(req(P0, ts=NOW - 31), 401, "stale_timestamp"), window=30))
    cases.append(one("device_epoch_2000_mistake", expect(req(P0, ts=NOW - 946684800), 401, "stale_timestamp")))
    # Endpoint binding (v1.1): a signature made for one endpoint is refused on every other, with its own code.
    eps = {
        "send_msg": (P0, "alarm"),
        "ack": ({"key": "A03", "id": "x-1"}, "ack"),
        "heartbeat": ({"interval": 30, "id": "x-2"}, "heartbeat"),
        "unmute": ({"id": "x-3"}, "unmute"),
    }
    for made in eps:
        for posted in eps:
            if made != posted:
                cases.append(
                    one(
                        "cross_%s_on_%s" % (made, posted),
                        expect(
                            req(eps[made][0], path="/api/v1/" + posted, signed_for="/api/v1/" + made),
                            401,
                            "wrong_endpoint",
                        ),
                    )
                )
    # The attack: the RFC's own P0, withheld and re-posted as an ACK (a 15-minute global mute) or heartbeat.
    for posted in ("ack", "heartbeat", "unmute"):
        cases.append(
            one(
                "rfc_p0_reposted_on_" + posted,
                expect(
                    req(rfc_body(RFC_TEXTS[0][1], True), path="/api/v1/" + posted, signed_for="/api/v1/send_msg"),
                    401,
                    "wrong_endpoint",
                ),
            )
        )
    cases.append(
        one(
            "ack_signed_for_unregistered_path",
            expect(req({"key": "A03"}, path="/api/v1/ack", signed_for="/api/v1/acknowledge"), 401, "bad_signature"),
        )
    )
    cases.append(
        one(
            "ack_signed_as_get",
            expect(
                {
                    **req({"key": "A03"}, path="/api/v1/ack"),
                    "headers": {
                        **req({"key": "A03"}, path="/api/v1/ack")["headers"],
                        "X-Signature": sig(RFC_SECRET, str(NOW), b'{"key": "A03"}', "/api/v1/ack", "GET"),
                    },
                },
                401,
                "bad_signature",
            ),
        )
    )
    # Strict ASCII timestamps: str.isdigit() says yes to all of these.
    for n, ts in [
        ("superscript_2", "\u00b2"),
        ("superscript_in_digits", "178700000\u00b9"),
        ("arabic_indic", "\u0661\u0667\u0668\u0667\u0660\u0660\u0660\u0660\u0660\u0660"),
        ("fullwidth", "\uff11\uff17\uff18\uff17\uff10\uff10\uff10\uff10\uff10\uff10"),
        ("nbsp_padded", "\u00a01787000000"),
        ("plus_sign", "+1787000000"),
        ("underscore", "1_787_000_000"),
        ("inner_space", "1787 000000"),
    ]:
        cases.append(one("timestamp_" + n, expect(req(P0, ts=ts), 401, "bad_timestamp")))
    # Strict ASCII for the other headers the core parses.
    for n, ct in [
        ("nbsp", "application/json\u00a0"),
        ("nbsp_before", "\u00a0application/json"),
        ("ideographic_space", "application/json\u3000"),
        ("nel", "application/json\u0085"),
        ("dotless_i", "appl\u0131cation/json"),
        ("nbsp_in_params", "application/json; charset=utf-8\u00a0"),
        ("json_suffix", "application/jsonx"),
        ("json_seq", "application/json-seq"),
        ("vertical_tab", "application/json\u000b"),
    ]:
        cases.append(one("content_type_" + n, expect(req(P0, ctype=ct), 415, "unsupported_media_type")))
    for n, ct in [
        ("upper", "APPLICATION/JSON"),
        ("ows", " \tapplication/json\t "),
        ("params_ows", "application/json ; charset=UTF-8"),
    ]:
        cases.append(one("content_type_ok_" + n, expect(req(P0, ctype=ct), 200)))
    for n, kid in [
        ("nbsp", "gpu_cluster_sentinel\u00a0"),
        ("nul", "gpu_cluster_sentinel\u0000"),
        ("fullwidth", "\uff47pu_cluster_sentinel"),
        ("space_inside", "gpu cluster"),
    ]:
        cases.append(one("key_id_" + n, expect(req(P0, key_id=kid, secret=RFC_SECRET), 401, "unknown_key")))
    cases.append(
        one(
            "signature_fullwidth_digit",
            expect(req(P0, signature="\uff10" + req(P0)["headers"]["X-Signature"][1:]), 401, "bad_signature"),
        )
    )
    cases.append(
        one(
            "timestamp_ows_padded",
            expect({**req(P0), "headers": {**req(P0)["headers"], "X-Timestamp": " \t%d " % NOW}}, 200),
        )
    )
    # Status codes of the HTTP shape.
    cases.append(one("too_large", expect(req({**P0, "pad": "x" * 2100}), 413, "too_large")))
    cases.append(one("too_large_checked_first", expect(req("x" * 3000, drop=["X-Signature"]), 413, "too_large")))
    cases.append(one("get", expect(req(P0, method="GET"), 405, "method_not_allowed")))
    cases.append(one("put", expect(req(P0, method="PUT"), 405, "method_not_allowed")))
    cases.append(one("no_content_type", expect(req(P0, ctype=None), 415, "unsupported_media_type")))
    cases.append(
        one(
            "form_content_type",
            expect(req(P0, ctype="application/x-www-form-urlencoded"), 415, "unsupported_media_type"),
        )
    )
    cases.append(one("text_plain", expect(req(P0, ctype="text/plain"), 415, "unsupported_media_type")))
    cases.append(one("unknown_path", expect(req(P0, path="/api/v2/send_msg"), 404, "not_found")))
    cases.append(one("path_traversal", expect(req(P0, path="/api/v1/../v1/send_msg"), 404, "not_found")))
    # Replay and idempotency: several steps on one terminal.
    a = req(P0)
    cases.append(
        {
            "name": "replay_exact_is_duplicate",
            "steps": [
                expect(dict(a), 200, duplicate=False),
                expect({**a, "now": NOW + 100}, 200, duplicate=True),
                expect({**a, "now": NOW + 301}, 401, "stale_timestamp"),
            ],
        }
    )
    m1 = {**P0, "id": "retry-1"}
    cases.append(
        {
            "name": "retry_same_id_new_timestamp",
            "steps": [
                expect(req(m1), 200, duplicate=False),
                expect(req(m1, ts=NOW + 2, now=NOW + 2), 200, duplicate=True),
                expect(req({**m1, "id": "retry-2"}, ts=NOW + 3, now=NOW + 3), 200, duplicate=False),
            ],
        }
    )
    cases.append(
        {
            "name": "same_id_other_key_is_new",
            "steps": [
                expect(req(m1), 200, duplicate=False),
                expect(req(m1, key_id="rot-2026-11", ts=NOW + 1), 200, duplicate=False),
            ],
        }
    )
    # Capacity 2: the third accepted request pushes the oldest out, and its timestamp becomes the floor.
    r1, r2, r3 = req({**P0, "id": "a"}, ts=NOW), req({**P0, "id": "b"}, ts=NOW + 1), req({**P0, "id": "c"}, ts=NOW + 2)
    cases.append(
        {
            "name": "evicted_never_replays",
            "capacity": 2,
            "steps": [
                expect(r1, 200, duplicate=False),
                expect(r2, 200, duplicate=False),
                expect(r3, 200, duplicate=False),
                expect({**r1, "now": NOW + 3}, 401, "stale_timestamp"),
                expect({**r3, "now": NOW + 3}, 200, duplicate=True),
            ],
        }
    )
    # Unsynced clock: the device reads 2000-01-01 + uptime; the first authenticated request sets the reference.
    boot = 946684800 + 42
    u1 = req(P0, ts=NOW, now=boot, synced=False)
    u2 = req({**P0, "text": "second"}, ts=NOW + 60, now=boot + 60, synced=False)
    u3 = req({**P0, "text": "late"}, ts=NOW - 400, now=boot + 61, synced=False)
    cases.append(
        {
            "name": "unsynced_adopts_sender_clock",
            "steps": [
                expect(u1, 200, duplicate=False),
                expect({**u1, "now": boot + 5}, 200, duplicate=True),
                expect(u2, 200, duplicate=False),
                expect(u3, 401, "stale_timestamp"),
            ],
        }
    )
    cases.append(
        {
            "name": "restored_floor_refuses_old",
            "restore": {"replay_floor": NOW + 10},
            "steps": [
                expect(req(P0, ts=NOW + 10, now=NOW + 12), 401, "stale_timestamp"),
                expect(req(P0, ts=NOW + 11, now=NOW + 12), 200),
            ],
        }
    )
    cases.append(
        {
            "name": "refusal_leaves_memory_intact",
            "steps": [expect(req(P0, signature="0" * 64), 401, "bad_signature"), expect(req(P0), 200, duplicate=False)],
        }
    )
    return cases


def main():
    for name, cases in (("signing.json", signing_cases()), ("requests.json", request_cases())):
        with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
            json.dump(
                {"generated_by": "tests/vectors/make_protocol_vectors.py", "keys": KEYS, "now": NOW, "cases": cases},
                f,
                ensure_ascii=False,
                indent=1,
            )
            f.write("\n")
        print(name, len(cases))


if __name__ == "__main__":
    main()
