# One JSON grammar for both interpreters. MicroPython's json.loads accepts trailing commas and leading zeros
# that CPython refuses; CPython accepts NaN and Infinity. A body passes this RFC 8259 check first, so both
# interpreters accept exactly the same bodies. It walks the bytes by index and allocates nothing per byte.
import json

from sentinel_core.compat import const

_MAX_DEPTH = const(8)


def loads(body):
    """bytes -> value. Raises UnicodeError for bad UTF-8 (checked first on purpose: it is its own refusal),
    else ValueError with the byte offset of the first fault."""
    n = len(body)
    i = _value(body, _ws(body, 0, n), n, 0)
    i = _ws(body, i, n)
    if i != n:
        raise ValueError("unexpected data after the JSON value at byte %d" % i)
    return json.loads(body.decode("utf-8"))


def _ws(b, i, n):
    while i < n and b[i] in (32, 9, 10, 13):
        i += 1
    return i


def _fail(what, i):
    raise ValueError("%s at byte %d" % (what, i))


def _value(b, i, n, depth):
    if i >= n:
        _fail("unexpected end of JSON", i)
    c = b[i]
    if c == 123:  # {
        return _object(b, i, n, depth + 1)
    if c == 91:  # [
        return _array(b, i, n, depth + 1)
    if c == 34:  # "
        return _string(b, i, n)
    if c == 45 or 48 <= c <= 57:
        return _number(b, i, n)
    for lit in (b"true", b"false", b"null"):
        if b[i : i + len(lit)] == lit:
            return i + len(lit)
    _fail("unexpected character", i)


def _object(b, i, n, depth):
    if depth > _MAX_DEPTH:
        _fail("nesting too deep", i)
    i = _ws(b, i + 1, n)
    if i < n and b[i] == 125:
        return i + 1
    keys = []  # this object's keys so far, as UTF-8 bytes: a repeated one is refused (json.loads keeps the last)
    while True:
        if i < n and b[i] == 125:
            _fail("trailing comma", i)
        if i >= n or b[i] != 34:
            _fail("expected a string key", i)
        start = i
        i = _string(b, i, n)
        key = _key(b, start, i)
        if key in keys:
            _fail("duplicate key", start)
        keys.append(key)
        i = _ws(b, i, n)
        if i >= n or b[i] != 58:
            _fail("expected ':'", i)
        i = _ws(b, _value(b, _ws(b, i + 1, n), n, depth), n)
        if i < n and b[i] == 44:
            i = _ws(b, i + 1, n)
            continue
        if i < n and b[i] == 125:
            return i + 1
        _fail("expected ',' or '}'", i)


def _key(b, start, end):
    """The key whose quoted form is b[start:end], as UTF-8 bytes: escapes decoded, so "t\\u0065xt" is "text"."""
    raw = b[start + 1 : end - 1]
    if 92 not in raw:
        return raw
    return json.loads(b[start:end].decode("utf-8")).encode("utf-8")


def _array(b, i, n, depth):
    if depth > _MAX_DEPTH:
        _fail("nesting too deep", i)
    i = _ws(b, i + 1, n)
    if i < n and b[i] == 93:
        return i + 1
    while True:
        if i < n and b[i] == 93:
            _fail("trailing comma", i)
        i = _ws(b, _value(b, i, n, depth), n)
        if i < n and b[i] == 44:
            i = _ws(b, i + 1, n)
            continue
        if i < n and b[i] == 93:
            return i + 1
        _fail("expected ',' or ']'", i)


def _hex4(b, i, n):
    if i + 4 > n:
        _fail("short \\u escape", i)
    v = 0
    for k in range(i, i + 4):
        c = b[k]
        if 48 <= c <= 57:
            d = c - 48
        elif 97 <= c <= 102:
            d = c - 87
        elif 65 <= c <= 70:
            d = c - 55
        else:
            _fail("bad \\u escape", k)
        v = (v << 4) | d
    return v


def _string(b, i, n):
    i += 1
    while i < n:
        c = b[i]
        if c == 34:
            return i + 1
        if c < 32:
            _fail("control character in string", i)
        if c >= 128:
            i = _utf8(b, i, n)
            continue
        if c == 92:  # backslash
            if i + 1 >= n:
                break
            e = b[i + 1]
            if e == 117:
                # MicroPython decodes an escaped surrogate pair as two lone surrogates, CPython as one character:
                # refused, so both agree. Characters above U+FFFF travel as plain UTF-8.
                if 0xD800 <= _hex4(b, i + 2, n) <= 0xDFFF:
                    _fail("surrogate \\u escape (send characters above U+FFFF as UTF-8)", i)
                i += 6
                continue
            if e not in (34, 92, 47, 98, 102, 110, 114, 116):
                _fail("bad escape", i)
            i += 2
            continue
        i += 1
    _fail("unterminated string", i)


def _utf8(b, i, n):
    # Strict UTF-8 (no overlong forms, no encoded surrogates, nothing above U+10FFFF): MicroPython's decode()
    # lets some of these through, CPython's does not.
    c = b[i]
    if 0xC2 <= c <= 0xDF:
        k, lo, hi = 1, 0x80, 0xBF
    elif 0xE0 <= c <= 0xEF:
        k = 2
        lo = 0xA0 if c == 0xE0 else 0x80
        hi = 0x9F if c == 0xED else 0xBF
    elif 0xF0 <= c <= 0xF4:
        k = 3
        lo = 0x90 if c == 0xF0 else 0x80
        hi = 0x8F if c == 0xF4 else 0xBF
    else:
        raise UnicodeError("invalid UTF-8 at byte %d" % i)
    if i + k >= n or not lo <= b[i + 1] <= hi:
        raise UnicodeError("invalid UTF-8 at byte %d" % i)
    for j in range(i + 2, i + k + 1):
        if not 0x80 <= b[j] <= 0xBF:
            raise UnicodeError("invalid UTF-8 at byte %d" % i)
    return i + k + 1


def _number(b, i, n):
    start = i
    if b[i] == 45:
        i += 1
    if i < n and b[i] == 48:
        i += 1
        if i < n and 48 <= b[i] <= 57:
            _fail("leading zero in number", start)
    elif i < n and 49 <= b[i] <= 57:
        while i < n and 48 <= b[i] <= 57:
            i += 1
    else:
        _fail("bad number", start)
    if i < n and b[i] == 46:
        i += 1
        if not (i < n and 48 <= b[i] <= 57):
            _fail("bad fraction", i)
        while i < n and 48 <= b[i] <= 57:
            i += 1
    if i < n and b[i] in (101, 69):
        i += 1
        if i < n and b[i] in (43, 45):
            i += 1
        if not (i < n and 48 <= b[i] <= 57):
            _fail("bad exponent", i)
        while i < n and 48 <= b[i] <= 57:
            i += 1
    return i
