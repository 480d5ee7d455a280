"""The incident feed from the gateway to sentinel-remedy: POST /api/v1/incident, signed like a terminal's alarm
(sentinel_core.signing, v1.1 scope), answered by the core's Receiver (server.py registers the endpoint: only the
remedy's process answers it, never a terminal's). Both sides take the body's rules from here."""

from __future__ import annotations

import re

from host_client.client import AlarmClient
from sentinel_core.errors import ProtocolError

from .actions import Incident

PATH_INCIDENT = "/api/v1/incident"
MAX_BODY = 8192
_HOST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")  # a Slurm NodeName: nothing a command line could read
_TYPE_RE = re.compile(r"[A-Z][A-Z0-9_]{0,47}\Z")
_JOB_RE = re.compile(r"[0-9]{1,12}(_[0-9]{1,9})?\Z")
_LEVELS = ("P0", "P1", "NORMAL")


def _bad(message):
    return ProtocolError(422, "bad_field", message)


def _str(obj, key, limit, required=True):
    v = obj.get(key, None if required else "")
    if not isinstance(v, str) or (required and not v) or len(v) > limit:
        raise _bad("%s must be a string of 1..%d characters" % (key, limit))
    return v


def parse_incident(obj) -> dict:
    """The wire body checked; returns it with "incident" an actions.Incident. ProtocolError (422) names the field."""
    if not isinstance(obj, dict):
        raise _bad("the body must be a JSON object")
    msg_id = _str(obj, "id", 64)
    ident = _str(obj, "incident", 200)
    state = obj.get("state")
    if state not in ("firing", "resolved"):
        raise _bad('state must be "firing" or "resolved"')
    level = obj.get("level")
    if level not in _LEVELS:
        raise _bad("level must be one of %s" % ", ".join(_LEVELS))
    host = _str(obj, "host", 64)
    if not _HOST_RE.match(host):
        raise _bad("host must be a node name (letters, digits, '.', '_', '-')")
    etype = _str(obj, "event_type", 48)
    if not _TYPE_RE.match(etype):
        raise _bad("event_type must be upper-case letters, digits and _")
    gpu, xid = obj.get("gpu"), obj.get("xid")
    for k, v, hi in (("gpu", gpu, 4095), ("xid", xid, 65535)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not -1 <= v <= hi):
            raise _bad("%s must be an integer or null" % k)
    jobs = obj.get("jobs", [])
    if not isinstance(jobs, list) or len(jobs) > 64 or not all(isinstance(j, str) and _JOB_RE.match(j) for j in jobs):
        raise _bad("jobs must be a list of up to 64 Slurm job ids")
    gateway = obj.get("gateway", "")
    if not isinstance(gateway, str) or (gateway and not re.match(r"https?://[^/\s]{1,200}\Z", gateway)):
        raise _bad("gateway must be the sender's http:// URL")
    inc = Incident(
        id=ident,
        firing=state == "firing",
        level=level,
        host=host,
        event_type=etype,
        rack=_str(obj, "rack", 64, required=False),
        gpu=gpu,
        xid=xid,
        jobs=tuple(jobs),
        gateway=gateway,
    )
    return {"id": msg_id, "incident": inc}


def wire(*, msg_id, incident, firing, level, rack, host, event_type, gpu=None, xid=None, jobs=(), gateway=""):
    """The body the gateway sends for one incident."""
    return {
        "id": msg_id,
        "incident": incident,
        "state": "firing" if firing else "resolved",
        "level": level,
        "rack": rack,
        "host": host,
        "event_type": event_type,
        "gpu": gpu,
        "xid": xid,
        "jobs": list(jobs),
        "gateway": gateway,
    }


class IncidentClient(AlarmClient):
    """An AlarmClient that also posts incidents (same signing, retries and errors)."""

    def incident(self, body: dict):
        return self._deliver(PATH_INCIDENT, body)
