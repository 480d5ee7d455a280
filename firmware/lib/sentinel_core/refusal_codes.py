# Every refusal code the terminal answers with -> its HTTP status: the whole table, for senders and tests
# (docs/PROTOCOL.md lists the same). The board builds each refusal where it happens (errors.py) and never loads
# this: the table and its long strings would cost its heap ~0.5 KB.
CODES = {
    "bad_json": 400,
    "bad_encoding": 400,
    "invalid_field": 422,
    "missing_auth": 401,
    "bad_timestamp": 401,
    "unknown_key": 401,
    "bad_signature": 401,
    "stale_timestamp": 401,
    "wrong_endpoint": 401,
    "too_large": 413,
    "method_not_allowed": 405,
    "unsupported_media_type": 415,
    "not_found": 404,
    "internal": 500,
    "busy": 503,
    "bad_request": 400,
}
