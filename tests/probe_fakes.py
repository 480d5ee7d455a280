"""Test doubles for the GPU probe (issue 14: fakes live with the tests, not in the package).

- ``FakeSource``: a programmable GPU source; ``set(index, **fields)`` changes what the next sample sees.
- ``FakeNvml``: pynvml's surface for ``NvmlSource``, raising pynvml's *real* exception classes
  (``pynvml.NVMLError_GpuIsLost``, ``NVMLError_Unknown``, ``NVMLError_NotSupported``) at any call site:
  ``fail("nvmlDeviceGetHandleByIndex", 3, pynvml.NVMLError_GpuIsLost)``.
"""

import pynvml

from host_client.probes.gpu_source import NVLINK_COUNTERS, _reading_defaults
from host_client.probes.xid import pci_key


class FakeSource:
    name = "fake"

    def __init__(
        self, count=8, *, max_gen=5, max_width=16, temp_slowdown=87, temp_max=90, nvlinks=0, power_limit_w=700.0
    ):
        self._devices = []
        self._state = {}
        for i in range(count):
            bus = "00000000:%02X:00.0" % (0x18 + 0x10 * i)
            self._devices.append(
                {
                    "index": i,
                    "uuid": "GPU-fake-%d" % i,
                    "name": "Fake H100",
                    "bus_id": bus,
                    "pci": pci_key(bus),
                    "max_gen": max_gen,
                    "max_width": max_width,
                    "temp_slowdown": temp_slowdown,
                    "temp_max": temp_max,
                    "nvlinks": nvlinks,
                    "power_limit_w": power_limit_w,
                    "lost": False,
                    "error": None,
                }
            )
            r = _reading_defaults(i)
            r.update(
                gen=max_gen,
                width=max_width,
                pstate=0,
                temp=55,
                util=97,
                mem_util=40,
                procs=1,
                power_w=560.0,
                nvlink={"%d:%s" % (link, c): 0 for link in range(nvlinks) for c in NVLINK_COUNTERS},
            )
            self._state[i] = r
        self.samples = 0

    def set(self, index, **fields):
        self._state[index].update(fields)

    def idle(self, index, **fields):
        """What an idle H100 reports: P0 (they sit in P0), 0 % utilisation, ~70 W, no processes."""
        self.set(index, **dict({"util": 0, "mem_util": 0, "power_w": 70.0, "procs": 0, "pstate": 0}, **fields))

    def devices(self):
        return list(self._devices)

    def sample(self):
        self.samples += 1
        return [dict(r, nvlink=dict(r["nvlink"])) for r in self._state.values()]

    def close(self):
        pass


class _Util:
    def __init__(self, gpu, memory):
        self.gpu = gpu
        self.memory = memory


class _Pci:
    def __init__(self, bus):
        self.busId = bus


class FakeNvml:
    """``count`` H100s. Constants and exception classes are pynvml's own (looked up on the real module)."""

    def __init__(self, count=8, *, nvlinks=0):
        self.count = count
        self.nvlinks = nvlinks
        self.failures = {}  # (call name, gpu index or None) -> exception class
        self.calls = 0
        self.util = dict.fromkeys(range(count), 97)
        self.gen = dict.fromkeys(range(count), 5)
        self.width = dict.fromkeys(range(count), 16)
        # memory health and clock event reasons (issue 35): what nvmlDeviceGetRemappedRows & co. answer per GPU
        self.remap = {i: [0, 0, 0, 0] for i in range(count)}  # correctable rows, uncorrectable rows, pending, failure
        self.pages_pending = dict.fromkeys(range(count), 0)
        self.ecc_unc = dict.fromkeys(range(count), 0)
        self.reasons = dict.fromkeys(range(count), 0)

    def __getattr__(self, name):  # NVML_* constants, NVMLError_* classes
        return getattr(pynvml, name)

    def fail(self, call, index, exc):
        self.failures[(call, index)] = exc

    def heal(self, call, index):
        self.failures.pop((call, index), None)

    def _check(self, call, index):
        self.calls += 1
        exc = self.failures.get((call, index)) or self.failures.get((call, "*"))
        if exc is not None:
            raise exc()

    # --- library ---
    def nvmlInit(self):
        self._check("nvmlInit", None)

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        self._check("nvmlDeviceGetCount", None)
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        self._check("nvmlDeviceGetHandleByIndex", i)
        return i

    # --- per device: each call site can be made to fail for one GPU ---
    def _dev(name, value):  # a method factory
        def call(self, h, *args):
            self._check(name, h)
            return value(self, h, *args)

        call.__name__ = name
        return call

    nvmlDeviceGetPciInfo = _dev("nvmlDeviceGetPciInfo", lambda s, h: _Pci(b"00000000:%02X:00.0" % (0x18 + 0x10 * h)))
    nvmlDeviceGetName = _dev("nvmlDeviceGetName", lambda s, h: "NVIDIA H100 80GB HBM3")
    nvmlDeviceGetUUID = _dev("nvmlDeviceGetUUID", lambda s, h: "GPU-%08d" % h)
    nvmlDeviceGetMaxPcieLinkGeneration = _dev("nvmlDeviceGetMaxPcieLinkGeneration", lambda s, h: 5)
    nvmlDeviceGetMaxPcieLinkWidth = _dev("nvmlDeviceGetMaxPcieLinkWidth", lambda s, h: 16)
    nvmlDeviceGetTemperatureThreshold = _dev(
        "nvmlDeviceGetTemperatureThreshold",
        lambda s, h, which: {
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: 87,
            pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: 90,
        }[which],
    )
    nvmlDeviceGetEnforcedPowerLimit = _dev("nvmlDeviceGetEnforcedPowerLimit", lambda s, h: 700000)
    nvmlDeviceGetUtilizationRates = _dev("nvmlDeviceGetUtilizationRates", lambda s, h: _Util(s.util[h], 40))
    nvmlDeviceGetTemperature = _dev("nvmlDeviceGetTemperature", lambda s, h, sensor: 60)
    nvmlDeviceGetComputeRunningProcesses = _dev("nvmlDeviceGetComputeRunningProcesses", lambda s, h: [object()])
    nvmlDeviceGetPowerUsage = _dev("nvmlDeviceGetPowerUsage", lambda s, h: 550000)
    nvmlDeviceGetPcieThroughput = _dev("nvmlDeviceGetPcieThroughput", lambda s, h, which: 2_000_000)
    nvmlDeviceGetCurrPcieLinkGeneration = _dev("nvmlDeviceGetCurrPcieLinkGeneration", lambda s, h: s.gen[h])
    nvmlDeviceGetCurrPcieLinkWidth = _dev("nvmlDeviceGetCurrPcieLinkWidth", lambda s, h: s.width[h])
    nvmlDeviceGetPerformanceState = _dev("nvmlDeviceGetPerformanceState", lambda s, h: 0)
    nvmlDeviceGetRemappedRows = _dev("nvmlDeviceGetRemappedRows", lambda s, h: tuple(s.remap[h]))
    nvmlDeviceGetRetiredPagesPendingStatus = _dev(
        "nvmlDeviceGetRetiredPagesPendingStatus", lambda s, h: s.pages_pending[h]
    )
    nvmlDeviceGetTotalEccErrors = _dev("nvmlDeviceGetTotalEccErrors", lambda s, h, kind, counter: s.ecc_unc[h])
    nvmlDeviceGetCurrentClocksEventReasons = _dev("nvmlDeviceGetCurrentClocksEventReasons", lambda s, h: s.reasons[h])

    def nvmlDeviceGetNvLinkState(self, h, link):
        self._check("nvmlDeviceGetNvLinkState", h)
        if link >= self.nvlinks:
            raise pynvml.NVMLError_InvalidArgument()
        return 1

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        self._check("nvmlDeviceGetNvLinkErrorCounter", h)
        return 0

    del _dev


# every per-GPU call site NvmlSource uses (the lost-GPU test walks them all)
PER_GPU_CALLS = (
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetNvLinkErrorCounter",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetPerformanceState",
)
