# Every refusal the terminal can answer with: an HTTP status, a machine-readable code and words for a human.


class ProtocolError(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def bad_json(message):
    return ProtocolError(400, "bad_json", message)


def invalid(field, message):
    return ProtocolError(422, "invalid_field", "%s: %s" % (field, message))


def unauthorized(code, message):
    return ProtocolError(401, code, message)


# code -> status, the whole table (docs/PROTOCOL.md lists the same).
CODES = {
    "bad_json": 400,
    "bad_encoding": 400,
    "invalid_field": 422,
    "missing_auth": 401,
    "bad_timestamp": 401,
    "unknown_key": 401,
    "bad_signature": 401,
    "stale_timestamp": 401,
    "too_large": 413,
    "method_not_allowed": 405,
    "unsupported_media_type": 415,
    "not_found": 404,
    "internal": 500,
}
