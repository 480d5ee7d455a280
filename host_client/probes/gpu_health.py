"""GPU memory health (row remapping, retired pages, uncorrectable ECC) and hardware clock slowdowns (issue 35).

Readings come from NVML (``read_nvml``) or, where NVML is missing, from ``nvidia-smi -q`` (``parse_smi_q``); both give
per GPU index {"remap": (correctable rows, uncorrectable rows, pending, failure) or None, "pages_pending": bool or
None, "ecc_unc": volatile uncorrectable count or None, "reasons": clock event reason bits or None}.

Levels (NVIDIA's "GPU Memory Error Management" document, docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/): a remap
pending means the GPU must be reset for the spare row to take effect: GPU_RESET_PENDING (P1, "reset at the next
drain"); a remap failure (no spare row left in that bank) is the document's RMA path: GPU_MEMORY_ERROR (P0).
Throttling (NVML's clocks event reasons): HW slowdown, HW thermal slowdown and HW power brake held longer than a
window are GPU_THROTTLE (P1); the SW power cap (the power limit at work) is not a fault.
"""

from typing import Any

from . import events

HW_SLOWDOWN = 0x8
SW_POWER_CAP = 0x4
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
HW_REASONS = {HW_SLOWDOWN: "HW slowdown", HW_THERMAL: "HW thermal slowdown", HW_POWER_BRAKE: "HW power brake"}


def _call(fn, *args):
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - NotSupported on a GPU without the feature, GpuIsLost: unknown this time
        return None


def read_nvml(nvml, handles, *, memory=True):
    """{index: health} for the open handles; ``memory`` False reads only the clock reasons (the cheap part)."""
    out = {}
    reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    for i, h in enumerate(handles):
        if h is None:
            continue
        r = {"reasons": _call(reasons_fn, h) if reasons_fn else None}
        if memory:
            rows = _call(nvml.nvmlDeviceGetRemappedRows, h)
            r["remap"] = tuple(rows) if rows is not None else None
            pend = _call(nvml.nvmlDeviceGetRetiredPagesPendingStatus, h)
            r["pages_pending"] = None if pend is None else bool(pend)
            r["ecc_unc"] = _call(
                nvml.nvmlDeviceGetTotalEccErrors, h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            )
        out[i] = r
    return out


def parse_smi_q(text):
    """``nvidia-smi -q`` -> {bus id as printed: health}. Sections are indented "Name : value" rows under a
    "GPU 00000000:3B:00.0" header; an older driver's "Clocks Throttle Reasons" is the same section."""
    out: dict[str, dict[str, Any]] = {}
    cur: dict[str, Any] | None = None
    path: list[str] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        if raw.startswith("GPU ") and ":" in raw[4:]:
            cur = out[raw[4:].strip()] = {"remap": None, "pages_pending": None, "ecc_unc": None, "reasons": None}
            path = []
            continue
        if cur is None:
            continue
        depth = (len(raw) - len(raw.lstrip(" "))) // 4
        name, sep, value = raw.strip().partition(":")
        name, value = name.strip(), value.strip()
        del path[max(0, depth - 1) :]
        if not sep or not value:
            path.append(name)
            continue
        where = " / ".join(path + [name])
        where_l = where.lower()
        if where_l.startswith("remapped rows"):
            rows: list[Any] = list(cur["remap"] or (0, 0, False, False))
            if name == "Correctable Error" and value.isdigit():
                rows[0] = int(value)
            elif name == "Uncorrectable Error" and value.isdigit():
                rows[1] = int(value)
            elif name == "Pending":
                rows[2] = value == "Yes"
            elif name == "Remapping Failure Occurred":
                rows[3] = value == "Yes"
            cur["remap"] = tuple(rows)
        elif where_l.startswith("retired pages") and name in ("Pending Page Blacklist", "Pending"):
            cur["pages_pending"] = value == "Yes"
        elif where_l.startswith("ecc errors / volatile") and value.isdigit():
            if name in ("DRAM Uncorrectable", "SRAM Uncorrectable") or where.endswith("Double Bit / Total"):
                cur["ecc_unc"] = (cur["ecc_unc"] or 0) + int(value)
        elif where_l.startswith(("clocks event reasons", "clocks throttle reasons")):
            bit = {
                "SW Power Cap": SW_POWER_CAP,
                "HW Slowdown": HW_SLOWDOWN,
                "HW Thermal Slowdown": HW_THERMAL,
                "HW Power Brake Slowdown": HW_POWER_BRAKE,
                "SW Thermal Slowdown": SW_THERMAL,
            }.get(name)
            if bit is not None:
                cur["reasons"] = (cur["reasons"] or 0) | (bit if value == "Active" else 0)
    return out


class HealthChecker:
    """Findings from health readings. Memory conditions stand while the source says so; a throttle stands once
    its HW reason has been held ``throttle_s`` and clears when the reason is gone."""

    def __init__(self, *, throttle_s=10.0):
        self.throttle_s = float(throttle_s)
        self.held = {}  # index -> (reason bits, since)
        self.memory = {}  # index -> the last memory findings (kept between memory reads)

    def check(self, health, now):
        out = []
        for i, r in sorted(health.items()):
            if "remap" in r and any(r.get(k) is not None for k in ("remap", "pages_pending", "ecc_unc")):
                self.memory[i] = _memory(i, r)  # a memory read that gave nothing keeps what stood (unknown)
            out.extend(self.memory.get(i, ()))
            bits = (r.get("reasons") or 0) & (HW_SLOWDOWN | HW_THERMAL | HW_POWER_BRAKE)
            if not bits:
                self.held.pop(i, None)
                continue
            prev = self.held.get(i)
            since = prev[1] if prev is not None else now
            self.held[i] = (bits, since)
            if now - since >= self.throttle_s:
                names = ", ".join(n for b, n in HW_REASONS.items() if bits & b)
                out.append(
                    events.Finding(
                        ("throttle", i),
                        events.GPU_THROTTLE,
                        i,
                        "GPU %d clocks held down by %s for %.0f s" % (i, names, now - since),
                        reasons=names,
                    )
                )
        return out


def _memory(i, r):
    remap = r.get("remap")
    unc = r.get("ecc_unc") or 0
    if remap is not None and remap[3]:
        return [
            events.Finding(
                ("memory", i),
                events.GPU_MEMORY_ERROR,
                i,
                "GPU %d row remapping failed (%d uncorrectable rows remapped): no spare row, the GPU needs service"
                % (i, remap[1]),
            )
        ]
    why = []
    if remap is not None and remap[2]:
        why.append("a row remap is pending")
    if r.get("pages_pending"):
        why.append("retired pages are pending")
    if unc and not why:
        why.append("%d volatile uncorrectable ECC errors" % unc)
    if why:
        return [
            events.Finding(
                ("memory_reset", i),
                events.GPU_RESET_PENDING,
                i,
                "GPU %d: %s; reset the GPU at the next drain" % (i, " and ".join(why)),
            )
        ]
    return []
