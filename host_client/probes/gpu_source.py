"""Where GPU readings come from, behind one small interface so the checks never know.

A source has ``devices()`` (static facts per GPU, read once) and ``sample()`` (one reading per GPU, a plain
dict). Fields a source cannot read are None; the checks treat None as "unknown", never as a fault.

Device facts: index, uuid, name, pci (normalised (domain, bus, device)), bus_id (as printed), max_gen,
max_width, temp_slowdown, temp_max (the GPU's own NVML thresholds), nvlinks (number of links).
Reading: index, gen, width, pstate (0 = P0), temp, util, mem_util, procs (running compute processes),
nvlink (dict "link:counter" -> cumulative error count, or None when not read this sample), lost (True when
the GPU stopped answering; informational: the kernel log reports that as XID 79).
"""

import csv
import io
import json
import subprocess

from .xid import pci_key

NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")


class SourceError(Exception):
    """The source cannot be used at all (no driver, no nvidia-smi, unreadable replay file)."""


class NvmlSource:
    """The real thing, through pynvml (package nvidia-ml-py)."""

    name = "nvml"

    def __init__(self, nvml=None, nvlink_every=5):
        # NVLink counters cost 4 NVML calls per link (72 per GPU on an 18-link H100): read them every
        # ``nvlink_every`` samples; an increase is still seen within that many intervals.
        self.nvlink_every = max(1, int(nvlink_every))
        self._count = 0
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError as e:
                raise SourceError("pynvml is not installed (pip install nvidia-ml-py)") from e
        self.nvml = nvml
        try:
            nvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            raise SourceError("NVML unavailable: %s" % (e,)) from e
        self._handles = []
        self._devices = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            self._handles.append(h)
            self._devices.append(self._device(i, h))

    def _try(self, fn, *args):
        try:
            return fn(*args)
        except Exception:  # NVMLError_NotSupported / NoPermission / GpuIsLost: unknown, not a fault
            return None

    def _device(self, i, h):
        n = self.nvml
        pci = self._try(n.nvmlDeviceGetPciInfo, h)
        bus_id = getattr(pci, "busId", None) if pci is not None else None
        if isinstance(bus_id, bytes):
            bus_id = bus_id.decode("ascii", "replace")
        name = self._try(n.nvmlDeviceGetName, h)
        uuid = self._try(n.nvmlDeviceGetUUID, h)
        links = 0
        for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
            if self._try(n.nvmlDeviceGetNvLinkState, h, link) is None:
                break
            links += 1
        return {
            "index": i,
            "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
            "name": name.decode() if isinstance(name, bytes) else name,
            "bus_id": bus_id,
            "pci": pci_key(bus_id),
            # The link's maximum is what GPU and slot can both do: a Gen5 card in a Gen4 slot is not degraded.
            "max_gen": self._try(n.nvmlDeviceGetMaxPcieLinkGeneration, h),
            "max_width": self._try(n.nvmlDeviceGetMaxPcieLinkWidth, h),
            "temp_slowdown": self._try(n.nvmlDeviceGetTemperatureThreshold, h,
                                       n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
            "temp_max": self._try(n.nvmlDeviceGetTemperatureThreshold, h, n.NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
            "nvlinks": links,
        }

    def devices(self):
        return list(self._devices)

    def sample(self):
        n = self.nvml
        out = []
        counters = (("replay", n.NVML_NVLINK_ERROR_DL_REPLAY), ("recovery", n.NVML_NVLINK_ERROR_DL_RECOVERY),
                    ("crc_flit", n.NVML_NVLINK_ERROR_DL_CRC_FLIT), ("crc_data", n.NVML_NVLINK_ERROR_DL_CRC_DATA))
        links_now = self._count % self.nvlink_every == 0
        self._count += 1
        for dev, h in zip(self._devices, self._handles, strict=True):
            util = self._try(n.nvmlDeviceGetUtilizationRates, h)
            temp = self._try(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
            procs = self._try(n.nvmlDeviceGetComputeRunningProcesses, h)
            nvlink = {} if links_now else None
            for link in range(dev["nvlinks"] if links_now else 0):
                for cname, cid in counters:
                    v = self._try(n.nvmlDeviceGetNvLinkErrorCounter, h, link, cid)
                    if v is not None:
                        nvlink["%d:%s" % (link, cname)] = int(v)
            r = {
                "index": dev["index"],
                "gen": self._try(n.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "width": self._try(n.nvmlDeviceGetCurrPcieLinkWidth, h),
                "pstate": self._try(n.nvmlDeviceGetPerformanceState, h),
                "temp": temp,
                "util": None if util is None else util.gpu,
                "mem_util": None if util is None else util.memory,
                "procs": None if procs is None else len(procs),
                "nvlink": nvlink,
                "lost": temp is None and util is None,
            }
            out.append(r)
        return out

    def close(self):
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass


# The seed's query, grown by the fields that make its rule safe (pstate, maxima, utilisation).
SMI_FIELDS = ("index", "pci.bus_id", "pcie.link.gen.current", "pcie.link.width.current", "temperature.gpu",
              "utilization.gpu", "pstate", "pcie.link.gen.max", "pcie.link.width.max")
SEED_FIELDS = SMI_FIELDS[:5]


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


def parse_smi_csv(text, fields=SMI_FIELDS):
    """Parse ``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`` into (devices, readings).

    ``fields`` may be the seed's five columns (SEED_FIELDS): without a P-state the generation rule cannot tell
    power saving from a fault and stays silent, but width and temperature still apply (the seed's rule).
    """
    devices, readings = [], []
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not row or not "".join(row).strip():
            continue
        if len(row) != len(fields):
            raise SourceError("nvidia-smi line %d has %d fields, expected %d" % (lineno, len(row), len(fields)))
        v = dict(zip(fields, (c.strip() for c in row), strict=True))
        idx = _smi_num(v["index"])
        if not isinstance(idx, int):
            raise SourceError("nvidia-smi line %d: bad GPU index %r" % (lineno, v["index"]))
        pstate = v.get("pstate")
        p = None
        if pstate and pstate[:1] in "Pp" and pstate[1:].isdigit():
            p = int(pstate[1:])
        devices.append({"index": idx, "uuid": None, "name": None, "bus_id": v["pci.bus_id"],
                        "pci": pci_key(v["pci.bus_id"]),
                        "max_gen": _smi_num(v.get("pcie.link.gen.max", "")) or SEED_MIN_GEN,
                        "max_width": _smi_num(v.get("pcie.link.width.max", "")) or SEED_MIN_WIDTH,
                        "temp_slowdown": None,
                        "temp_max": None, "nvlinks": 0})
        readings.append({"index": idx, "gen": _smi_num(v["pcie.link.gen.current"]),
                         "width": _smi_num(v["pcie.link.width.current"]), "pstate": p,
                         "temp": _smi_num(v["temperature.gpu"]), "util": _smi_num(v.get("utilization.gpu", "")),
                         "mem_util": None, "procs": None, "nvlink": {}, "lost": False})
    return devices, readings


class SmiSource:
    """Fallback when NVML cannot be loaded: one nvidia-smi run per sample."""

    name = "nvidia-smi"

    def __init__(self, binary="nvidia-smi", runner=None, timeout=10.0):
        self.binary = binary
        self.timeout = timeout
        self._run = runner or self._subprocess
        self._devices, _ = self._query()

    def _subprocess(self, argv):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SourceError("cannot run %s: %s" % (argv[0], e)) from e
        if p.returncode != 0:
            raise SourceError("%s exited %d: %s" % (argv[0], p.returncode, p.stderr.strip()[:200]))
        return p.stdout

    def _query(self):
        out = self._run([self.binary, "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits"])
        return parse_smi_csv(out)

    def devices(self):
        return list(self._devices)

    def sample(self):
        return self._query()[1]

    def close(self):
        pass


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
        if not isinstance(data, dict) or not isinstance(data.get("devices"), list) \
                or not isinstance(data.get("frames"), list) or not data["frames"]:
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


class FakeSource:
    """A programmable source for tests and benchmarks: ``set(index, **fields)`` changes what the next sample sees."""

    name = "fake"

    def __init__(self, count=8, max_gen=5, max_width=16, temp_slowdown=87, temp_max=90, nvlinks=0):
        self._devices = []
        self._state = {}
        for i in range(count):
            bus = "00000000:%02X:00.0" % (0x18 + 0x10 * i)
            self._devices.append({"index": i, "uuid": "GPU-fake-%d" % i, "name": "Fake H100", "bus_id": bus,
                                  "pci": pci_key(bus), "max_gen": max_gen, "max_width": max_width,
                                  "temp_slowdown": temp_slowdown, "temp_max": temp_max, "nvlinks": nvlinks})
            r = _reading_defaults(i)
            r.update(gen=max_gen, width=max_width, pstate=0, temp=55, util=97, mem_util=40, procs=1,
                     nvlink={"%d:%s" % (link, c): 0 for link in range(nvlinks) for c in NVLINK_COUNTERS})
            self._state[i] = r
        self.samples = 0

    def set(self, index, **fields):
        self._state[index].update(fields)

    def devices(self):
        return list(self._devices)

    def sample(self):
        self.samples += 1
        return [dict(r, nvlink=dict(r["nvlink"])) for r in self._state.values()]

    def close(self):
        pass


def _device_defaults(d):
    out = {"index": None, "uuid": None, "name": None, "bus_id": None, "pci": None, "max_gen": None,
           "max_width": None, "temp_slowdown": None, "temp_max": None, "nvlinks": 0}
    out.update(d)
    if not isinstance(out["index"], int):
        raise SourceError("replay device without an integer index: %r" % (d,))
    if out["pci"] is None and out["bus_id"]:
        out["pci"] = pci_key(out["bus_id"])
    elif isinstance(out["pci"], list):
        out["pci"] = tuple(out["pci"])
    return out


def _reading_defaults(i):
    return {"index": i, "gen": None, "width": None, "pstate": None, "temp": None, "util": None,
            "mem_util": None, "procs": None, "nvlink": {}, "lost": False}


def open_source(kind, replay=None, smi_binary="nvidia-smi"):
    """kind: auto (NVML, else nvidia-smi, else None), nvml, smi, replay, none."""
    if kind == "none":
        return None
    if kind == "replay":
        return ReplaySource(replay)
    if kind == "nvml":
        return NvmlSource()
    if kind == "smi":
        return SmiSource(smi_binary)
    if kind == "auto":
        errors = []
        for make in (NvmlSource, lambda: SmiSource(smi_binary)):
            try:
                return make()
            except SourceError as e:
                errors.append(str(e))
        raise SourceError("no GPU source: " + "; ".join(errors))
    raise SourceError("unknown GPU source %r" % (kind,))
