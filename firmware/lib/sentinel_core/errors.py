# Every refusal the terminal can answer with: an HTTP status, a machine-readable code and words for a human.
# The table of every code and its status is refusal_codes.CODES, which the board does not load.


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
