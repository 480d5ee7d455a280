"""XID lines from the kernel log, classified the way gpud labels them (FACTS.md section 7).

Accepts a line as /dev/kmsg gives it (``6,1234,5678,-;NVRM: ...``), as ``journalctl -k`` or ``dmesg`` prints
it, or bare. "GPU has fallen off the bus" counts as XID 79 even when the driver prints it without an Xid.
"""

import re

from . import events

# gpud's pattern; the PCI address is what ties the line to a GPU index.
_XID = re.compile(r"NVRM: Xid \(((?:PCI:)?[0-9a-fA-F:.]+)\).*?: (\d+),\s*(.*)")
# Without "Xid": "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus." / "NVRM: GPU at PCI:0000:3b:00: ..."
_OFF_BUS = re.compile(r"NVRM: GPU (?:at )?((?:PCI:)?[0-9a-fA-F:.]+):? .*fallen off the bus", re.IGNORECASE)

FATAL = frozenset((48, 62, 63, 64, 74, 79, 94, 95, 119, 120, 140, 143) + tuple(range(144, 151)))
WARNING = frozenset((13, 31, 43, 45, 68, 92))
FALLEN_OFF_BUS = 79


def classify(xid):
    """'fatal', 'warning' or 'unclassified' (reported as a warning: an unknown XID is still worth a look)."""
    if xid in FATAL:
        return "fatal"
    if xid in WARNING:
        return "warning"
    return "unclassified"


def pci_key(text):
    """Normalise a PCI address from any source to (domain, bus, device).

    The kernel prints ``PCI:0000:3b:00``, NVML ``00000000:3B:00.0``, nvidia-smi ``00000000:3B:00.0``.
    """
    if text is None:
        return None
    t = text.strip()
    if t[:4].upper() == "PCI:":
        t = t[4:]
    t = t.split(".")[0]
    parts = t.split(":")
    try:
        if len(parts) == 3:
            return int(parts[0], 16), int(parts[1], 16), int(parts[2], 16)
        if len(parts) == 2:
            return 0, int(parts[0], 16), int(parts[1], 16)
    except ValueError:
        return None
    return None


class Xid:
    __slots__ = ("xid", "pci", "severity", "message", "line")

    def __init__(self, xid, pci, message, line):
        self.xid = xid
        self.pci = pci
        self.severity = classify(xid)
        self.message = message
        self.line = line

    def __repr__(self):
        return "Xid(%d, %r, %s)" % (self.xid, self.pci, self.severity)


def _strip_kmsg(line):
    # /dev/kmsg record: "prio,seq,usec,flags[,more];message" (continuation lines start with a space)
    semi = line.find(";")
    if 0 < semi < 40 and line[0].isdigit() and "," in line[:semi]:
        return line[semi + 1:]
    return line


def parse(line):
    """Return an Xid for a kernel log line that reports one, else None."""
    if "NVRM" not in line:
        return None
    text = _strip_kmsg(line.rstrip("\r\n"))
    m = _XID.search(text)
    if m:
        xid = int(m.group(2))
        msg = m.group(3).strip()
        return Xid(xid, pci_key(m.group(1)), msg, text)
    m = _OFF_BUS.search(text)
    if m:
        return Xid(FALLEN_OFF_BUS, pci_key(m.group(1)), "GPU has fallen off the bus", text)
    return None


def _message_summary(msg):
    # Drop pid/name noise; keep the driver's own words, short enough for a speech line.
    parts = [p.strip() for p in msg.split(",")]
    keep = [p for p in parts if not (p.startswith("pid=") or p.startswith("name="))]
    return (", ".join(keep))[:120]


def finding(x, gpu_index):
    etype = events.XID_FATAL if x.severity == "fatal" else events.XID_WARNING
    pci = None if x.pci is None else "%04x:%02x:%02x" % x.pci
    detail = "XID %d (%s): %s" % (x.xid, x.severity, _message_summary(x.message))
    return events.Finding(("xid", gpu_index if gpu_index >= 0 else pci, x.xid), etype, gpu_index, detail,
                          xid=x.xid, severity=x.severity, pci=pci)
