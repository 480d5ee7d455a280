"""Regenerates hostile.json: the hostile corpus both shells (the emulator and the board's own server) must answer
alike, replayed over real TCP by tests/hostile.py. Run: .venv/bin/python tests/vectors/make_hostile_corpus.py

File format (documented in docs/PROTOCOL.md, "Hostile corpus"):
  cases[]: name, why, head, body, expect {status, error}; optional sign_for, sign_body, ts_offset
  head and body are text; the bytes sent are each one's characters U+0000..U+00FF as single bytes (latin-1), so
  "\\u00b2" is the byte 0xB2 and UTF-8 is written out byte by byte ("\\u00c2\\u00b2" is U+00B2 in UTF-8).
  Placeholders, filled in by the replayer for the terminal under test: {key} its key id, {ts} the current Unix
  time plus ts_offset, {len} the body's length in bytes, {sig} the signature of the body and {ts} made with the
  terminal's secret for sign_for ("METHOD /path", default: the request line's method and path), by the v1 rule
  for /api/v1/send_msg and v1.1 for any other path, over sign_body when given (a body changed after signing).
  The replayer sends head + body, half-closes its side and reads the answer until the terminal closes.
  expect.error is null when the answer has no body to read (HEAD) or the status is 200.
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))

RFC_P0 = (
    '{"text":"训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁，全环算力挂起","color":"#FF0000",'
    '"light_mode":"flash","audio_mode":"cycle","repeat_times":3}'
)
ACK = '{"long":false,"id":"corpus-ack"}'
HB = '{"id":"corpus-hb"}'
UNMUTE = '{"id":"corpus-unmute"}'


def latin(s):
    """UTF-8 text as the file's one-character-per-byte form."""
    return s.encode("utf-8").decode("latin-1")


def head(
    line="POST /api/v1/send_msg HTTP/1.1",
    ctype="application/json",
    key="{key}",
    ts="{ts}",
    sig="{sig}",
    length="{len}",
    extra=(),
    eol="\r\n",
):
    lines = [line, "Host: terminal"]
    if ctype is not None:
        lines.append("Content-Type: " + ctype)
    if key is not None:
        lines.append("X-API-Key: " + key)
    if ts is not None:
        lines.append("X-Timestamp: " + ts)
    if sig is not None:
        lines.append("X-Signature: " + sig)
    if length is not None:
        lines.append("Content-Length: " + length)
    lines.extend(extra)
    return eol.join(lines) + eol + eol


CASES = []


def case(name, why, status, error, h, body="", **kw):
    c = {"name": name, "why": why, "head": h, "body": body, "expect": {"status": status, "error": error}}
    c.update(kw)
    CASES.append(c)


def body_of(obj):
    return latin(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))


def build():
    p0 = latin(RFC_P0)
    # -- accepted: the RFC's gateway byte for byte, the v1.1 endpoints, the tolerated spellings -------------------
    case("rfc_p0", "the RFC's P0 request, v1 signing", 200, None, head(), p0)
    case("ack_v1_1", "an ACK signed for its own endpoint (v1.1)", 200, None, head("POST /api/v1/ack HTTP/1.1"), ACK)
    case(
        "heartbeat_v1_1",
        "a heartbeat signed for its own endpoint",
        200,
        None,
        head("POST /api/v1/heartbeat HTTP/1.1"),
        HB,
    )
    case(
        "unmute_v1_1", "an unmute signed for its own endpoint", 200, None, head("POST /api/v1/unmute HTTP/1.1"), UNMUTE
    )
    case(
        "http_1_0",
        "HTTP/1.0 is served the same",
        200,
        None,
        head("POST /api/v1/send_msg HTTP/1.0"),
        body_of({"text": "HTTP/1.0 sender", "level": "P1", "id": "c-10"}),
    )
    case(
        "bare_lf",
        "LF alone ends a line (RFC 9112 allows it)",
        200,
        None,
        head(eol="\n"),
        body_of({"text": "bare LF", "level": "P1", "id": "c-lf"}),
    )
    case(
        "query_ignored",
        "a query string is not part of the path",
        200,
        None,
        head(
            "POST /api/v1/send_msg?from=corpus HTTP/1.1",
        ),
        body_of({"text": "query", "level": "P1", "id": "c-q"}),
        sign_for="POST /api/v1/send_msg",
    )
    case(
        "content_type_charset",
        "parameters after ; are allowed",
        200,
        None,
        head(ctype="application/json; charset=utf-8"),
        body_of({"text": "charset", "level": "P1", "id": "c-cs"}),
    )
    case(
        "content_type_upper",
        "media type in any ASCII case",
        200,
        None,
        head(ctype="APPLICATION/JSON"),
        body_of({"text": "upper", "level": "P1", "id": "c-up"}),
    )
    case("status_get", "the unsigned status page", 200, None, "GET /api/v1/status HTTP/1.1\r\nHost: t\r\n\r\n")
    case("status_head", "HEAD: the status line only", 200, None, "HEAD /api/v1/status HTTP/1.1\r\nHost: t\r\n\r\n")
    # -- endpoint binding: a signature made for one endpoint refused on every other --------------------------------
    case(
        "rfc_p0_on_ack",
        "the issue's attack: a withheld P0 re-posted as an ACK (a 15-minute mute)",
        401,
        "wrong_endpoint",
        head("POST /api/v1/ack HTTP/1.1"),
        p0,
        sign_for="POST /api/v1/send_msg",
    )
    case(
        "rfc_p0_on_heartbeat",
        "a withheld P0 re-posted as a heartbeat",
        401,
        "wrong_endpoint",
        head("POST /api/v1/heartbeat HTTP/1.1"),
        p0,
        sign_for="POST /api/v1/send_msg",
    )
    case(
        "rfc_p0_on_unmute",
        "a withheld P0 re-posted as an unmute",
        401,
        "wrong_endpoint",
        head("POST /api/v1/unmute HTTP/1.1"),
        p0,
        sign_for="POST /api/v1/send_msg",
    )
    for made, body in (("ack", ACK), ("heartbeat", HB), ("unmute", UNMUTE)):
        for posted in ("send_msg", "ack", "heartbeat", "unmute"):
            if posted != made:
                case(
                    "%s_on_%s" % (made, posted),
                    "a %s's signature on /api/v1/%s" % (made, posted),
                    401,
                    "wrong_endpoint",
                    head("POST /api/v1/%s HTTP/1.1" % posted),
                    body,
                    sign_for="POST /api/v1/" + made,
                )
    case(
        "ack_signed_as_get",
        "the method is part of what is signed",
        401,
        "bad_signature",
        head("POST /api/v1/ack HTTP/1.1"),
        ACK,
        sign_for="GET /api/v1/ack",
    )
    # -- timestamps: ASCII digits only -------------------------------------------------------------------------
    case(
        "ts_superscript_byte",
        "0xB2 (superscript two in Latin-1): isdigit() yes, int() no; once a 500",
        400,
        "bad_request",
        head(ts="\u00b2"),
        p0,
    )
    case("ts_superscript_utf8", "U+00B2 as UTF-8", 400, "bad_request", head(ts=latin("\u00b2")), p0)
    case(
        "ts_superscript_in_digits",
        "1787000000 with its last digit superscript",
        400,
        "bad_request",
        head(ts="178700000" + latin("\u00b9")),
        p0,
    )
    case(
        "ts_arabic_indic",
        "Arabic-Indic digits, which CPython's int() reads",
        400,
        "bad_request",
        head(ts=latin("\u0661\u0667\u0668\u0667\u0660\u0660\u0660\u0660\u0660\u0660")),
        p0,
    )
    case(
        "ts_fullwidth",
        "full-width digits",
        400,
        "bad_request",
        head(ts=latin("\uff11\uff17\uff18\uff17\uff10\uff10\uff10\uff10\uff10\uff10")),
        p0,
    )
    case("ts_plus", "a sign is not a digit", 401, "bad_timestamp", head(ts="+{ts}"), p0)
    case("ts_13_digits", "more than 12 digits", 401, "bad_timestamp", head(ts="1{ts}000"), p0)
    case("ts_words", "not a number", 401, "bad_timestamp", head(ts="now"), p0)
    case("ts_float", "seconds are whole", 401, "bad_timestamp", head(ts="{ts}.5"), p0)
    case("ts_stale", "400 s old", 401, "stale_timestamp", head(), p0, ts_offset=-400)
    case("ts_future", "400 s ahead", 401, "stale_timestamp", head(), p0, ts_offset=400)
    # -- media type: compared as ASCII after SP/HTAB only ------------------------------------------------------------
    case(
        "ctype_nbsp_byte",
        "application/json then byte 0xA0 (Latin-1 no-break space)",
        400,
        "bad_request",
        head(ctype="application/json\u00a0"),
        p0,
    )
    case(
        "ctype_nbsp_utf8",
        "application/json then U+00A0 in UTF-8 (str.strip() would take it)",
        400,
        "bad_request",
        head(ctype="application/json" + latin("\u00a0")),
        p0,
    )
    case("ctype_text_plain", "not JSON", 415, "unsupported_media_type", head(ctype="text/plain"), p0)
    case("ctype_missing", "no Content-Type", 415, "unsupported_media_type", head(ctype=None), p0)
    case("ctype_suffix", "application/jsonx", 415, "unsupported_media_type", head(ctype="application/jsonx"), p0)
    case("ctype_form", "a form", 415, "unsupported_media_type", head(ctype="application/x-www-form-urlencoded"), p0)
    # -- paths and methods, routed as sent ---------------------------------------------------------------------------
    case(
        "post_status",
        "the box said 405, the emulator 404",
        405,
        "method_not_allowed",
        head("POST /api/v1/status HTTP/1.1"),
        p0,
    )
    case(
        "put_metrics",
        "the metrics page is GET only",
        405,
        "method_not_allowed",
        "PUT /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
    )
    case(
        "options_status",
        "no automatic OPTIONS answer",
        405,
        "method_not_allowed",
        "OPTIONS /api/v1/status HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    case(
        "options_send_msg",
        "no automatic OPTIONS answer",
        405,
        "method_not_allowed",
        "OPTIONS /api/v1/send_msg HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    case(
        "get_send_msg",
        "signed endpoints are POST",
        405,
        "method_not_allowed",
        "GET /api/v1/send_msg HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    case("put_ack", "signed endpoints are POST", 405, "method_not_allowed", head("PUT /api/v1/ack HTTP/1.1"), ACK)
    case(
        "delete_heartbeat",
        "signed endpoints are POST",
        405,
        "method_not_allowed",
        "DELETE /api/v1/heartbeat HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    case(
        "unknown_method", "a method no route has", 405, "method_not_allowed", head("FOO /api/v1/send_msg HTTP/1.1"), p0
    )
    case(
        "lowercase_method",
        "methods are case-sensitive (werkzeug upper-cases, microdot routes it)",
        400,
        "bad_request",
        head("post /api/v1/send_msg HTTP/1.1"),
        p0,
    )
    case(
        "double_slash_inside",
        "werkzeug merged slashes and answered 308",
        404,
        "not_found",
        head("POST /api/v1//send_msg HTTP/1.1"),
        p0,
        sign_for="POST /api/v1/send_msg",
    )
    case(
        "double_slash_leading",
        "werkzeug strips leading slashes",
        404,
        "not_found",
        head("POST //api/v1/send_msg HTTP/1.1"),
        p0,
        sign_for="POST /api/v1/send_msg",
    )
    case(
        "percent_encoded",
        "paths are not decoded",
        404,
        "not_found",
        head("POST /api/v1/send%5Fmsg HTTP/1.1"),
        p0,
        sign_for="POST /api/v1/send_msg",
    )
    case(
        "dot_segments",
        "no dot-segment resolution",
        404,
        "not_found",
        head("POST /api/v1/../v1/send_msg HTTP/1.1"),
        p0,
        sign_for="POST /api/v1/send_msg",
    )
    case(
        "trailing_slash",
        "no trailing-slash redirect",
        404,
        "not_found",
        head("POST /api/v1/send_msg/ HTTP/1.1"),
        p0,
        sign_for="POST /api/v1/send_msg",
    )
    case("v2_path", "no such endpoint", 404, "not_found", head("POST /api/v2/send_msg HTTP/1.1"), p0)
    case("unknown_page", "no such page", 404, "not_found", "GET /nothing-here HTTP/1.1\r\nHost: t\r\n\r\n")
    # -- framing: Content-Length only, one strict grammar -----------------------------------------------------------
    case(
        "chunked",
        "bodies are framed by Content-Length only (waitress decoded chunks)",
        411,
        "length_required",
        head(length=None, extra=["Transfer-Encoding: chunked"]),
        "%x\r\n%s\r\n0\r\n\r\n" % (len(p0), p0),
    )
    case(
        "unknown_coding",
        "waitress answered 501",
        411,
        "length_required",
        head(length=None, extra=["Transfer-Encoding: gzip, chunked"]),
        "",
    )
    case("too_large", "Content-Length over 2048 is refused unread", 413, "too_large", head(), "x" * 3000)
    case("cl_plus", "Content-Length: +N (int() takes it)", 400, "bad_request", head(length="+{len}"), p0)
    case("cl_negative", "Content-Length: -1 hung the box", 400, "bad_request", head(length="-1"), p0)
    case(
        "cl_underscore",
        "Content-Length: 1_0 (CPython's int() takes it)",
        400,
        "bad_request",
        head(length="1_0"),
        "0123456789",
    )
    case("cl_arabic", "an Arabic-Indic digit", 400, "bad_request", head(length=latin("\u0665")), "12345")
    case("cl_twice", "two Content-Lengths", 400, "bad_request", head(extra=["Content-Length: 5"]), p0)
    case("cl_short_body", "the client ends the connection inside the body", 400, "bad_request", head(length="500"), p0)
    case("header_twice", "a header given twice", 400, "bad_request", head(extra=["X-Signature: {sig}"]), p0)
    case("header_no_colon", "a header line without a colon", 400, "bad_request", head(extra=["Broken header"]), p0)
    case(
        "header_space_before_colon",
        "RFC 9112: a space before the colon is refused",
        400,
        "bad_request",
        head(extra=["X-Extra : 1"]),
        p0,
    )
    case("obs_fold", "a folded header line", 400, "bad_request", head(extra=[" continued"]), p0)
    case("header_nul", "a NUL in a value", 400, "bad_request", head(extra=["X-Extra: a\u0000b"]), p0)
    case("header_del", "DEL in a value", 400, "bad_request", head(extra=["X-Extra: a\u007fb"]), p0)
    case(
        "header_utf8_elsewhere",
        "UTF-8 in a header the core does not read",
        400,
        "bad_request",
        head(extra=["User-Agent: " + latin("gpu-节点")]),
        p0,
    )
    case(
        "header_too_long", "a header line over 2048 bytes", 400, "bad_request", head(extra=["X-Pad: " + "p" * 3000]), p0
    )
    case("too_many_headers", "33 headers", 400, "bad_request", head(extra=["X-H%d: x" % i for i in range(27)]), p0)
    case("request_line_garbage", "not HTTP", 400, "bad_request", "HELLO\r\n\r\n")
    case(
        "request_line_two_spaces",
        "two spaces between method and target",
        400,
        "bad_request",
        "GET  /api/v1/status HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    case("request_line_no_version", "HTTP/0.9 style", 400, "bad_request", "GET /api/v1/status\r\n\r\n")
    case("http2_preface", "an HTTP/2 client", 400, "bad_request", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    case(
        "absolute_form",
        "a proxy's absolute target: RFC 9112 3.2.2 says a server accepts it (served as its path)",
        200,
        None,
        "GET http://t/api/v1/status HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    case(
        "absolute_form_other_scheme",
        "only http and https name this server",
        400,
        "bad_request",
        "GET ftp://t/api/v1/status HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    case(
        "no_host",
        "RFC 9112 3.2: an HTTP/1.1 request carries exactly one Host",
        400,
        "bad_request",
        "GET /api/v1/status HTTP/1.1\r\n\r\n",
    )
    case(
        "two_hosts",
        "RFC 9112 3.2: exactly one Host",
        400,
        "bad_request",
        "GET /api/v1/status HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    )
    case("no_host_http_1_0", "HTTP/1.0 has no Host rule", 200, None, "GET /api/v1/status HTTP/1.0\r\n\r\n")
    case("target_utf8", "a non-ASCII target", 400, "bad_request", "GET /api/v1/" + latin("状态") + " HTTP/1.1\r\n\r\n")
    case("empty_request", "the client connects and closes", 400, "bad_request", "")
    case("cut_in_head", "the client closes inside the head", 400, "bad_request", "POST /api/v1/send_msg HTTP/1.1\r\nHo")
    # -- authentication ----------------------------------------------------------------------------------------
    case("missing_key", "no X-API-Key", 401, "missing_auth", head(key=None), p0)
    case("missing_ts", "no X-Timestamp", 401, "missing_auth", head(ts=None), p0)
    case("missing_sig", "no X-Signature", 401, "missing_auth", head(sig=None), p0)
    case("empty_key", "an empty X-API-Key", 401, "missing_auth", head(key=""), p0)
    case("unknown_key", "a key id the terminal does not hold", 401, "unknown_key", head(key="intruder"), p0)
    case("key_with_space", "a key id outside its grammar", 401, "unknown_key", head(key="gpu cluster"), p0)
    case("wrong_signature", "64 hex digits that are not the MAC", 401, "bad_signature", head(sig="0" * 64), p0)
    case("uppercase_signature", "upper-case hex", 401, "bad_signature", head(sig="ABCDEF" + "0" * 58), p0)
    case("short_signature", "63 hex digits", 401, "bad_signature", head(sig="0" * 63), p0)
    case(
        "signature_of_other_body",
        "the body changed after signing",
        401,
        "bad_signature",
        head(),
        p0,
        sign_body=latin(RFC_P0.replace("A03", "A04")),
    )
    # -- the body: JSON grammar, encoding, schema, text rules (signed, so they reach the core's parser) --------
    for n, raw, st, code in [
        ("json_duplicate_key", '{"text":"a","text":"b"}', 400, "bad_json"),
        ("json_duplicate_escaped", '{"text":"a","t\\u0065xt":"b"}', 400, "bad_json"),
        ("json_trailing_comma", '{"text":"x",}', 400, "bad_json"),
        ("json_nan", '{"text":"x","repeat_times":NaN}', 400, "bad_json"),
        ("json_leading_zero", '{"text":"x","repeat_times":03}', 400, "bad_json"),
        ("json_escaped_surrogates", '{"text":"\\ud83d\\ude00"}', 400, "bad_json"),
        ("json_deep", "[" * 20 + "]" * 20, 400, "bad_json"),
        ("json_empty", "", 400, "bad_json"),
        ("not_utf8", '{"text":"\u00ff\u00fe"}', 400, "bad_encoding"),
        ("overlong_utf8", '{"text":"\u00c0\u00af"}', 400, "bad_encoding"),
        ("encoded_surrogate", '{"text":"\u00ed\u00a0\u0080"}', 400, "bad_encoding"),
        ("schema_array", "[1,2]", 422, "invalid_field"),
        ("schema_repeat_float", '{"text":"x","repeat_times":3.0}', 422, "invalid_field"),
        ("schema_color_name", '{"text":"x","color":"red"}', 422, "invalid_field"),
        ("schema_level_lower", '{"text":"x","level":"p0"}', 422, "invalid_field"),
        ("schema_text_missing", '{"color":"#FF0000"}', 422, "invalid_field"),
        ("text_c1_nel", body_of({"text": "GPU\u0085down"}), 422, "invalid_field"),
        ("text_c1_csi", body_of({"text": "GPU \u009b31m down"}), 422, "invalid_field"),
        ("text_only_zwsp", body_of({"text": "\u200b\u200b"}), 422, "invalid_field"),
        ("text_only_bom", body_of({"text": "\ufeff"}), 422, "invalid_field"),
        ("text_bidi_override", body_of({"text": "GPU \u202e7 UPG"}), 422, "invalid_field"),
        ("text_ideographic_spaces", body_of({"text": "\u3000\u3000"}), 422, "invalid_field"),
        ("text_newline", body_of({"text": "a\nb"}), 422, "invalid_field"),
    ]:
        case(n, "a signed body the core refuses", st, code, head(), raw)
    case(
        "ack_bad_long",
        "an ACK whose long is not a boolean",
        422,
        "invalid_field",
        head("POST /api/v1/ack HTTP/1.1"),
        '{"long":"yes"}',
    )
    case(
        "heartbeat_bad_interval",
        "a negative heartbeat interval",
        422,
        "invalid_field",
        head("POST /api/v1/heartbeat HTTP/1.1"),
        '{"interval":-5}',
    )
    return CASES


def main():
    cases = build()
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    with open(os.path.join(HERE, "hostile.json"), "w", encoding="utf-8") as f:
        json.dump(
            {
                "generated_by": "tests/vectors/make_hostile_corpus.py",
                "format": __doc__.split("File format")[1].split("\n", 1)[1].rstrip(),
                "cases": cases,
            },
            f,
            ensure_ascii=False,
            indent=1,
        )
        f.write("\n")
    print("hostile.json", len(cases))


if __name__ == "__main__":
    main()
