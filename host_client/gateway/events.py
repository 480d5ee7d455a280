"""GPU events as probes send them: validation, the RFC's host cleaning and severity rule, speech templates.

The RFC's gateway (RFC-2026-08, section 3) defines the body ``{cluster_rack, node_host, event_type, gpu_index,
gpu_util}``, the debounce key ``rack:clean-host:event_type``, the rule "NCCL_TIMEOUT or XID_FATAL or gpu_util < 5 is
critical" and three Chinese speech templates. Everything here reproduces those byte for byte; the extra event types
are ours and documented in docs/GATEWAY.md.
"""

from __future__ import annotations

import math
import re
import string
from typing import overload

from host_client import vocabulary
from host_client.errors import SentinelError
from sentinel_core.alarm import NORMAL, P0

# The RFC's Go regexp `-[a-f0-9]{8,10}$`: RE2's `$` is end of text, Python's would also match before a final
# newline, hence \Z.
_HOST_HASH = re.compile(r"-[a-f0-9]{8,10}\Z")
HOST_MAX = 25
CRITICAL_UTIL = 5.0

_TYPE_RE = re.compile(r"[A-Z][A-Z0-9_]{0,47}\Z")
# The kernel's bus id as XID lines print it ("PCI:0000:3b:00" or "0000:3b:00.0"); only used for wording.
_PCI_RE = re.compile(r"(?:PCI:)?([0-9A-Fa-f]{1,8}(?::[0-9A-Fa-f]{1,8}){1,3}(?:\.[0-7])?)\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SOURCE_RE = re.compile(r"[a-z][a-z0-9_]{0,31}(?:,[a-z][a-z0-9_]{0,31})*\Z")


def clean_host(raw: str) -> str:
    """The RFC's cleanHostIdentifier: drop a trailing -<8..10 hex> pod/instance hash, keep at most 25 characters.

    Go cuts 25 bytes; host names are ASCII, where bytes and characters agree. For a non-ASCII name we cut characters
    so the result stays valid text.
    """
    return _HOST_HASH.sub("", raw)[:HOST_MAX]


# A cluster has a few hundred racks and a storm names each thousands of times, and a node's GPUs report one after
# another under one host name. These memos hold the racks and host names parse_event has validated (and a host's
# cleaned form): a known one is not checked again, and the groups' rack and host sets keep one string per rack, not
# one per event. Bounded: cleared when full. Only validated strings go in, so a hit means "valid".
_RACKS: dict = {}  # rack -> the same string
_HOSTS: dict = {}  # raw host -> clean_host(raw host)
_MEMO_MAX = 4096


def debounce_key(rack: str, clean: str, event_type: str) -> str:
    return "%s:%s:%s" % (rack, clean, event_type)


# The type table (levels, templates, phrases) is host_client/vocabulary.py, shared with the probes.
EVENT_TYPES = vocabulary.TYPES
GPU_SCOPED = vocabulary.GPU_SCOPED
COMPONENT_SCOPED = vocabulary.COMPONENT_SCOPED
AFTER_TYPES = vocabulary.AFTER_TYPES
DEFAULT_TYPE = vocabulary.DEFAULT_TYPE
RFC_ZH_NCCL = vocabulary.RFC_ZH_NCCL
RFC_ZH_XID = vocabulary.RFC_ZH_XID
RFC_ZH_UTIL = vocabulary.RFC_ZH_UTIL
HANG_TYPES = vocabulary.HANG_TYPES
# the component as a probe names it ("mlx5_3/1", "nvswitch3 link 44", "0000:3b:00.0"): words the alarm, keys it
_COMPONENT_RE = re.compile(r"[A-Za-z0-9_.:/ -]{1,40}\Z")
# Metrics label for unknown types, so a misbehaving probe cannot grow the label set without bound.
OTHER_TYPE = "OTHER"

# Extra optional fields a probe may send are documented in docs/GATEWAY.md. Anything else is ignored.
MAX_DETAIL = vocabulary.MAX_DETAIL


class EventError(SentinelError, ValueError):
    """A request body that is not a valid event. code is machine-readable; str() is for humans."""

    def __init__(self, code: str, message: str, status: int = 422):
        super().__init__(message)
        self.code = code
        self.status = status


class Event:
    """A validated GPU event. recovers: for a recovery, the event type that cleared (else None).

    fault_type: the type the event is about (a recovery's, the type it clears). rfc_key: the RFC's debounce key
    rack:clean-host:fault_type. key: the incident's name: the RFC key, plus :gpuN for a numbered GPU's fault (an
    unnumbered GPU, -1, stays at node level: there is nothing to tell two of them apart by). All three are set once
    here, plain attributes: every event reads them, and a property each would cost a Python call per read."""

    __slots__ = (
        "rack",
        "host",
        "raw_host",
        "event_type",
        "gpu_index",
        "gpu_util",
        "recovers",
        "detail",
        "xid",
        "action",
        "source",
        "known",
        "pci",
        "component",
        "after",
        "ts",
        "fault_type",
        "rfc_key",
        "key",
    )

    def __init__(
        self,
        rack,
        raw_host,
        event_type,
        gpu_index=None,
        gpu_util=None,
        recovers=None,
        detail=None,
        xid=None,
        pci=None,
        ts=None,
        host=None,
        action=None,
        source=None,
        component=None,
        after=None,
    ):
        """host: raw_host already cleaned (parse_event has it from its memo), else computed here."""
        self.rack = rack
        self.raw_host = raw_host
        self.host = host = clean_host(raw_host) if host is None else host
        self.event_type = event_type
        self.gpu_index = gpu_index
        self.gpu_util = gpu_util
        self.recovers = recovers
        self.detail = detail
        self.xid = xid
        self.action = action  # the XID catalogue's immediate action (a vocabulary.ACTIONS name), or None
        self.source = source  # PROBE_SOURCE_DOWN: the vocabulary.SOURCE_KINDS down, comma-separated, or None
        self.pci = pci  # bus id without the "PCI:" prefix, or None
        self.component = component  # the NIC port / switch / PCI device a COMPONENT_SCOPED type names, or None
        self.after = after  # (type, component) of the fabric warning a hang followed on this node, or None
        self.ts = ts  # the probe's time of the event (Unix seconds), or None
        self.known = event_type in EVENT_TYPES
        fault = self.fault_type = event_type if recovers is None else recovers
        key = self.rfc_key = "%s:%s:%s" % (rack, host, fault)  # debounce_key(rack, host, fault), inline
        if fault in GPU_SCOPED and gpu_index is not None and gpu_index >= 0:
            key = "%s:gpu%d" % (key, gpu_index)
        elif component is not None and fault in COMPONENT_SCOPED:
            key = "%s:%s" % (key, component)
        self.key = key

    @property
    def spec(self):
        return EVENT_TYPES.get(self.event_type) or EVENT_TYPES[DEFAULT_TYPE]

    @property
    def metric_type(self) -> str:
        return self.event_type if self.known else OTHER_TYPE

    @property
    def debounce_key(self) -> str:
        # a fault: the RFC's key. A recovery: per incident, so two GPUs recovering within the window both count.
        if self.recovers is not None:
            return self.key + ":RECOVERED"
        return self.rfc_key

    def level(self) -> int:
        return severity(self)

    def text(self, language: str = "zh", templates: dict | None = None) -> str:
        return speech(self, language, templates)

    def labels(self) -> dict:
        """What routes and group_by see."""
        return {
            "rack": self.rack,
            "cluster_rack": self.rack,
            "host": self.host,
            "node_host": self.host,
            "event_type": self.event_type if self.recovers is None else self.recovers,
        }


def severity(ev: Event) -> int:
    """The type's level (the table above); a hang type, or an unknown one, with a reported utilisation under 5 % is P0.

    The RFC reads a missing gpu_util as 0 (Go's zero value) and so calls every util-less event critical; we apply the
    utilisation rule only when the probe reported a utilisation. A recovery is NORMAL whatever it carries.
    """
    if ev.recovers is not None:
        return NORMAL
    if ev.event_type in ("NCCL_TIMEOUT", "XID_FATAL"):
        return P0
    if ev.gpu_util is not None and ev.gpu_util < CRITICAL_UTIL and (ev.event_type in HANG_TYPES or not ev.known):
        return P0
    return ev.spec["level"]


def speech(ev: Event, language: str = "zh", templates: dict | None = None) -> str:
    """The words the terminal speaks. templates: optional per-language overrides {lang: {TYPE: template}}.

    The type's template filled with the event's named fields, then each fact the event carries (XID, meaning, PCI,
    action) that the template does not name itself (vocabulary.FACT_TEXT): the RFC's five fields alone give the
    RFC's text. A hang the probe saw follow a fabric warning ends with where to look first (vocabulary.AFTER_TEXT).
    A recovery says the node is well again, not what it had."""
    t = ev.event_type if ev.recovers is None else "RECOVERED"
    spec = EVENT_TYPES.get(t) or EVENT_TYPES[DEFAULT_TYPE]
    tpl = None
    if templates:
        tpl = templates.get(language, {}).get(t)
    if "g" in spec["fields"] and (ev.gpu_index is None or ev.gpu_index < 0) and language + "_node" in spec:
        # no GPU number: node-level wording, the built-in one (an override speaks of GPU {gpu})
        tpl = (ev.pci and spec.get(language + "_pci")) or spec[language + "_node"]
    elif "c" in spec["fields"] and not ev.component and language + "_node" in spec:
        tpl = spec[language + "_node"]  # a component type without its component: the node-level wording
    elif tpl is None:
        tpl = spec[language]
    source = vocabulary.source_words(ev.source, language)
    if ev.recovers is not None:
        return tpl.format(
            rack=ev.rack, host=ev.host, gpu=ev.gpu_index, util=ev.gpu_util, source=source, component="", **_NO_FACTS
        )
    after = ""
    if ev.after is not None:
        # the RFC's story: a hang that follows the fabric's warning says where to look first (issue 35)
        after = vocabulary.AFTER_TEXT[language].format(
            after_phrase=phrase(ev.after[0], language), after_component=ev.after[1]
        )
    if ev.xid is None and ev.action is None and ev.pci is None:
        text = tpl.format(
            rack=ev.rack,
            host=ev.host,
            gpu=ev.gpu_index,
            util=ev.gpu_util,
            source=source,
            component=_said(ev.component),
            **_NO_FACTS,
        )
        return text + after
    values = vocabulary.facts(ev.xid, ev.action, language)
    values["pci"] = ev.pci
    text = tpl.format(
        rack=ev.rack,
        host=ev.host,
        gpu=ev.gpu_index,
        util=ev.gpu_util,
        source=source,
        component=_said(ev.component),
        **{k: _said(v) for k, v in values.items()},
    )
    text += after
    named = template_fields(tpl)
    for name, piece in vocabulary.FACT_TEXT[language]:
        if values[name] is not None and name not in named:
            text += piece.format_map(values)
    return text


_NO_FACTS = {"xid": "", "meaning": "", "action": "", "pci": ""}
_FIELDS_OF: dict = {}  # template -> the names it uses (a few dozen templates: unbounded is fine)


def _said(v):
    return "" if v is None else v


def template_fields(tpl: str) -> frozenset:
    """The named fields a template uses; ValueError for a malformed one ("{" unclosed, a positional "{}")."""
    names = _FIELDS_OF.get(tpl)
    if names is None:
        found = set()
        for _, name, _, _ in string.Formatter().parse(tpl):
            if name is not None:
                if not name.isidentifier():
                    raise ValueError("a field must be named, e.g. {rack}")
                found.add(name)
        names = _FIELDS_OF[tpl] = frozenset(found)
    return names


def phrase(event_type: str, language: str = "zh") -> str:
    spec = EVENT_TYPES.get(event_type)
    if spec is None:
        return event_type
    return spec[language + "_phrase"]


@overload
def _string(body: dict, name: str, limit: int) -> str: ...
@overload
def _string(body: dict, name: str, limit: int, *, required: bool) -> str | None: ...
def _string(body: dict, name: str, limit: int, *, required: bool = True) -> str | None:
    v = body.get(name)
    # the common case in one test (isprintable() is false for every character _CONTROL matches: the regex runs
    # only for text that has some other unprintable one); anything else takes the checks below, in order, for the
    # precise message
    if (
        type(v) is str
        and v
        and len(v) <= limit
        and not (required and v.isspace())
        and (v.isprintable() or not _CONTROL.search(v))
    ):
        return v
    if v is None:
        if required:
            raise EventError("missing_field", "%s is required" % name)
        return None
    if not isinstance(v, str):
        raise EventError("bad_field", "%s must be a string, got %s" % (name, type(v).__name__))
    if required and not v.strip():
        raise EventError("bad_field", "%s must not be empty" % name)
    if len(v) > limit:
        raise EventError("bad_field", "%s is longer than %d characters" % (name, limit))
    if _CONTROL.search(v):
        raise EventError("bad_field", "%s contains control characters" % name)
    return v


# The RFC's five fields and their limits, one table for both paths of parse_event and for their tests:
# (type, lowest, highest); for text the bounds are its length in characters.
RFC_FIELDS = {
    "cluster_rack": (str, 1, 64),
    "node_host": (str, 1, 253),
    "event_type": (str, 1, 48),
    "gpu_index": (int, -1, 1023),
    "gpu_util": (float, 0.0, 100.0),
}
_RACK_MAX = RFC_FIELDS["cluster_rack"][2]
_HOST_MAX = RFC_FIELDS["node_host"][2]
_TYPE_MAX = RFC_FIELDS["event_type"][2]
_GPU_MAX = RFC_FIELDS["gpu_index"][2]
_UTIL_MAX = RFC_FIELDS["gpu_util"][2]
# Known types an event may carry with nothing but the five RFC fields (RECOVERED needs "recovers").
_PLAIN_TYPES = frozenset(EVENT_TYPES) - {"RECOVERED"}
_new = object.__new__


def _remember_host(host: str) -> str:
    """A validated host name's cleaned form, memoised."""
    if len(_HOSTS) >= _MEMO_MAX:
        _HOSTS.clear()
    clean = _HOSTS[host] = clean_host(host)
    return clean


def parse_event(body, *, accept_unknown: bool = True) -> Event:
    """Validate a decoded JSON body into an Event, or raise EventError naming the field and the rule it broke."""
    # The storm's body: exactly the RFC's five fields, a rack and host validated before, a known type, a numbered
    # GPU and a utilisation in range. Then nothing is left to check and the event is built at once. Kept because
    # without it the storm bench falls below the Go gateway (bench/bench_ingest_instructions.py,
    # docs/PERFORMANCE.md). What it returns is exactly what _parse_full returns for the same body: the tests
    # compare the two on bodies made from RFC_FIELDS and EVENT_TYPES.
    if type(body) is dict and len(body) == 5:
        rack = body.get("cluster_rack")
        host = body.get("node_host")
        etype = body.get("event_type")
        gpu_index = body.get("gpu_index")
        gpu_util = body.get("gpu_util")
        if (
            type(rack) is str
            and type(host) is str
            and type(etype) is str
            and etype in _PLAIN_TYPES
            and type(gpu_index) is int
            and 0 <= gpu_index <= _GPU_MAX
            and type(gpu_util) is float
            and 0.0 <= gpu_util <= _UTIL_MAX
        ):
            # five keys, each of the five non-null: no state, detail, xid, pci or ts
            rack = _RACKS.get(rack)
            if rack is not None:
                clean = _HOSTS.get(host)
                # a node's first event: its host name takes _string's test (the one that returns it unchanged)
                if (
                    clean is None
                    and host
                    and len(host) <= _HOST_MAX
                    and not host.isspace()
                    and (host.isprintable() or not _CONTROL.search(host))
                ):
                    clean = _remember_host(host)
                if clean:
                    # The Event built here, not by Event(...): CPython 3.11 calls a class through C, its arguments
                    # packed in a tuple, and enters __init__ in a frame of its own. Every slot Event.__init__ sets,
                    # to the same value (the differential test compares each).
                    ev = _new(Event)
                    ev.rack = rack
                    ev.raw_host = host
                    ev.host = clean
                    ev.event_type = ev.fault_type = etype
                    ev.gpu_index = gpu_index
                    ev.gpu_util = gpu_util
                    ev.recovers = ev.detail = ev.xid = ev.action = ev.source = ev.pci = ev.ts = None
                    ev.component = ev.after = None
                    ev.known = True
                    # str and int exactly, so the f-strings give what "%s" and "%d" give, with no format to parse
                    key = ev.rfc_key = f"{rack}:{clean}:{etype}"
                    ev.key = f"{key}:gpu{gpu_index}" if etype in GPU_SCOPED else key
                    return ev
    return _parse_full(body, accept_unknown)


def _parse_full(body, accept_unknown: bool) -> Event:
    if not isinstance(body, dict):
        raise EventError("bad_body", "the body must be a JSON object", 400)
    rack = _string(body, "cluster_rack", _RACK_MAX)
    r = _RACKS.get(rack)
    if r is None:
        if len(_RACKS) >= _MEMO_MAX:
            _RACKS.clear()
        r = _RACKS[rack] = rack
    rack = r
    host = _string(body, "node_host", _HOST_MAX)
    clean = _HOSTS.get(host)
    if clean is None:
        clean = _remember_host(host)
    etype = _string(body, "event_type", _TYPE_MAX)
    if etype not in EVENT_TYPES and not _TYPE_RE.match(etype):  # every known type matches (a test says so)
        raise EventError("bad_field", "event_type must be upper-case letters, digits and _ (e.g. NCCL_TIMEOUT)")
    if etype not in EVENT_TYPES and not accept_unknown:
        raise EventError(
            "unknown_event_type", "unknown event_type %s; known: %s" % (etype, ", ".join(sorted(EVENT_TYPES)))
        )

    gpu_index = body.get("gpu_index")
    if gpu_index is not None and not (type(gpu_index) is int and 0 <= gpu_index <= _GPU_MAX):  # the common case
        if isinstance(gpu_index, bool) or not isinstance(gpu_index, int):
            raise EventError("bad_field", "gpu_index must be an integer")
        if gpu_index < -1 or gpu_index > _GPU_MAX:
            raise EventError("bad_field", "gpu_index must be -1 (whole node) or 0..%d" % _GPU_MAX)
    gpu_util = body.get("gpu_util")
    if type(gpu_util) is float and 0.0 <= gpu_util <= _UTIL_MAX:  # the common case (NaN fails both comparisons)
        pass
    elif gpu_util is not None:
        if isinstance(gpu_util, bool) or not isinstance(gpu_util, (int, float)):
            raise EventError("bad_field", "gpu_util must be a number (percent)")
        gpu_util = float(gpu_util)
        if not math.isfinite(gpu_util) or gpu_util < 0.0 or gpu_util > _UTIL_MAX:
            raise EventError("bad_field", "gpu_util must be between 0 and 100")

    recovers = None
    state = body.get("state")
    if etype == "RECOVERED":
        recovers = _string(body, "recovers", _TYPE_MAX)
        if not _TYPE_RE.match(recovers) or recovers == "RECOVERED":
            raise EventError("bad_field", "recovers must name the event type that cleared (e.g. NCCL_TIMEOUT)")
    elif state is not None:
        if state != "recovered" and state != "firing":
            raise EventError("bad_field", 'state must be "firing" or "recovered"')
        if state == "recovered":
            recovers = etype
            etype = "RECOVERED"

    detail = body.get("detail")
    if detail is not None:
        detail = _string(body, "detail", MAX_DETAIL, required=False)
    xid = body.get("xid")
    if xid is not None and (isinstance(xid, bool) or not isinstance(xid, int) or xid < 0 or xid > 65535):
        raise EventError("bad_field", "xid must be an integer 0..65535")

    # pci only words the alarm: a malformed one is ignored rather than refusing a fatal XID over it
    pci = body.get("pci")
    if pci is not None:
        m = _PCI_RE.match(pci) if isinstance(pci, str) and len(pci) <= 40 else None
        pci = m.group(1) if m else None

    # action only words the alarm (the catalogue's bucket the probe found): one we have no words for is ignored
    action = body.get("action")
    if action is not None and (not isinstance(action, str) or action not in vocabulary.ACTIONS):
        action = None

    # source only words a probe's own alarm: kinds we have no words for are said as "a source"
    source = body.get("source")
    if source is not None and not (isinstance(source, str) and len(source) <= 200 and _SOURCE_RE.match(source)):
        source = None

    # component only words and keys the alarm: one that is not a short name is ignored, never refused
    component = body.get("component")
    if component is not None and not (isinstance(component, str) and _COMPONENT_RE.match(component)):
        component = None

    after = None
    after_type, after_comp = body.get("after_type"), body.get("after_component")
    # a str first: a list or an object is unhashable, and a body must never be a 500
    if isinstance(after_type, str) and after_type in AFTER_TYPES and isinstance(after_comp, str):
        after = (after_type, after_comp) if _COMPONENT_RE.match(after_comp) else None

    # ts only names the incident's window (service.py): one that is not a finite number is ignored, never refused
    ts = body.get("ts")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts)):
        ts = None
    ev = Event(
        rack,
        host,
        etype,
        gpu_index=gpu_index,
        gpu_util=gpu_util,
        recovers=recovers,
        detail=detail,
        xid=xid,
        pci=pci,
        ts=ts,
        host=clean,
        action=action,
        source=source,
        component=component,
        after=after,
    )
    if recovers is None:
        fields = (EVENT_TYPES.get(etype) or EVENT_TYPES[DEFAULT_TYPE])["fields"]
        if gpu_index is None and "g" in fields:
            raise EventError(
                "missing_field",
                "gpu_index (0..%d, or -1 when the GPU cannot be numbered) is required for %s" % (_GPU_MAX, etype),
            )
        if gpu_util is None and "u" in fields:
            raise EventError("missing_field", "gpu_util is required for %s" % etype)
    if not ev.host:
        raise EventError("bad_field", "node_host is empty once its hash suffix is removed")
    return ev
