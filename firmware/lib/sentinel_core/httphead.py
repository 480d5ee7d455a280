# The request head's grammar, one for both shells (docs/PROTOCOL.md, "HTTP"): the board's microdot server and the
# emulator's front both read a request with read(), so a byte either one could take differently (a superscript
# digit, a no-break space, a lower-case method, a second Content-Length) has one answer. Bytes in, a few small
# strings out; one function and few names, since the board's heap pays for each (bytecode and interned names).
#
#   request-line = method SP target SP "HTTP/" DIGIT "." DIGIT CRLF    (LF alone is taken for CRLF)
#   header-line  = name ":" OWS value OWS CRLF
#   method       = 1..16 capital letters A-Z (case-sensitive: "post" is not POST)
#   name         = 1..MAX_NAME (64) token characters (RFC 9110: letters, digits, !#$%&'*+-.^_`|~)
#   target       = "/" then visible ASCII, or "http://" / "https://" authority then that (absolute-form, RFC 9112
#                  3.2.2: read as its path)
#   value        = visible ASCII, SP and HTAB; OWS = SP / HTAB
# 400 bad_request: a line over MAX_LINE bytes or cut short, more than MAX_HEADERS headers, a name given twice, any
# byte outside the grammar (>= 0x80, a control but HTAB), a Content-Length that is not 1..9 ASCII digits, an
# HTTP/1.1 request without a Host header (RFC 9112 3.2: exactly one; a second is a name given twice).
# 413 too_large: a Content-Length above the body limit. 411 length_required: any Transfer-Encoding (bodies are framed
# by Content-Length only), or 400 with a Content-Length beside it (RFC 9112 6.3: a framing error, not a length).
MAX_LINE = 1024  # the board's connection loop reads lines up to this too (sentinel_fw.server)
MAX_HEADERS = 32
MAX_NAME = 64  # Prometheus sends X-Prometheus-Scrape-Timeout-Seconds (35) with every scrape
_TCHAR = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class HeadError(Exception):
    """args: (status, code, message), the refusal to answer."""


def _line(line):
    # The line's length without its LF or CRLF, or 400.
    n = len(line)
    if n > MAX_LINE or not n or line[n - 1] != 10:
        raise HeadError(400, "bad_request", "malformed request head: a line over 1024 bytes or cut short")
    n -= 1
    return n - 1 if n and line[n - 1] == 13 else n


async def read(readline, max_body, headers):
    """Read one request head: readline() is awaited for each line (bytes with their LF). Fills headers (any dict,
    names as sent, values without OWS) and returns (method, target, version, content_length); or HeadError."""
    bad = HeadError(400, "bad_request", "malformed request head (docs/PROTOCOL.md, HTTP)")
    line = await readline()
    n = _line(line)
    a = line.find(b" ")
    b = line.find(b" ", a + 1)
    if (
        not 0 < a <= 16
        or b < 0
        or n - b != 9
        or line[b + 1 : b + 6] != b"HTTP/"
        or line[b + 7] != 46
        or not (48 <= line[b + 6] <= 57 and 48 <= line[b + 8] <= 57)
    ):
        raise bad
    for k in range(a + 1, b):
        if not 33 <= line[k] <= 126:
            raise bad
    for k in range(a):
        if not 65 <= line[k] <= 90:
            raise bad
    t = a + 1
    if line[t] != 47:
        k = line.find(b"://", t, b)
        if k < 0 or line[t:k] not in (b"http", b"https"):
            raise bad
        t = line.find(b"/", k + 3, b)
        if t < 0:
            raise bad
    method = line[:a].decode()
    target = line[t:b].decode()
    version = line[b + 1 : n].decode()
    seen = []
    length = 0
    while True:
        line = await readline()
        n = _line(line)
        if n == 0:
            break
        c = line.find(b":")
        if not 0 < c <= MAX_NAME or c > n or len(seen) >= MAX_HEADERS:
            raise bad
        for k in range(c):
            if line[k] not in _TCHAR:
                raise bad
        i = c + 1
        while i < n and line[i] in b" \t":
            i += 1
        while n > i and line[n - 1] in b" \t":
            n -= 1
        for k in range(i, n):
            if not (32 <= line[k] <= 126 or line[k] == 9):
                raise bad
        name = line[:c].decode()
        low = name.lower()
        if low in seen:
            raise bad
        seen.append(low)
        value = line[i:n].decode()
        headers[name] = value
        if low == "content-length":
            if not (0 < n - i < 10 and value.isdigit()):  # ASCII by now: isdigit() is 0-9 only
                raise bad
            length = int(value)
    if version == "HTTP/1.1" and "host" not in seen:
        raise bad
    if "transfer-encoding" in seen:
        if "content-length" in seen:
            raise bad
        raise HeadError(411, "length_required", "Transfer-Encoding is not taken: send a Content-Length")
    if length > max_body:
        raise HeadError(413, "too_large", "body is %d bytes, at most %d" % (length, max_body))
    return method, target, version, length
