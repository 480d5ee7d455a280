"""Where GPU readings come from, behind one small interface so the checks never know.

A source has ``devices()`` (static facts per GPU, read once) and ``sample()`` (one reading per GPU, a plain
dict). Fields a source cannot read are None; the checks treat None as "unknown", never as a fault.

Device facts: index, uuid, name, pci (normalised (domain, bus, device)), bus_id (as printed), max_gen,
max_width, temp_slowdown, temp_max (the GPU's own NVML thresholds), nvlinks (number of links), power_limit_w,
lost (True when the GPU could not even be opened: NVML's handle or nvidia-smi's "Unable to determine the device
handle"), error (why, e.g. "NVMLError_GpuIsLost").
Reading: index, gen, width, pstate (0 = P0), temp, util, mem_util, power_w, pcie_mbps (rx + tx), procs (running
compute processes), nvlink (dict "link:counter" -> cumulative error count, or None when not read this sample), lost
(True when the GPU stopped answering: the GPU_LOST finding), error.

Never crash, never go blind (issue 11): every NVML call that can fail for one GPU is guarded for that GPU, a lost
GPU is a reading with lost=True while the others are still read, and where NVML cannot give a capability the next
source is asked for it (NVML -> nvidia-smi -> /proc/driver/nvidia/gpus), per capability, not all or nothing:
``FallbackSource`` fills the fields NVML failed to read from one nvidia-smi run, and the bus ids of GPUs NVML cannot
open from the driver's own list.
"""

import csv
import io
import json
import os
import re
import subprocess

from host_client.errors import SentinelError

from .xid import pci_key

NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")
PROC_GPUS = "/proc/driver/nvidia/gpus"
# NVML errors that mean the GPU itself is gone (not "this GPU cannot do that")
LOST_ERRORS = ("NVMLError_GpuIsLost", "NVMLError_Unknown", "NVMLError_GpuNotFound")
# the reading fields nvidia-smi can fill in when NVML failed on them
SMI_FILLS = ("gen", "width", "pstate", "temp", "util", "power_w")


class SourceError(SentinelError):
    """The source cannot be used at all (no driver, no nvidia-smi, unreadable replay file)."""


def proc_bus_ids(root=PROC_GPUS):
    """The driver's own list of GPUs (one directory per bus id), in PCI order: what NVML numbers as 0, 1, ..."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    keyed = [(pci_key(n), n) for n in names]
    return [n for k, n in sorted((k, n) for k, n in keyed if k is not None)]


def _err_name(e):
    return type(e).__name__


class NvmlSource:
    """The real thing, through pynvml (package nvidia-ml-py). Per GPU, per call guarded."""

    name = "nvml"

    def __init__(self, nvml=None, *, nvlink_every=5, proc_root=PROC_GPUS, reopen_every=30):
        # NVLink counters cost 4 NVML calls per link (72 per GPU on an 18-link H100): read them every
        # ``nvlink_every`` samples; an increase is still seen within that many intervals. PCIe throughput (two calls
        # that each sample for 20 ms) is read at the same cadence, and only where it can decide the idle rule.
        self.nvlink_every = max(1, int(nvlink_every))
        self.reopen_every = max(1, int(reopen_every))
        self._count = 0
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError as e:
                raise SourceError("pynvml is not installed (pip install nvidia-ml-py)") from e
        self.nvml = nvml
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            raise SourceError("NVML unavailable: %s" % (e,)) from e
        self.failures = {}  # (index, call) -> error name, the last failure of each call (for /status and tests)
        self.generation = 0  # bumped when a device's facts change (a lost GPU opened again): callers re-read devices()
        buses = proc_bus_ids(proc_root)
        self._proc_buses = buses if len(buses) == count else []
        self._handles = []
        self._devices = []
        for i in range(count):
            h, err = self._open(i)
            self._handles.append(h)
            self._devices.append(self._device(i, h, err))

    def _open(self, i):
        try:
            return self.nvml.nvmlDeviceGetHandleByIndex(i), None
        except Exception as e:  # noqa: BLE001 - NVMLError_GpuIsLost / NVMLError_Unknown on a node with a dead GPU
            self.failures[(i, "nvmlDeviceGetHandleByIndex")] = _err_name(e)
            return None, _err_name(e)

    def _try(self, i, fn, *args, lost=None):
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - NotSupported/NoPermission: unknown; GpuIsLost: lost
            name = _err_name(e)
            self.failures[(i, getattr(fn, "__name__", "call"))] = name
            if lost is not None and name in LOST_ERRORS:
                lost.append(name)
            return None

    def _device(self, i, h, err=None):
        n = self.nvml
        if h is None:
            bus = self._proc_buses[i] if self._proc_buses else None
            return {
                "index": i,
                "uuid": None,
                "name": None,
                "bus_id": bus,
                "pci": pci_key(bus),
                "max_gen": None,
                "max_width": None,
                "temp_slowdown": None,
                "temp_max": None,
                "nvlinks": 0,
                "power_limit_w": None,
                "lost": True,
                "error": err,
            }
        pci = self._try(i, n.nvmlDeviceGetPciInfo, h)
        bus_id = getattr(pci, "busId", None) if pci is not None else None
        if isinstance(bus_id, bytes):
            bus_id = bus_id.decode("ascii", "replace")
        if not bus_id and self._proc_buses:
            bus_id = self._proc_buses[i]
        name = self._try(i, n.nvmlDeviceGetName, h)
        uuid = self._try(i, n.nvmlDeviceGetUUID, h)
        links = 0
        for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
            if self._try(i, n.nvmlDeviceGetNvLinkState, h, link) is None:
                break
            links += 1
        limit = self._try(i, getattr(n, "nvmlDeviceGetEnforcedPowerLimit", _missing), h)
        return {
            "index": i,
            "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
            "name": name.decode() if isinstance(name, bytes) else name,
            "bus_id": bus_id,
            "pci": pci_key(bus_id),
            # The link's maximum is what GPU and slot can both do: a Gen5 card in a Gen4 slot is not degraded.
            "max_gen": self._try(i, n.nvmlDeviceGetMaxPcieLinkGeneration, h),
            "max_width": self._try(i, n.nvmlDeviceGetMaxPcieLinkWidth, h),
            "temp_slowdown": self._try(
                i, n.nvmlDeviceGetTemperatureThreshold, h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
            ),
            "temp_max": self._try(i, n.nvmlDeviceGetTemperatureThreshold, h, n.NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
            "nvlinks": links,
            "power_limit_w": None if limit is None else limit / 1000.0,
            "lost": False,
            "error": None,
        }

    def devices(self):
        return list(self._devices)

    def sample(self):
        n = self.nvml
        out = []
        counters = (
            ("replay", n.NVML_NVLINK_ERROR_DL_REPLAY),
            ("recovery", n.NVML_NVLINK_ERROR_DL_RECOVERY),
            ("crc_flit", n.NVML_NVLINK_ERROR_DL_CRC_FLIT),
            ("crc_data", n.NVML_NVLINK_ERROR_DL_CRC_DATA),
        )
        links_now = self._count % self.nvlink_every == 0
        reopen = self._count % self.reopen_every == 0
        self._count += 1
        for i, dev in enumerate(self._devices):
            h = self._handles[i]
            if h is None and reopen and self._count > 1:
                # a GPU lost at start, or since: try to open it again now and then (a reset brings it back)
                h, err = self._open(i)
                if h is not None:
                    self._handles[i] = h
                    self._devices[i] = dev = self._device(i, h)
                    self.generation += 1
            if h is None:
                out.append(dict(_reading_defaults(i), lost=True, error=dev.get("error") or "no handle"))
                continue
            lost = []
            util = self._try(i, n.nvmlDeviceGetUtilizationRates, h, lost=lost)
            temp = self._try(i, n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU, lost=lost)
            if lost and util is None and temp is None:
                # the GPU answers nothing: do not spend 20 more failing calls on it this round
                out.append(dict(_reading_defaults(i), lost=True, error=lost[0]))
                continue
            procs = self._try(i, n.nvmlDeviceGetComputeRunningProcesses, h, lost=lost)
            nvlink = None
            if links_now:
                nvlink = {}
                for link in range(dev["nvlinks"]):
                    for cname, cid in counters:
                        v = self._try(i, n.nvmlDeviceGetNvLinkErrorCounter, h, link, cid)
                        if v is not None:
                            nvlink["%d:%s" % (link, cname)] = int(v)
            power = self._try(i, getattr(n, "nvmlDeviceGetPowerUsage", _missing), h, lost=lost)
            gen = self._try(i, n.nvmlDeviceGetCurrPcieLinkGeneration, h, lost=lost)
            width = self._try(i, n.nvmlDeviceGetCurrPcieLinkWidth, h, lost=lost)
            pcie = None
            # PCIe throughput (a load signal) costs two calls that each sample for 20 ms: only when it can decide
            # something (a reduced link) and the power draw, the usual load signal, cannot be read
            degraded = (gen is not None and dev["max_gen"] and gen < dev["max_gen"]) or (
                width is not None and dev["max_width"] and width < dev["max_width"]
            )
            if links_now and power is None and degraded and hasattr(n, "nvmlDeviceGetPcieThroughput"):
                tx = self._try(i, n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_TX_BYTES)
                rx = self._try(i, n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_RX_BYTES)
                if tx is not None and rx is not None:
                    pcie = (tx + rx) / 1000.0  # KB/s -> MB/s
            r = {
                "index": dev["index"],
                "gen": gen,
                "width": width,
                "pstate": self._try(i, n.nvmlDeviceGetPerformanceState, h, lost=lost),
                "temp": temp,
                "util": None if util is None else util.gpu,
                "mem_util": None if util is None else util.memory,
                "power_w": None if power is None else power / 1000.0,
                "pcie_mbps": pcie,
                "procs": None if procs is None else len(procs),
                "nvlink": nvlink,
                "lost": "NVMLError_GpuIsLost" in lost,
                "error": lost[0] if lost else None,
            }
            out.append(r)
        return out

    def health(self, *, memory=True):
        """Memory health and clock event reasons per GPU (gpu_health.read_nvml)."""
        from .gpu_health import read_nvml

        return read_nvml(self.nvml, self._handles, memory=memory)

    def close(self):
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - closing NVML at exit: nothing left to do if it fails
            pass


def _missing(*_args):
    raise AttributeError("not in this pynvml")


# The seed's query, grown by the fields that make its rule safe (pstate, maxima, utilisation).
SMI_FIELDS = (
    "index",
    "pci.bus_id",
    "pcie.link.gen.current",
    "pcie.link.width.current",
    "temperature.gpu",
    "utilization.gpu",
    "pstate",
    "pcie.link.gen.max",
    "pcie.link.width.max",
)
SEED_FIELDS = SMI_FIELDS[:5]
# what SmiSource asks for: also the power draw, one of the load signals of the idle rule
SMI_QUERY = SMI_FIELDS + ("power.draw", "enforced.power.limit")


def _smi_num(text):
    t = text.strip()
    if not t or t.startswith("[") or t.upper() in ("N/A", "NOT SUPPORTED"):
        return None
    try:
        return float(t) if "." in t else int(t)
    except ValueError:
        return None


# The seed's expectation for Hopper/Blackwell nodes, used when nvidia-smi cannot tell the link's maximum.
SEED_MIN_GEN = 4
SEED_MIN_WIDTH = 16
# nvidia-smi prints this in place of a GPU's row (the others still follow): "Unable to determine the device handle
# for GPU 0000:0B:00.0: Unknown Error" (also "GPU0000:65:00.0", and "Unable to detect" on Windows builds); current
# drivers put the index first: "Unable to determine the device handle for GPU0: 0000:01:00.0: Unknown Error"
_NO_HANDLE = re.compile(
    r"Unable to (?:determine|detect) the device handle for GPU ?(?:(\d+): )?((?:[0-9A-Fa-f]+:)?[0-9A-Fa-f]+:"
    r"[0-9A-Fa-f]+\.?[0-9A-Fa-f]*):\s*(.*)"
)


def parse_smi_csv(text, fields=SMI_FIELDS, known=None):
    """Parse ``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`` into (devices, readings), row by row.

    ``fields`` may be the seed's five columns (SEED_FIELDS): without a P-state the generation rule cannot tell
    power saving from a fault and stays silent, but width and temperature still apply (the seed's rule).
    An "Unable to determine the device handle for GPU <bus>: <error>" row is that GPU, lost: a device with lost=True
    and a lost reading, numbered by ``known`` (bus key -> index, from an earlier run) or else by its place among
    the rows (nvidia-smi lists GPUs in index order). A row that is neither is skipped; only output with no usable
    row at all is a SourceError.
    """
    devices, readings, bad = [], [], []
    pos = 0
    for lineno, line in enumerate(io.StringIO(text), 1):
        if not line.strip():
            continue
        m = _NO_HANDLE.search(line)
        if m:
            key = pci_key(m.group(2))
            printed = int(m.group(1)) if m.group(1) is not None else None
            idx = (known or {}).get(key, printed if printed is not None else pos)
            pos += 1
            err = m.group(3).strip() or "Unknown Error"
            devices.append(
                dict(_device_defaults({"index": idx, "bus_id": m.group(2), "pci": key}), lost=True, error=err)
            )
            readings.append(dict(_reading_defaults(idx), lost=True, error=err))
            continue
        row = next(csv.reader([line]))
        if len(row) != len(fields):
            bad.append("nvidia-smi line %d has %d fields, expected %d" % (lineno, len(row), len(fields)))
            continue
        v = dict(zip(fields, (c.strip() for c in row), strict=True))
        idx = _smi_num(v["index"])
        if not isinstance(idx, int):
            bad.append("nvidia-smi line %d: bad GPU index %r" % (lineno, v["index"]))
            continue
        pos += 1
        pstate = v.get("pstate")
        p = None
        if pstate and pstate[:1] in "Pp" and pstate[1:].isdigit():
            p = int(pstate[1:])
        limit = _smi_num(v.get("enforced.power.limit", ""))
        devices.append(
            dict(
                _device_defaults(
                    {
                        "index": idx,
                        "bus_id": v["pci.bus_id"],
                        "pci": pci_key(v["pci.bus_id"]),
                        "max_gen": _smi_num(v.get("pcie.link.gen.max", "")) or SEED_MIN_GEN,
                        "max_width": _smi_num(v.get("pcie.link.width.max", "")) or SEED_MIN_WIDTH,
                    }
                ),
                power_limit_w=limit,
            )
        )
        readings.append(
            dict(
                _reading_defaults(idx),
                gen=_smi_num(v["pcie.link.gen.current"]),
                width=_smi_num(v["pcie.link.width.current"]),
                pstate=p,
                temp=_smi_num(v["temperature.gpu"]),
                util=_smi_num(v.get("utilization.gpu", "")),
                power_w=_smi_num(v.get("power.draw", "")),
            )
        )
    if bad and not devices:
        raise SourceError(bad[0])
    return devices, readings


NO_DEVICES = "No devices were found"


class SmiSource:
    """Fallback when NVML cannot be loaded: one nvidia-smi run per sample, parsed row by row."""

    name = "nvidia-smi"

    def __init__(self, binary="nvidia-smi", runner=None, timeout=10.0, fields=SMI_QUERY):
        self.binary = binary
        self.timeout = timeout
        self.fields = fields
        self._run = runner or self._subprocess
        try:
            self._devices, _ = self._query()
        except SourceError:
            if self.fields == SMI_FIELDS:
                raise
            # an older nvidia-smi refuses a field it does not know (the power columns): ask for the base set
            self.fields = SMI_FIELDS
            self._devices, _ = self._query()
        self._known = {d["pci"]: d["index"] for d in self._devices if d["pci"]}

    def _subprocess(self, argv):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SourceError("cannot run %s: %s" % (argv[0], e)) from e
        # one lost GPU makes nvidia-smi exit non-zero while it still lists the others: judge the rows, not the code
        out = (p.stdout or "") + (p.stderr or "" if "Unable to determine" in (p.stderr or "") else "")
        if p.returncode != 0 and not out.strip():
            raise SourceError("%s exited %d: %s" % (argv[0], p.returncode, p.stderr.strip()[:200]))
        return out

    def _query(self, known=None):
        out = self._run([self.binary, "--query-gpu=" + ",".join(self.fields), "--format=csv,noheader,nounits"])
        if NO_DEVICES in out and getattr(self, "_devices", None):
            return self._devices, self._all_lost()
        return parse_smi_csv(out, self.fields, known)

    def devices(self):
        return list(self._devices)

    def sample(self):
        try:
            return self._query(self._known)[1]
        except SourceError as e:
            if NO_DEVICES in str(e) and self._devices:
                return self._all_lost()
            raise

    def _all_lost(self):
        # the driver lost every GPU it had (RmInitAdapter failed, fallen off the bus): nvidia-smi answers "No
        # devices were found" on a node that had GPUs. Each known GPU is lost, not "no GPUs any more".
        return [dict(_reading_defaults(d["index"]), lost=True, error=NO_DEVICES) for d in self._devices]

    def health(self, *, memory=True):
        """``nvidia-smi -q`` for the memory sections and the clock event reasons, by GPU index."""
        from .gpu_health import parse_smi_q

        try:
            out = self._run([self.binary, "-q", "-d", "ECC,PERFORMANCE,ROW_REMAPPER,PAGE_RETIREMENT"])
        except SourceError:
            return {}
        by_bus = parse_smi_q(out)
        res = {}
        for bus, h in by_bus.items():
            idx = self._known.get(pci_key(bus))
            if idx is not None:
                if not memory:
                    h = {"reasons": h["reasons"]}
                res[idx] = h
        return res

    def close(self):
        pass


class ProcSource:
    """Last resort: the driver's own list (/proc/driver/nvidia/gpus/<bus>/information). No readings (every field
    unknown), but the GPUs are numbered, so a kernel-log XID still names its GPU."""

    name = "proc"

    def __init__(self, root=PROC_GPUS):
        buses = proc_bus_ids(root)
        if not buses:
            raise SourceError("no GPUs listed in %s" % root)
        self._devices = []
        for i, bus in enumerate(buses):
            model = None
            try:
                with open(os.path.join(root, bus, "information"), encoding="utf-8", errors="replace") as f:
                    for line in f:
                        if line.startswith("Model:"):
                            model = line.split(":", 1)[1].strip()
            except OSError:
                pass
            self._devices.append(_device_defaults({"index": i, "bus_id": bus, "pci": pci_key(bus), "name": model}))

    def devices(self):
        return list(self._devices)

    def sample(self):
        return [_reading_defaults(d["index"]) for d in self._devices]

    def close(self):
        pass


class FallbackSource:
    """NVML first; for each reading field NVML failed to read on a GPU that still answers, nvidia-smi's value (one
    run serves all GPUs of that sample). nvidia-smi is tried again at most every ``retry_s`` when it is missing."""

    def __init__(self, primary, smi_factory, *, clock=None, retry_s=60.0):
        import time

        self.primary = primary
        self.name = primary.name
        self._factory = smi_factory
        self._smi = None
        self._clock = clock or time.monotonic
        self._retry_s = retry_s
        self._next_try = 0.0
        self.filled = 0  # fields filled from nvidia-smi so far

    def devices(self):
        return self.primary.devices()

    @property
    def failures(self):
        return getattr(self.primary, "failures", {})

    @property
    def generation(self):
        return getattr(self.primary, "generation", 0)

    def _secondary(self):
        if self._smi is None and self._clock() >= self._next_try:
            try:
                self._smi = self._factory()
            except SourceError:
                self._next_try = self._clock() + self._retry_s
        return self._smi

    def sample(self):
        readings = self.primary.sample()
        devs = {d["index"]: d for d in self.primary.devices()}
        gaps = [
            r for r in readings if not r.get("lost") and r.get("error") and any(r.get(f) is None for f in SMI_FILLS)
        ]
        if not gaps:
            return readings
        smi = self._secondary()
        if smi is None:
            return readings
        try:
            other = smi.sample()
        except SourceError:
            return readings
        by_pci = {}
        for d, r in zip(smi.devices(), other, strict=False):
            by_pci[d.get("pci")] = r
        by_index = {r["index"]: r for r in other}
        for r in gaps:
            pci = devs.get(r["index"], {}).get("pci")
            o = by_pci.get(pci) if pci is not None else by_index.get(r["index"])
            if o is None or o.get("lost"):
                continue
            for f in SMI_FILLS:
                if r.get(f) is None and o.get(f) is not None:
                    r[f] = o[f]
                    self.filled += 1
        return readings

    def health(self, *, memory=True):
        fn = getattr(self.primary, "health", None)
        return fn(memory=memory) if fn is not None else {}

    def close(self):
        self.primary.close()


class ReplaySource:
    """Recorded readings played back one frame per sample; the last frame repeats once the recording ends.

    File format (JSON): {"devices": [device facts...], "frames": [[reading, ...], ...]}; a reading may omit
    fields (None), and may give only the fields that change: each frame is merged over the previous one.
    """

    name = "replay"

    def __init__(self, data):
        if isinstance(data, str):
            try:
                with open(data, encoding="utf-8") as f:
                    data = json.load(f)
            except (OSError, ValueError) as e:
                raise SourceError("cannot read NVML replay %s: %s" % (data, e)) from e
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("devices"), list)
            or not isinstance(data.get("frames"), list)
            or not data["frames"]
        ):
            raise SourceError("NVML replay needs a 'devices' list and a non-empty 'frames' list")
        self._devices = [_device_defaults(d) for d in data["devices"]]
        self._frames = data["frames"]
        self._pos = 0
        self._state = {d["index"]: _reading_defaults(d["index"]) for d in self._devices}

    def devices(self):
        return list(self._devices)

    def sample(self):
        frame = self._frames[min(self._pos, len(self._frames) - 1)]
        self._pos += 1
        for r in frame:
            cur = self._state.setdefault(r["index"], _reading_defaults(r["index"]))
            cur.update(r)
        return [dict(v) for v in self._state.values()]

    def close(self):
        pass


def _device_defaults(d):
    out = {
        "index": None,
        "uuid": None,
        "name": None,
        "bus_id": None,
        "pci": None,
        "max_gen": None,
        "max_width": None,
        "temp_slowdown": None,
        "temp_max": None,
        "nvlinks": 0,
        "power_limit_w": None,
        "lost": False,
        "error": None,
    }
    out.update(d)
    if not isinstance(out["index"], int):
        raise SourceError("replay device without an integer index: %r" % (d,))
    if out["pci"] is None and out["bus_id"]:
        out["pci"] = pci_key(out["bus_id"])
    elif isinstance(out["pci"], list):
        out["pci"] = tuple(out["pci"])
    return out


def _reading_defaults(i):
    return {
        "index": i,
        "gen": None,
        "width": None,
        "pstate": None,
        "temp": None,
        "util": None,
        "mem_util": None,
        "power_w": None,
        "pcie_mbps": None,
        "procs": None,
        "nvlink": {},
        "lost": False,
        "error": None,
    }


def open_source(kind, replay=None, smi_binary="nvidia-smi", proc_root=PROC_GPUS):
    """kind: auto (NVML with nvidia-smi filling what NVML cannot read, else nvidia-smi, else the driver's GPU list,
    else a SourceError), nvml, smi, replay, none."""
    if kind == "none":
        return None
    if kind == "replay":
        return ReplaySource(replay)
    if kind == "nvml":
        return NvmlSource(proc_root=proc_root)
    if kind == "smi":
        return SmiSource(smi_binary)
    if kind == "auto":
        errors = []
        try:
            return FallbackSource(NvmlSource(proc_root=proc_root), lambda: SmiSource(smi_binary))
        except SourceError as e:
            errors.append(str(e))
        for make in (lambda: SmiSource(smi_binary), lambda: ProcSource(proc_root)):
            try:
                return make()
            except SourceError as e:
                errors.append(str(e))
        raise SourceError("no GPU source: " + "; ".join(errors))
    raise SourceError("unknown GPU source %r" % (kind,))
