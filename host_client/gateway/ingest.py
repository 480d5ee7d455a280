"""The ingest endpoints' body rules, shared by both HTTP fronts (server.py, app.py): strict JSON, bounded depth, no
text that cannot be encoded. A body that breaks one is refused before anything changes (docs/GATEWAY.md)."""

from __future__ import annotations

import json
import re

from host_client.errors import SentinelError

MAX_DEPTH = 32  # a probe event is depth 1, a batch 2, an Alertmanager notification 3
# \uD800-\uDFFF escapes: the only way JSON text can carry a lone surrogate (raw UTF-8 cannot encode one)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abAB]|\\u[dD][c-fC-F]")


def _no_constant(name):
    raise ValueError("%s is not JSON (RFC 8259 has no NaN or Infinity)" % name)


_DECODER = json.JSONDecoder(parse_constant=_no_constant)
# the C scanner JSONDecoder.decode wraps in two regex matches and a frame (set in __init__: typeshed omits it)
_SCAN = _DECODER.scan_once  # pyright: ignore[reportAttributeAccessIssue]


class BodyError(SentinelError, ValueError):
    """A request body the gateway cannot read (status 400 or 422, code machine-readable)."""

    def __init__(self, status, code, message):
        super().__init__(message)
        self.status = status
        self.code = code


def _depth_ok(obj, limit):
    """True when no array/object nests deeper than limit (iterative: a hostile body cannot recurse us)."""
    stack = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if d > limit:
            return False
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values() if isinstance(v, (dict, list)))
        elif isinstance(o, list):
            stack.extend((v, d + 1) for v in o if isinstance(v, (dict, list)))
    return True


def _lone_surrogate(obj):
    """The path of the first string (key or value) holding a lone UTF-16 surrogate, or None."""
    stack = [(obj, "body")]
    while stack:
        o, where = stack.pop()
        if isinstance(o, str):
            try:
                o.encode("utf-8")
            except UnicodeEncodeError:
                return where
        elif isinstance(o, dict):
            for k, v in o.items():
                try:
                    k.encode("utf-8")
                except UnicodeEncodeError:
                    return where + " (a key)"
                stack.append((v, "%s.%s" % (where, k) if where != "body" else k))
        elif isinstance(o, list):
            stack.extend((v, "%s[%d]" % (where, i)) for i, v in enumerate(o))
    return None


def decode_body(raw: bytes):
    """The ingest endpoints' JSON, strictly: UTF-8, no NaN/Infinity, nesting at most MAX_DEPTH, and no lone
    surrogate in any string (text that no terminal, log or queue file could encode). Raises BodyError."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BodyError(400, "bad_encoding", "body is not valid UTF-8") from None
    try:
        # The common body, an object or array with nothing around it, straight through the C scanner; anything
        # else (leading or trailing space, an error) goes through decode(), which gives the precise message.
        obj = None
        if text[:1] in ("{", "["):
            try:
                obj, end = _SCAN(text, 0)
            except StopIteration:
                end = -1
            if end != len(text):
                obj = None
        if obj is None:
            obj = _DECODER.decode(text)
    except RecursionError:
        raise BodyError(400, "too_deep", "JSON nested deeper than %d levels" % MAX_DEPTH) from None
    except ValueError as e:
        raise BodyError(400, "bad_json", "malformed JSON: %s" % e) from None
    # A storm's bodies are flat: the walks run only when the raw text could break a rule. Searches of the decoded
    # text decide first (the bytes "[", "{" and "\\" are those characters and nothing else in UTF-8): with no "[" and
    # no "{" past the first character there is at most one opener, and with no backslash there is no escape (cheaper
    # than counting both openers and searching the bytes for "\\u"; docs/PERFORMANCE.md).
    if (
        ("[" in text or "{" in text[1:])
        and raw.count(b"[") + raw.count(b"{") > MAX_DEPTH
        and not _depth_ok(obj, MAX_DEPTH)
    ):
        raise BodyError(400, "too_deep", "JSON nested deeper than %d levels" % MAX_DEPTH)
    if "\\" in text and _SURROGATE_ESCAPE.search(raw):
        where = _lone_surrogate(obj)
        if where is not None:
            raise BodyError(
                422,
                "bad_text",
                "%s holds a lone UTF-16 surrogate escape (\\uD800-\\uDFFF without its "
                "pair): not encodable text" % where,
            )
    return obj
