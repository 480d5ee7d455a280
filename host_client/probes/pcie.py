"""PCIe AER through sysfs: corrected-error totals per device, and which GPUs / NICs sit below a port.

``/sys/bus/pci/devices/<bdf>`` is a link into ``/sys/devices/pciDDDD:BB/<root port>/<switch ports...>/<bdf>``
(Documentation/PCI/sysfs-pci.rst): a device is below a port when the port's name is one of the directories on the
device's resolved path. ``aer_dev_correctable`` holds "<error name> <count>" lines ending in ``TOTAL_ERR_COR``
(Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats).
"""

import os
import re

_BDF = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\Z")


def bdf_text(key):
    """(domain, bus, device[, function]) -> '0000:3b:00.0'."""
    if key is None:
        return None
    fn = key[3] if len(key) > 3 else 0
    return "%04x:%02x:%02x.%x" % (key[0], key[1], key[2], fn)


def chain(root, bdf):
    """The PCI functions on the path from the root complex down to ``bdf`` (itself last), or [] if unknown."""
    try:
        real = os.path.realpath(os.path.join(root, bdf))
    except OSError:
        return []
    if not os.path.exists(real):
        return []
    return [p.lower() for p in real.split(os.sep) if _BDF.match(p)]


def below(root, port, devices):
    """The members of ``devices`` ({bdf: what}) at or below ``port`` (a bdf): [(bdf, what)]."""
    port = port.lower()
    return [(b, what) for b, what in devices.items() if port in chain(root, b)]


def read_corrected(root, only=None):
    """{bdf: TOTAL_ERR_COR} for devices that keep AER statistics; ``only`` limits the devices read. Errors are
    returned, not raised: {path: reason}."""
    out, errors = {}, {}
    try:
        names = sorted(os.listdir(root)) if only is None else sorted(only)
    except OSError as e:
        return out, {root: e.strerror or str(e)}
    for b in names:
        path = os.path.join(root, b, "aer_dev_correctable")
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                text = f.read()
        except FileNotFoundError:
            continue  # no AER capability (or a kernel without the statistics): nothing to count
        except OSError as e:
            errors[path] = e.strerror or str(e)
            continue
        for line in text.splitlines():
            name, _, n = line.rpartition(" ")
            if name == "TOTAL_ERR_COR" and n.isdigit():
                out[b.lower()] = int(n)
    return out, errors
