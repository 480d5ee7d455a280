"""Fake hardware sources for issue 35's probes: an /sys/class/infiniband tree, a /sys/bus/pci/devices tree with
the real parent chain, the NICs' mlx5 hwmon devices under /sys/class/hwmon, and an ``ethtool`` that prints
recorded outputs (tests/fixtures/probes/hw/).

The layouts are the kernel's (Documentation/ABI/stable/sysfs-class-infiniband, Documentation/PCI/sysfs-pci.rst,
Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats, drivers/net/ethernet/mellanox/mlx5/core/hwmon.c;
FACTS.md 11.1, 11.2, 11.4, 11.7). Values are written the way the kernel prints them: "4: ACTIVE", "5: LinkUp",
"400 Gb/sec (4X NDR)".
"""

import os
import stat
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "probes" / "hw"
STATES = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4}
PHYS = {"Sleep": 1, "Polling": 2, "Disabled": 3, "LinkUp": 5, "LinkErrorRecovery": 6}
IB_COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_wait",
)
ROCE_HW = ("out_of_sequence", "packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err", "np_cnp_sent")


class Fabric:
    """``nics`` HCAs mlx5_0.. with one port each, ACTIVE at 400 Gb/sec; RoCE ones (link_layer Ethernet) have a
    netdev and hw_counters. PCI functions for them (and ``gpus`` GPUs) under root ports, as on an HGX board."""

    def __init__(self, root, *, nics=8, gpus=8, roce=True):
        self.root = Path(root)
        self.ib = self.root / "class" / "infiniband"
        self.pci = self.root / "bus" / "pci" / "devices"
        self.devices = self.root / "devices"
        self.hwmon = self.root / "class" / "hwmon"
        self.ib.mkdir(parents=True)
        self.pci.mkdir(parents=True)
        self.hwmon.mkdir(parents=True)
        self._hwmon_dev(self.devices / "platform" / "thermal", {"name": "acpitz", "temp1_input": "27800"})
        self.gpu_bdf = {}
        self.nic_bdf = {}
        for i in range(max(nics, gpus)):
            rp = "0000:%02x:01.0" % (0x10 * i)  # a root port per GPU+NIC pair, a switch port below it
            sw = "0000:%02x:00.0" % (0x10 * i + 1)
            chain = self.devices / "pci0000:00" / rp / sw
            if i < gpus:
                self._pci_dev(chain, "0000:%02x:00.0" % (0x18 + 0x10 * i), parents=(rp, sw))
                self.gpu_bdf[i] = "0000:%02x:00.0" % (0x18 + 0x10 * i)
            if i < nics:
                bdf = "0000:%02x:00.0" % (0x1A + 0x10 * i)
                self._pci_dev(chain, bdf, parents=(rp, sw))
                self.nic_bdf["mlx5_%d" % i] = bdf
                self._hca("mlx5_%d" % i, chain / bdf, roce=roce, netdev="ens%dnp0" % (i + 1))
                self._hwmon_dev(chain / bdf, _hwmon_fixture())
        for d in (self.devices / "pci0000:00").rglob("0000:*"):
            link = self.pci / d.name
            if not link.exists():
                link.symlink_to(d)
                (d / "aer_dev_correctable").write_text(_aer(0))

    def _hwmon_dev(self, parent, files):
        """hwmonN below its device, with the ``device`` link back and the /sys/class/hwmon link to it."""
        name = "hwmon%d" % len(list(self.hwmon.iterdir()))
        d = parent / "hwmon" / name
        d.mkdir(parents=True)
        (d / "device").symlink_to(parent)
        for f, v in files.items():
            (d / f).write_text(v + "\n")
        (self.hwmon / name).symlink_to(d)

    def module_temp(self, dev, celsius, *, crit=None):
        """The NIC's transceiver sensor (the channel labelled Module<N>) reads ``celsius`` (and ``crit``)."""
        pcidir = Path(os.path.realpath(self.ib / dev / "device"))
        (hw,) = (pcidir / "hwmon").iterdir()
        _atomic(hw / "temp2_input", "%d\n" % round(celsius * 1000))
        if crit is not None:
            _atomic(hw / "temp2_crit", "%d\n" % round(crit * 1000))

    def _pci_dev(self, chain, bdf, parents):
        (chain / bdf).mkdir(parents=True, exist_ok=True)

    def _hca(self, dev, pcidir, *, roce, netdev):
        d = self.ib / dev
        d.mkdir()
        (d / "device").symlink_to(pcidir)
        (pcidir / "net" / netdev).mkdir(parents=True)
        p = d / "ports" / "1"
        (p / "counters").mkdir(parents=True)
        for c in IB_COUNTERS:
            (p / "counters" / c).write_text("0\n")
        if roce:
            (p / "hw_counters").mkdir()
            for c in ROCE_HW:
                (p / "hw_counters" / c).write_text("0\n")
        (p / "link_layer").write_text("Ethernet\n" if roce else "InfiniBand\n")
        self.port("mlx5_%s" % dev.split("_")[1], state="ACTIVE", phys="LinkUp", rate="400 Gb/sec (4X NDR)")

    def port(self, dev, *, state=None, phys=None, rate=None, n=1):
        p = self.ib / dev / "ports" / str(n)
        if state is not None:
            _atomic(p / "state", "%d: %s\n" % (STATES[state], state))
        if phys is not None:
            _atomic(p / "phys_state", "%d: %s\n" % (PHYS[phys], phys))
        if rate is not None:
            _atomic(p / "rate", rate + "\n")

    def counter(self, dev, name, value, n=1):
        p = self.ib / dev / "ports" / str(n)
        sub = "hw_counters" if name in ROCE_HW else "counters"
        _atomic(p / sub / name, "%d\n" % value)

    def add_counter(self, dev, name, by, n=1):
        p = self.ib / dev / "ports" / str(n)
        sub = "hw_counters" if name in ROCE_HW else "counters"
        f = p / sub / name
        _atomic(f, "%d\n" % (int(f.read_text()) + by))

    def aer_corrected(self, bdf, total):
        _atomic(self.pci / bdf / "aer_dev_correctable", _aer(total))

    def root_port_of(self, bdf):
        return Path(os.path.realpath(self.pci / bdf)).parent.parent.name


def _hwmon_fixture():
    rows = (FIXTURES / "hwmon-mlx5.txt").read_text().splitlines()
    return dict(r.split(" ", 1) for r in rows if r and not r.startswith("#"))


def _aer(total):
    # the aer_stats ABI: one "<name> <count>" line per error, TOTAL_ERR_COR last
    names = ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF")
    return "".join("%s %d\n" % (n, total if n == "RxErr" else 0) for n in names) + "TOTAL_ERR_COR %d\n" % total


def _atomic(path, text):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class FakeEthtool:
    """An ``ethtool`` on PATH-free disk: ``<dir>/ethtool -S|-m <netdev>`` prints ``<dir>/<netdev>.S|m`` (a recorded
    output, its comment lines dropped) or fails as the real one does for a module it cannot read."""

    def __init__(self, directory):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "ethtool"
        self.path.write_text(
            '#!/bin/sh\nf="%s/$2.${1#-}"\n[ -f "$f" ] || { echo "Cannot get module EEPROM information: '
            'Operation not permitted" >&2; exit 1; }\nexec grep -v "^#" "$f"\n' % self.dir
        )
        self.path.chmod(self.path.stat().st_mode | stat.S_IXUSR)

    def set(self, netdev, option, fixture=None, text=None):
        body = text if text is not None else (FIXTURES / fixture).read_text()
        _atomic(self.dir / ("%s.%s" % (netdev, option)), body)

    def stats(self, netdev, **counters):
        """An ethtool -S of the recorded form with these counters changed."""
        lines = []
        for line in (FIXTURES / "ethtool-S-mlx5-normal.txt").read_text().splitlines():
            name = line.split(":")[0].strip()
            if name in counters:
                line = "     %s: %d" % (name, counters.pop(name))
            lines.append(line)
        lines += ["     %s: %d" % kv for kv in counters.items()]
        self.set(netdev, "S", text="\n".join(lines) + "\n")
