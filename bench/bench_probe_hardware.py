"""What issue 35's hardware sources cost the probe on a node with 8 GPUs, 8 NICs and 4 NVSwitches (fake trees).

Prints the cost of one poll of every new source (IB/RoCE sysfs, `ethtool -S`, `ethtool -m` and hwmon per NIC, PCIe AER
totals, NVML memory health and clock reasons), and the probe's CPU per second at the default intervals: computed from
the per-source costs, and measured over a run of the real poller thread (this process plus the ethtool children).
The ethtool here is a shell script printing recorded outputs: a real `ethtool -m` also reads the module over I2C
(milliseconds of wall time on the NIC's side, little CPU on ours). Run: .venv/bin/python bench/bench_probe_hardware.py
"""

import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))

from hw_fakes import Fabric, FakeEthtool  # noqa: E402
from probe_fakes import FakeNvml  # noqa: E402

from host_client.probes import config  # noqa: E402
from host_client.probes.daemon import Daemon  # noqa: E402
from host_client.probes.gpu_source import NvmlSource  # noqa: E402

RUN_S = float(os.environ.get("SENTINEL_BENCH_HW_RUN_S", "20"))


def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def timed(fn, n):
    walls, cpus = [], []
    for _ in range(n):
        c0, t0 = cpu(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(cpu() - c0)
    return statistics.median(walls), statistics.median(cpus)


def main():
    tmp = Path(tempfile.mkdtemp(prefix="bench-hw-"))
    fb = Fabric(tmp / "sys", nics=8, gpus=8)
    for i in range(4):  # the NVSwitches: PCI functions with AER statistics (their SXids come by the kernel log)
        d = fb.devices / "pci0000:00" / ("0000:%02x:00.0" % (0xC0 + i))
        d.mkdir(parents=True)
        (d / "aer_dev_correctable").write_text("RxErr 0\nTOTAL_ERR_COR 0\n")
        (fb.pci / d.name).symlink_to(d)
    et = FakeEthtool(tmp / "bin")
    for i in range(8):
        et.set("ens%dnp0" % (i + 1), "m", "ethtool-m-sfp-normal.txt")
        et.stats("ens%dnp0" % (i + 1))
    kern = tmp / "kern.log"
    kern.touch()
    raw = {
        "node": {"rack": "A03", "host": "gpu-worker-08"},
        "xid": {"source": "file", "path": str(kern)},
        "progress": {"enabled": False},
        "status": {"listen": ""},
        "fabric": {"sysfs_root": str(fb.ib), "hwmon_root": str(fb.hwmon), "ethtool": str(et.path)},
        "pcie": {"sysfs_root": str(fb.pci)},
        "fabric_manager": {"log": ""},
    }
    cfg = config.build(raw)
    d = Daemon(cfg, gpu=NvmlSource(nvml=FakeNvml(count=8)))
    f, p = cfg["fabric"], cfg["pcie"]
    t = [0.0]

    def tick():
        t[0] += 1.0
        return t[0]

    sysfs_w, sysfs_c = timed(lambda: d.on_fabric(d.read_fabric(stats=False, modules=False, hwmon=False), tick()), 50)
    stats_w, stats_c = timed(lambda: d.on_fabric(d.read_fabric(stats=True, modules=False, hwmon=False), tick()), 10)
    mod_w, mod_c = timed(lambda: d.on_fabric(d.read_fabric(stats=False, modules=True, hwmon=False), tick()), 10)
    hw_w, hw_c = timed(lambda: d.on_fabric(d.read_fabric(stats=False, modules=False, hwmon=True), tick()), 50)
    pcie_w, pcie_c = timed(lambda: d.on_pcie(d.read_pcie(), tick()), 50)
    d.samples = 2  # reasons only
    thr_w, thr_c = timed(lambda: d.sample_health(tick()), 50)
    d.samples = 1  # memory too
    mem_w, mem_c = timed(lambda: d.sample_health(tick()), 50)
    all_w = sysfs_w + (stats_w - sysfs_w) + (mod_w - sysfs_w) + (hw_w - sysfs_w) + pcie_w + mem_w
    all_c = sysfs_c + (stats_c - sysfs_c) + (mod_c - sysfs_c) + (hw_c - sysfs_c) + pcie_c + mem_c
    print(
        "one poll of every new source, 8 GPUs / 8 NICs / 4 NVSwitches: %.1f ms wall, %.1f ms CPU"
        % (all_w * 1e3, all_c * 1e3)
    )
    rows = [
        ("IB/RoCE sysfs (8 ports, state/rate/counters)", sysfs_w, sysfs_c, f["interval_s"]),
        ("  + ethtool -S x 8", stats_w - sysfs_w, stats_c - sysfs_c, f["stats_interval_s"]),
        ("  + ethtool -m x 8", mod_w - sysfs_w, mod_c - sysfs_c, f["module_interval_s"]),
        ("  + mlx5 hwmon module sensors x 8", hw_w - sysfs_w, hw_c - sysfs_c, f["hwmon_interval_s"]),
        ("PCIe AER totals (all functions)", pcie_w, pcie_c, p["interval_s"]),
        ("NVML clock event reasons x 8 (fake NVML)", thr_w, thr_c, cfg["gpu"]["interval_s"]),
        (
            "NVML memory health x 8 (fake NVML)",
            mem_w - thr_w,
            mem_c - thr_c,
            cfg["gpu"]["interval_s"] * cfg["gpu_health"]["memory_every"],
        ),
    ]
    per_s = 0.0
    print("%-46s %10s %10s %10s %12s" % ("source", "wall ms", "CPU ms", "every s", "CPU %/core"))
    for name, w, c, every in rows:
        share = max(c, 0.0) / every
        per_s += share
        print("%-46s %10.2f %10.2f %10.1f %12.3f" % (name, w * 1e3, c * 1e3, every, share * 100))
    print("computed at the default intervals: %.3f %% of a core" % (per_s * 100))
    # measured: the real poller thread at the default intervals (the GPU loop's own NVML sampling is not part of it)
    d2 = Daemon(cfg, gpu=None)
    c0, t0 = cpu(), time.monotonic()
    d2._spawn(d2._hw_poller, "hw-poll")
    d2._spawn(d2._loop, "probe-loop")
    time.sleep(RUN_S)
    used, span = cpu() - c0, time.monotonic() - t0
    d2.stop.set()
    d2.q.put(("wake",))
    for th in d2._threads:
        th.join(timeout=5)
    print(
        "measured over %.0f s (poller + loop, ethtool children included; %d polls): %.3f %% of a core"
        % (span, d2.hw_polls, 100 * used / span)
    )
    print(
        "(the -m reads fall every %.0f s: a %.0f s run sees one; the computed figure averages them in)"
        % (f["module_interval_s"], RUN_S)
    )


if __name__ == "__main__":
    main()
