# One JSON grammar for both interpreters. MicroPython's json.loads accepts trailing commas and leading zeros
# that CPython refuses; CPython accepts NaN and Infinity. A body passes this RFC 8259 check first, so both
# interpreters accept exactly the same bodies. It walks the bytes by index and allocates nothing per byte.
import json

MAX_DEPTH = 8


def loads(body):
    """bytes -> value. Raises ValueError with the byte offset of the first fault."""
    n = len(body)
    i = _value(body, _ws(body, 0, n), n, 0)
    i = _ws(body, i, n)
    if i != n:
        raise ValueError("unexpected data after the JSON value at byte %d" % i)
    try:
        text = body.decode("utf-8")
    except UnicodeError:
        raise UnicodeError("body is not valid UTF-8")
    return json.loads(text)


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
        if b[i:i + len(lit)] == lit:
            return i + len(lit)
    _fail("unexpected character", i)


def _object(b, i, n, depth):
    if depth > MAX_DEPTH:
        _fail("nesting too deep", i)
    i = _ws(b, i + 1, n)
    if i < n and b[i] == 125:
        return i + 1
    while True:
        if i < n and b[i] == 125:
            _fail("trailing comma", i)
        if i >= n or b[i] != 34:
            _fail("expected a string key", i)
        i = _ws(b, _string(b, i, n), n)
        if i >= n or b[i] != 58:
            _fail("expected ':'", i)
        i = _ws(b, _value(b, _ws(b, i + 1, n), n, depth), n)
        if i < n and b[i] == 44:
            i = _ws(b, i + 1, n)
            continue
        if i < n and b[i] == 125:
            return i + 1
        _fail("expected ',' or '}'", i)


def _array(b, i, n, depth):
    if depth > MAX_DEPTH:
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
        if c == 92:  # backslash
            if i + 1 >= n:
                break
            e = b[i + 1]
            if e == 117:  # \u: surrogates only as a proper pair, so both interpreters decode the same text
                v = _hex4(b, i + 2, n)
                i += 6
                if 0xDC00 <= v <= 0xDFFF:
                    _fail("lone low surrogate escape", i - 6)
                if 0xD800 <= v <= 0xDBFF:
                    if i + 6 > n or b[i] != 92 or b[i + 1] != 117 or not 0xDC00 <= _hex4(b, i + 2, n) <= 0xDFFF:
                        _fail("lone high surrogate escape", i - 6)
                    i += 6
                continue
            if e not in (34, 92, 47, 98, 102, 110, 114, 116):
                _fail("bad escape", i)
            i += 2
            continue
        i += 1
    _fail("unterminated string", i)


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
