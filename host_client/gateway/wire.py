"""What the gateway puts on the wire to a terminal: an alarm built from a queued item, its key and text made to fit
the terminal's schema, and the transport for a terminal that answers as the RFC's minimal terminal does."""

from __future__ import annotations

import hashlib
import json
import re

from host_client.transport import HTTPTransport, Response, Transport
from sentinel_core.alarm import preset
from sentinel_core.validate import KEY_MAX_BYTES, TEXT_MAX_BYTES

_PRESET = ("normal", "p1", "p0")


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def wire_key(key):
    """Incident keys are rack:host:type and may exceed the wire's 64 bytes: keep a readable head, add a hash."""
    if key is None:
        return None
    key = _CONTROL.sub("?", key) or "?"
    b = key.encode("utf-8")
    if len(b) <= KEY_MAX_BYTES:
        return key
    h = hashlib.sha256(b).hexdigest()[:12]
    head = b[: KEY_MAX_BYTES - 13].decode("utf-8", "ignore")
    return head + "~" + h


def wire_text(text):
    """What the terminal's schema accepts: no control characters, not blank, at most 400 bytes of UTF-8."""
    text = _CONTROL.sub(" ", text)
    if not text.strip():
        text = "alarm"
    b = text.encode("utf-8")
    if len(b) <= TEXT_MAX_BYTES:
        return text
    return b[: TEXT_MAX_BYTES - 3].decode("utf-8", "ignore") + "..."


def to_alarm(item):
    return preset(_PRESET[item.level], wire_text(item.text), key=wire_key(item.key), id=item.id)


class RfcCompatTransport(Transport):
    """For a terminal configured `compat = "rfc"`: the RFC's gateway counts any 200 as delivered and a minimal
    RFC-compatible terminal answers a bare 2xx with no JSON body. Such an answer is passed on as our `{"ok": true}`;
    a JSON answer of ours, when the terminal sends one, is used as it is (its duplicate flag, its error code)."""

    _OK = b'{"ok":true,"duplicate":false}'

    def __init__(self, inner=None):
        self.inner = inner or HTTPTransport()

    def post(self, url, headers, body, timeout):
        r = self.inner.post(url, headers, body, timeout)
        if 200 <= r.status < 300:
            try:
                answer = json.loads(r.body.decode("utf-8"))
            except (ValueError, UnicodeDecodeError, AttributeError):
                answer = None
            if not (isinstance(answer, dict) and "ok" in answer):
                return Response(200, r.headers, self._OK)
            if r.status != 200:
                return Response(200, r.headers, r.body)
        return r

    def get(self, url, timeout, *, limit=65536):
        return self.inner.get(url, timeout, limit=limit)
