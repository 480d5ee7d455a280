"""XID lines from the kernel log, classified by NVIDIA's own XID catalogue (docs/PROBES.md, "Severity").

Accepts a line as /dev/kmsg gives it (``6,1234,5678,-;NVRM: ...``), as ``journalctl -k`` or ``dmesg`` prints
it, or bare. "GPU has fallen off the bus" counts as XID 79 even when the driver prints it without an Xid: the
one-line form ("NVRM: GPU at PCI:0000:3b:00: ... fallen off the bus") and the R570+ multi-line form

    NVRM: The NVIDIA GPU 0000:b3:00.0
    NVRM: (PCI ID: 10de:26b5) installed in this system has
    NVRM: fallen off the bus and is not responding to commands.

which arrives as one kmsg record (newlines escaped as ``\\x0a``) or as three journal lines; ``KernelLog`` keeps the
little state the second case needs.
"""

import re

from . import events

# gpud's pattern; the PCI address is what ties the line to a GPU index. On a MIG GPU the driver adds the GPU instance
# (and compute instance) inside the parenthesis: "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, ..." (kern_rc / the
# A100 memory error management guide); the XID is the physical GPU's, the instance is kept for the operator.
_XID = re.compile(r"NVRM: Xid \(((?:PCI:)?[0-9a-fA-F:.]+)(?: GPU-I:(\d+))?(?: GPU-CI:(\d+))?\).*?: (\d+),\s*(.*)")
# Without "Xid": "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus." / "NVRM: GPU at PCI:0000:3b:00: ..."
_OFF_BUS = re.compile(r"NVRM: GPU (?:at )?((?:PCI:)?[0-9a-fA-F:.]+):? .*fallen off the bus", re.IGNORECASE)
# R570+: "NVRM: The NVIDIA GPU 0000:b3:00.0" then, on the following lines, "... fallen off the bus ..."
_THE_GPU = re.compile(r"NVRM: The NVIDIA GPU ((?:PCI:)?[0-9a-fA-F]+:[0-9a-fA-F:.]+)")
_FALLEN = re.compile(r"fallen off the bus", re.IGNORECASE)
# XID 154's text names the recovery action the driver now asks for
_RECOVERY = re.compile(r"recovery action changed from \S+ \(([^)]*)\) to \S+ \(([^)]*)\)", re.IGNORECASE)

FALLEN_OFF_BUS = 79
RECOVERY_ACTION = 154
NVLINK5 = range(144, 151)

# NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, R570+), column "Resolution
# Bucket (Immediate Action)", for the codes it lists as in use. Codes not listed are "unclassified".
_CATALOGUE = {
    "RESET_GPU": (46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158),
    "RESTART_BM": (79,),
    "RESTART_VM": (151,),
    "WORKFLOW_XID_48": (48,),
    "WORKFLOW_NVLINK_ERR": (74,),
    "WORKFLOW_NVLINK5_ERR": tuple(NVLINK5),
    "XID_154": (154,),
    "RESTART_APP": (
        8,
        11,
        13,
        25,
        31,
        32,
        39,
        40,
        41,
        60,
        68,
        69,
        70,
        71,
        72,
        75,
        76,
        77,
        80,
        82,
        83,
        84,
        85,
        86,
        88,
        89,
        94,
        96,
        97,
        98,
        99,
        100,
        101,
        102,
        103,
        104,
        105,
        126,
        127,
        128,
        129,
        130,
        131,
        132,
        133,
        134,
        135,
        139,
    ),
    "IGNORE": (14, 37, 38, 43, 44, 63, 66, 67, 92, 93, 106, 107, 108, 121, 137, 141, 152, 153, 157, 160, 161),
    "WORKFLOW_XID_45": (45,),
    "CHECK_MECHANICALS": (54,),
    "UPDATE_SWFW": (78,),
    "CHECK_UVM": (159,),
}
ACTION = {code: action for action, codes in _CATALOGUE.items() for code in codes}
# The immediate actions that take the GPU or the node out of service: the room hears them as P0 (XID_FATAL).
# Everything else (restart the application, ignore, check the application, a workflow that starts by looking) is a
# warning (XID_WARNING, P1): the job that hit it reports its own failure, the GPU keeps serving.
FATAL_ACTIONS = frozenset(("RESET_GPU", "RESTART_BM", "RESTART_VM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR"))
# XID 154 targets that are a fault (anything but "None")
_RECOVERY_FATAL = ("reset", "reboot", "drain")


def classify(xid, message=""):
    """'fatal', 'warning', 'unclassified' (reported as a warning: an unknown XID is still worth a look), or None
    when the line reports no fault (XID 154 saying the recovery action went back to None)."""
    action = ACTION.get(xid)
    if xid in NVLINK5:
        # R570+: the driver marks each NVLink5 sub-event Fatal or Nonfatal in the line itself
        words = message.split()
        if "Nonfatal" in words:
            return "warning"
        return "fatal"  # "Fatal", or an older driver that does not say: the catalogue's workflow starts at reset
    if xid == RECOVERY_ACTION:
        m = _RECOVERY.search(message)
        if m is None:
            return "warning"
        target = m.group(2).lower()
        if any(w in target for w in _RECOVERY_FATAL):
            return "fatal"
        return None
    if action is None:
        return "unclassified"
    return "fatal" if action in FATAL_ACTIONS else "warning"


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


def pci_text(key):
    return None if key is None else "%04x:%02x:%02x" % key


class Xid:
    __slots__ = ("xid", "pci", "severity", "action", "message", "line", "gpu_instance", "compute_instance")

    def __init__(self, xid, pci, message, line, *, severity=None, gpu_instance=None, compute_instance=None):
        self.gpu_instance = gpu_instance
        self.compute_instance = compute_instance
        self.xid = xid
        self.pci = pci
        self.severity = severity or classify(xid, message)
        self.action = ACTION.get(xid)
        self.message = message
        self.line = line

    def __repr__(self):
        return "Xid(%d, %r, %s)" % (self.xid, self.pci, self.severity)


def _strip_kmsg(line):
    # /dev/kmsg record: "prio,seq,usec,flags[,more];message" (continuation lines start with a space)
    semi = line.find(";")
    if 0 < semi < 40 and line[0].isdigit() and "," in line[:semi]:
        return line[semi + 1 :]
    return line


def parse(line):
    """Return an Xid for a kernel log text that reports one, else None (also None for an XID that reports no fault).

    The text may be a multi-line record (the R570 fallen-off-the-bus form in one kmsg record)."""
    if "NVRM" not in line:
        return None
    text = _strip_kmsg(line.rstrip("\r\n")).replace("\\x0a", "\n")
    m = _XID.search(text)
    if m:
        xid = int(m.group(4))
        msg = m.group(5).strip()
        if classify(xid, msg) is None:
            return None
        gi, ci = m.group(2), m.group(3)
        return Xid(
            xid,
            pci_key(m.group(1)),
            msg,
            text,
            gpu_instance=int(gi) if gi is not None else None,
            compute_instance=int(ci) if ci is not None else None,
        )
    m = _OFF_BUS.search(text)
    if m:
        return Xid(FALLEN_OFF_BUS, pci_key(m.group(1)), "GPU has fallen off the bus", text)
    m = _THE_GPU.search(text)
    if m and _FALLEN.search(text, m.end()):
        return Xid(FALLEN_OFF_BUS, pci_key(m.group(1)), "GPU has fallen off the bus (not responding to commands)", text)
    return None


class KernelLog:
    """``parse`` with the memory a line-by-line source needs: the R570 multi-line fallen-off-the-bus report names
    the GPU on one line and says what happened two lines later."""

    WINDOW = 4  # lines a "The NVIDIA GPU <bus>" stays pending

    def __init__(self):
        self._pending = None  # (bus text, lines left)

    def feed(self, line):
        x = parse(line)
        if x is not None:
            self._pending = None
            return x
        if "NVRM" not in line:
            return None
        text = _strip_kmsg(line.rstrip("\r\n"))
        m = _THE_GPU.search(text)
        if m:
            self._pending = (m.group(1), self.WINDOW)
            return None
        if self._pending is not None:
            bus, left = self._pending
            if _FALLEN.search(text):
                self._pending = None
                return Xid(
                    FALLEN_OFF_BUS, pci_key(bus), "GPU has fallen off the bus (not responding to commands)", text
                )
            self._pending = (bus, left - 1) if left > 1 else None
        return None


def _message_summary(msg):
    # Drop pid/name noise; keep the driver's own words, short enough for a speech line.
    parts = [p.strip() for p in msg.split(",")]
    keep = [p for p in parts if not p.startswith(("pid=", "name="))]
    return (", ".join(keep))[:120]


def finding(x, gpu_index):
    etype = events.XID_FATAL if x.severity == "fatal" else events.XID_WARNING
    pci = pci_text(x.pci)
    detail = "XID %d (%s%s): %s" % (
        x.xid,
        x.severity,
        ", MIG GPU instance %d" % x.gpu_instance if x.gpu_instance is not None else "",
        _message_summary(x.message),
    )
    return events.Finding(
        ("xid", gpu_index if gpu_index >= 0 else pci, x.xid),
        etype,
        gpu_index,
        detail,
        xid=x.xid,
        severity=x.severity,
        pci=pci,
        action=x.action,
        gpu_instance=x.gpu_instance,
        compute_instance=x.compute_instance,
    )
