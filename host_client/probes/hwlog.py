"""Kernel and Fabric Manager log lines about the hardware under the GPU (issue 35): NVSwitch SXids, mlx5_core,
PCIe AER / DPC, GPU init failures; and the Fabric Manager log's failures.

Each parser returns a ``HwLine`` (what broke, on which part, whether fatal) or None; the daemon turns a line into a
finding (the PCI parent chain for AER is its business: it knows the GPUs and NICs). The forms are in
docs/PROBES.md, "Fabric and hardware sources", each with the document that decides its level.
"""

import re

from . import events
from .xid import _strip_kmsg, pci_key

# "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt"
# (the driver's own mark after the code; "Data {...}" and "Severity N Engine ..." lines of the same SXid carry none)
_SXID = re.compile(
    r"nvidia-nvswitch(\d+): SXid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+), (Fatal|Non-fatal|Correctable),?\s*(.*)"
)
_LINK = re.compile(r"Link (\d+)")
# "mlx5_core 0000:1a:00.0 ens1np0: ..." / "mlx5_core 0000:1a:00.0: ..."
_MLX5 = re.compile(r"mlx5_core (\S+?)(?: (\S+?))?: (.*)")
_MODULE_ERROR = re.compile(r"Port module event\[error\]: module (\d+), Cable error, (.*)")
_NIC_FATAL = re.compile(r"health compromised|Fatal error \d+ detected|unrecoverable hardware error", re.IGNORECASE)
# "NETDEV WATCHDOG: ens1np0 (mlx5_core): transmit queue 3 timed out 5120 ms"
_TX_TIMEOUT = re.compile(r"NETDEV WATCHDOG: (?:CPU: \d+: )?(\S+) \(mlx5_core\): transmit queue (\d+) timed out")
# "pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:01:00.0" (older), "... error message
# received from 0000:01:00.0" (newer); "id=0108" on old kernels
_AER_FATAL = re.compile(
    r"(\S+) (\S+): AER: (?:Multiple )?Uncorrected \(Fatal\) error (?:message )?received(?: from)?:? (\S+)"
)
# "pcieport 0000:00:03.0: DPC: containment event, status:0x1f01 source:0x0000"
_DPC = re.compile(r"(\S+) (\S+): DPC: containment event")
_SURPRISE = re.compile(r"(\S+) (\S+): .*(?:Surprise Down|SDES)")
_BDF = re.compile(r"([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\Z")
# "NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x62:0x55:1860)"; the bus-less "rm_init_adapter failed, device
# minor number 0"; "RmInitAdapter: Cannot initialize GSP firmware RM"; "Timeout after 6s of waiting for RPC response
# from GPU1 GSP!" outside an Xid line
_RMINIT = re.compile(r"NVRM: GPU ((?:PCI:)?[0-9a-fA-F:.]+): (?:RmInitAdapter|rm_init_adapter) failed!?,?\s*(.*)")
_RMINIT_MINOR = re.compile(r"NVRM: .*rm_init_adapter failed, device minor number (\d+)")
_GSP_INIT = re.compile(r"NVRM: .*Cannot initialize GSP firmware RM")
_GSP_RPC = re.compile(r"NVRM: (?!Xid).*Timeout after (\d+)s of waiting for RPC response from GPU(\d+) GSP")


class HwLine:
    """One kernel or Fabric Manager line that reports a hardware fault."""

    __slots__ = ("kind", "event_type", "component", "pci", "detail", "key")

    def __init__(self, kind, event_type, component, detail, *, pci=None, key=None):
        self.kind = kind  # sxid, mlx5, aer, gpu_init, fabric_manager
        self.event_type = event_type
        self.component = component
        self.pci = pci  # the PCI function the line names (AER / GPU init), as pci_key()
        self.detail = detail[: events.MAX_DETAIL]
        self.key = key or (kind, component)

    def __repr__(self):
        return "HwLine(%s, %s, %r)" % (self.kind, self.event_type, self.component)


def parse_kernel(line):
    """A kernel log line (kmsg record, journalctl -k, dmesg, bare) -> HwLine or None. Cheap on the lines it is
    not for: one substring test per family."""
    if "SXid" in line:
        m = _SXID.search(line)
        if not m:
            return None
        sw, bus, code, mark, rest = m.groups()
        if mark == "Correctable":  # corrected in hardware: NVIDIA's SXid guide lists no action
            return None
        link = _LINK.match(rest)
        comp = "nvswitch%s" % sw + (" link %d" % int(link.group(1)) if link else "")
        etype = events.NVSWITCH_FATAL if mark == "Fatal" else events.NVSWITCH_WARNING
        return HwLine(
            "sxid",
            etype,
            comp,
            "SXid %d (%s) on %s: %s" % (int(code), mark, comp, rest.strip()),
            pci=pci_key(bus),
            key=("sxid", comp, int(code)),
        )
    if "mlx5_core" in line:
        m = _TX_TIMEOUT.search(line)
        if m:
            return HwLine(
                "mlx5",
                events.NIC_CONGESTION,
                m.group(1),
                "%s transmit queue %s timed out (mlx5_core)" % (m.group(1), m.group(2)),
                key=("mlx5_tx", m.group(1)),
            )
        m = _MLX5.search(_strip_kmsg(line))
        if not m:
            return None
        bdf, netdev, msg = m.groups()
        comp = netdev or bdf
        me = _MODULE_ERROR.search(msg)
        if me:
            return HwLine(
                "mlx5",
                events.OPTICS_WARNING,
                comp,
                "%s module %s cable error: %s" % (comp, me.group(1), me.group(2).strip()),
                pci=pci_key(bdf),
                key=("mlx5_module", comp),
            )
        if _NIC_FATAL.search(msg):
            return HwLine("mlx5", events.NIC_FAILURE, comp, "%s: %s" % (comp, msg.strip()), pci=pci_key(bdf))
        return None
    if "AER:" in line or "DPC:" in line or "Surprise Down" in line or "SDES" in line:
        text = _strip_kmsg(line)
        m = _AER_FATAL.search(text)
        if m:
            src = m.group(3)
            bdf = src if _BDF.match(src) else m.group(2)  # "id=0108": the reporting port is what we can place
            return HwLine("aer", events.PCIE_FATAL, bdf, "PCIe uncorrectable fatal error at %s" % bdf, pci=_full(bdf))
        m = _DPC.search(text)
        if m:
            return HwLine(
                "aer", events.PCIE_FATAL, m.group(2), "DPC containment at %s" % m.group(2), pci=_full(m.group(2))
            )
        m = _SURPRISE.search(text)
        if m and _BDF.match(m.group(2)):
            return HwLine(
                "aer", events.PCIE_FATAL, m.group(2), "PCIe surprise down at %s" % m.group(2), pci=_full(m.group(2))
            )
        return None
    if "NVRM" in line:
        text = _strip_kmsg(line)
        m = _RMINIT.search(text)
        if m:
            return HwLine(
                "gpu_init",
                events.GPU_LOST,
                m.group(1),
                "the driver could not initialise the GPU (RmInitAdapter failed %s)" % m.group(2).strip(),
                pci=pci_key(m.group(1)),
            )
        m = _RMINIT_MINOR.search(text)
        if m:
            return HwLine(
                "gpu_init",
                events.GPU_LOST,
                "minor %s" % m.group(1),
                "rm_init_adapter failed, device minor %s" % m.group(1),
            )
        if _GSP_INIT.search(text):  # context: "GPU <bus>: RmInitAdapter failed!" follows it, naming the bus
            return None
        m = _GSP_RPC.search(text)
        if m:
            return HwLine(
                "gpu_init",
                events.GPU_LOST,
                "gsp GPU%s" % m.group(2),
                "GSP firmware did not answer an RPC within %ss (GPU%s)" % (m.group(1), m.group(2)),
            )
    return None


def _full(bdf):
    """(domain, bus, device, function) for the PCI parent chain (pci_key drops the function)."""
    k = pci_key(bdf)
    if k is None:
        return None
    try:
        fn = int(bdf.rsplit(".", 1)[1], 16) if "." in bdf else 0
    except ValueError:
        fn = 0
    return k + (fn,)


# Fabric Manager log ("[Mon Jun 12 2023 10:15:20] [ERROR] [tid 1234] <message>"): the failures that leave the NVLink
# fabric unusable (its user guide: training, NVLink, NVLS multicast, its own start); WARNING/INFO lines are context.
_FM = re.compile(r"\[(ERROR|FATAL)\]\s*(?:\[tid \d+\])?\s*(.*)")
_FM_FAILURE = re.compile(
    r"train|nvlink|nvls|multicast|failed to|initialization|initialize|start|exiting|terminat|nvswitch",
    re.IGNORECASE,
)


def parse_fabric_manager(line):
    m = _FM.search(line)
    if not m or not _FM_FAILURE.search(m.group(2)):
        return None
    msg = m.group(2).strip()
    return HwLine(
        "fabric_manager",
        events.FABRIC_MANAGER_ERROR,
        "fabricmanager",
        "Fabric Manager %s: %s" % (m.group(1), msg),
        key=("fabric_manager", msg[:60]),
    )
