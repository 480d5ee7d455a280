"""The probe daemon: every source feeds one loop, the loop keeps the ledger, the sender talks to the gateway.

Threads: one per followed stream (kernel log, each NCCL log), one for the progress socket, the sender, the
status server. They only enqueue; all decisions happen on the main loop, which sleeps until the next GPU
sample, the earliest progress deadline or the next message, whichever comes first.
"""

import glob
import json
import logging
import os
import queue
import select
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from host_client import vocabulary
from host_client.exposition import Page
from host_client.logs import error_words, log_event

from . import config as config_mod
from . import events, fabric, follow, gpu_health, hwlog, nccl, pcie, progress, source_health, xid
from .commands import Commands
from .gpu_checks import GpuChecker
from .sender import Sender

log = logging.getLogger("sentinel.probe")

GPU_EVENT_PATH = "/api/v1/gpu_event"


def gateway_url(url):
    """Accept the gateway's base URL or the full endpoint."""
    if not url:
        return url
    rest = url.split("://", 1)[-1]
    if "/" not in rest or rest.endswith("/") and rest.count("/") == 1:
        return url.rstrip("/") + GPU_EVENT_PATH
    return url


def proc_gpu_indexes(root="/proc/driver/nvidia/gpus"):
    """PCI address -> GPU index without NVML: the driver lists one directory per GPU, named by bus id, and NVML
    numbers GPUs in PCI bus order."""
    try:
        names = sorted(os.listdir(root), key=lambda n: xid.pci_key(n) or (1 << 30,))
    except OSError:
        return {}
    keys = [xid.pci_key(n) for n in names]
    return {k: i for i, k in enumerate(k for k in keys if k is not None)}


class Daemon:
    GPU_DOWN_AFTER = 3  # GPU samples failed in a row before the GPU readings count as a source down

    def __init__(self, cfg, *, gpu=None, sender=None, clock=time.monotonic, wall=time.time):
        self.cfg = cfg
        self.clock = clock
        self.wall = wall
        self.identity = events.Identity(cfg["node"]["rack"], cfg["node"]["host"])
        self.conditions = events.Conditions()
        self.xid_once = events.Oneshots(cfg["xid"]["hold_s"])
        self.nccl_once = events.Oneshots(cfg["nccl"]["hold_s"])
        self.xid_ignore = frozenset(cfg["xid"]["ignore"])
        self._kernel_logs = {}  # source -> xid.KernelLog (the multi-line fallen-off-the-bus form needs memory)
        self.nccl_log = nccl.NcclLog()
        self.tracker = progress.ProgressTracker(config_mod.progress_rules(cfg))
        self.gpu = gpu
        self.devices = gpu.devices() if gpu is not None else []
        self.checker = GpuChecker(self.devices, config_mod.gpu_rules(cfg))
        # The driver's own list fills in buses NVML no longer enumerates (a GPU that fell off the bus before we
        # started); NVML's numbering wins where both know a bus.
        self._pci = proc_gpu_indexes()
        self._pci.update({d["pci"]: d["index"] for d in self.devices if d.get("pci")})
        self._gpu_generation = getattr(gpu, "generation", 0)
        self.sender: Sender | None = sender
        self.q = queue.Queue()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.followers = []
        self._xid_sources = set()
        self.sock: progress.ProgressSocket | None = None
        self.status_server = None
        self._status_serving = False
        self.counts = dict.fromkeys(events.EVENT_TYPES, 0)
        self.recent = []  # the last events sent, newest last, for /status
        self.samples = 0
        self.sample_errors = 0
        self.sample_seconds = 0.0
        self.lines = 0
        self.started = wall()
        self.loop_errors = 0
        # the probe's own sources (source_health.py): a source down is the probe's own P1 until it works again
        self.health = source_health.Registry(wall)
        self._health_seen = -1
        self._gpu_health = self.health.register("gpu", "gpu") if gpu is not None else None
        self._gpu_failing = 0  # samples failed in a row
        self._progress_health = None
        self._planned_wake = 0.0
        self._threads = []
        # issue 35: the fabric and the hardware under the GPU
        self.commands = Commands(timeout_s=cfg["fabric"]["command_timeout_s"])
        self.fabric_checker = fabric.FabricChecker(config_mod.fabric_rules(cfg))
        self.hw_once = events.Oneshots(cfg["xid"]["hold_s"])
        self.hw_errors = {}  # source -> {path: reason}: what a hardware source could not read, for /status
        self.hw_polls = 0
        self.hw_poll_seconds = 0.0
        self.fabric_ports = 0
        self.module_temps = {}  # "mlx5_3" -> the hwmon module sensor's last reading, for /metrics
        self.optics_paths = {}  # "mlx5_3" -> {"ethtool": the last -m read worked, "hwmon": "hwmon4"}
        self._fm_sources = set()
        self._pcie_windows = {}  # bdf -> fabric._Window of TOTAL_ERR_COR
        self.pcie_corrected = {}  # bdf -> TOTAL_ERR_COR, for /metrics
        self.health_checker = gpu_health.HealthChecker(throttle_s=cfg["gpu_health"]["throttle_s"])
        # component -> (time, event type): the fabric's warnings a hang that follows is said to come after
        self._fabric_notes = {}
        self._worked = set()  # reading commands that answered once (their failures are then a dead source)

    # --- wiring --------------------------------------------------------------------------------------------
    def _on_line(self, source, line):
        self.q.put(("line", source, line, self.clock()))

    def start(self):
        cfg = self.cfg
        # the status port first: a port in use stops the start before the progress socket or anything is made
        if cfg["status"]["listen"]:
            self._start_status(cfg["status"]["listen"])
        if self.sender is None:
            s = cfg["sender"]
            self.sender = Sender(
                gateway_url(cfg["node"]["gateway"]),
                capacity=s["capacity"],
                timeout_s=s["timeout_s"],
                backoff_initial_s=s["backoff_initial_s"],
                backoff_max_s=s["backoff_max_s"],
                batch_max=s["batch_max"],
                batch_bytes=s["batch_bytes"],
                token=config_mod.ingest_token(cfg),
            )
        self.sender.start()
        self._start_xid()
        for path in cfg["nccl"]["logs"]:
            if glob.has_magic(path):
                f = follow.GlobWatcher(
                    path,
                    self._on_line,
                    self.stop,
                    from_start=cfg["nccl"]["from_start"],
                    rescan_s=cfg["nccl"]["rescan_s"],
                )
            else:
                f = follow.FileFollower(path, self._on_line, self.stop, from_start=cfg["nccl"]["from_start"])
            f.health = self.health.register(path, "nccl_log")
            self.followers.append(f.start())
        fm = cfg["fabric_manager"]["log"]
        if fm and os.path.exists(fm):  # on where Fabric Manager runs (its log file exists)
            f = follow.FileFollower(fm, self._on_line, self.stop)
            f.health = self.health.register(fm, "fabric_manager")
            self._fm_sources.add(f.name)
            self.followers.append(f.start())
        if self._fabric_on() or self._pcie_on():
            self._spawn(self._hw_poller, "hw-poll")
        if cfg["progress"]["enabled"]:
            self.sock = progress.ProgressSocket(cfg["progress"]["socket"], cfg["progress"]["socket_mode"])
            self._progress_health = self.health.register(cfg["progress"]["socket"], "progress")
            self._progress_health.ok()
            self._spawn(self._progress_reader, "progress")
        if self.status_server is not None:
            self._spawn(self.status_server.serve_forever, "status")
            self._status_serving = True
        self._spawn(self._loop, "probe-loop")
        return self

    def _spawn(self, target, name):
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _start_xid(self):
        x = self.cfg["xid"]
        kind = x["source"]
        if kind == "none":
            return
        if kind == "file":
            f = follow.FileFollower(x["path"], self._on_line, self.stop)
        elif kind == "journal":
            f = follow.CommandFollower("journal", follow.JOURNAL_ARGV, self._on_line, self.stop)
        elif kind == "kmsg":
            f = follow.KmsgFollower(self._on_line, self.stop, path=x["path"] or "/dev/kmsg")
        else:  # auto: /dev/kmsg when we may read it, else journalctl
            try:
                open(x["path"] or "/dev/kmsg", "rb").close()
                f = follow.KmsgFollower(self._on_line, self.stop, path=x["path"] or "/dev/kmsg")
            except OSError:
                f = follow.CommandFollower("journal", follow.JOURNAL_ARGV, self._on_line, self.stop)
        self._xid_sources.add(f.name)
        f.health = self.health.register(getattr(f, "path", None) or f.name, "kernel_log")
        self.followers.append(f.start())

    def _fabric_on(self):
        f = self.cfg["fabric"]
        return f["enabled"] and os.path.isdir(f["sysfs_root"])

    def _pcie_on(self):
        p = self.cfg["pcie"]
        return p["enabled"] and os.path.isdir(p["sysfs_root"])

    def _hw_poller(self):
        """Reads the hardware sources at their intervals and queues the readings: the loop judges them. A thread
        of its own because ethtool may take its timeout, and the kernel log must not wait behind it."""
        f, p = self.cfg["fabric"], self.cfg["pcie"]
        due = {"ports": 0.0, "stats": 0.0, "module": 0.0, "hwmon": 0.0, "aer": 0.0}
        while not self.stop.is_set():
            now = self.clock()
            if self._fabric_on() and now >= due["ports"]:
                due["ports"] = now + f["interval_s"]
                stats_due, module_due, hwmon_due = now >= due["stats"], now >= due["module"], now >= due["hwmon"]
                if stats_due:
                    due["stats"] = now + f["stats_interval_s"]
                if module_due:
                    due["module"] = now + f["module_interval_s"]
                if hwmon_due:
                    due["hwmon"] = now + f["hwmon_interval_s"]
                reading = self.read_fabric(stats=stats_due, modules=module_due, hwmon=hwmon_due)
                self.q.put(("hw", "fabric", reading, self.clock()))
            if self._pcie_on() and now >= due["aer"]:
                due["aer"] = now + p["interval_s"]
                self.q.put(("hw", "pcie", self.read_pcie(), self.clock()))
            self.stop.wait(max(0.01, min(due.values()) - self.clock()))

    def read_fabric(self, *, stats=True, modules=True, hwmon=True):
        """One poll of the IB/RoCE ports; ethtool -S / -m for their netdevs and the NICs' hwmon when due."""
        t0 = time.perf_counter()
        ports, errors = fabric.read_ports(self.cfg["fabric"]["sysfs_root"])
        tool = self.cfg["fabric"]["ethtool"]
        st, mods, sensors, hw_errors = {}, {}, {}, None
        if hwmon and os.path.isdir(self.cfg["fabric"]["hwmon_root"]):  # a node without hwmon: the ethtool path only
            # its read errors go to /status only: an unreadable sensor is no port fault and no dead fabric tree
            by_pci, hw_errors = fabric.read_module_sensors(self.cfg["fabric"]["hwmon_root"])
            for key, port in ports.items():
                if port["pci"] in by_pci:
                    sensors[key] = by_pci[port["pci"]]
        for key, port in ports.items():
            nd = port["netdev"]
            if nd is None or not tool:
                continue
            if stats:
                out = self._reading([tool, "-S", nd])
                if out is not None:
                    st[key] = fabric.parse_ethtool_stats(out)
            if modules:
                out = self._reading([tool, "-m", nd])
                if out is not None:
                    mods[key] = fabric.parse_module(out)
        self.hw_poll_seconds += time.perf_counter() - t0
        self.hw_polls += 1
        _said_health(self.health.register(self.cfg["fabric"]["sysfs_root"], "fabric"), errors)
        read = {"ports": ports, "errors": errors, "stats": st, "modules": mods, "sensors": sensors}
        read["modules_read"] = bool(modules and tool)
        read["hwmon_errors"] = hw_errors  # None: not read this poll (keeps what /status said)
        return read

    def _reading(self, argv):
        """A reading command's output (Commands.run), its health said per command and netdev ("ethtool -m
        ens3np0") once it has worked: one that then fails leaves the optics and PFC unwatched, which the room must
        know. One that never worked (not installed; ethtool -m without CAP_NET_ADMIN, which the shipped unit does
        not grant) is the node's set-up, said in /status only: a standing P1 on every node would teach the room to
        ignore it."""
        out = self.commands.run(argv)
        name = " ".join(argv)  # per netdev: a port with no module fails -m while the others answer
        if out is not None:
            self._worked.add(name)
            self.health.register(name, "ethtool").ok()
        elif name in self._worked:
            why = "%s: %s" % (argv[-1], self.commands.failures.get(" ".join(argv[:2])) or "failed")
            self.health.register(name, "ethtool").down(why)
        return out

    def read_pcie(self):
        t0 = time.perf_counter()
        counts, errors = pcie.read_corrected(self.cfg["pcie"]["sysfs_root"])
        self.hw_poll_seconds += time.perf_counter() - t0
        _said_health(self.health.register(self.cfg["pcie"]["sysfs_root"], "pcie"), errors)
        return {"corrected": counts, "errors": errors}

    def on_fabric(self, reading, now):
        self.hw_errors["fabric"] = reading["errors"]
        self.fabric_ports = len(reading["ports"])
        if reading["hwmon_errors"] is not None:
            self.hw_errors["hwmon"] = reading["hwmon_errors"]
            self.module_temps = {fabric.component(*k): v for k, v in reading["sensors"].items()}
        for key in reading["ports"]:  # which path watches each module, for /status
            paths = self.optics_paths.setdefault(fabric.component(*key), {})
            if reading["modules_read"]:
                paths["ethtool"] = key in reading["modules"]
            if key in reading["sensors"]:
                paths["hwmon"] = reading["sensors"][key]["hwmon"]
        found = self.fabric_checker.check(
            reading["ports"],
            now,
            stats=reading["stats"],
            modules=reading["modules"],
            sensors=reading["sensors"],
            unread=bool(reading["errors"]),
        )
        self._apply("fabric", found)

    def on_pcie(self, reading, now):
        p = self.cfg["pcie"]
        self.hw_errors["pcie"] = reading["errors"]
        found = []
        for bdf, n in reading["corrected"].items():
            self.pcie_corrected[bdf] = n
            w = self._pcie_windows.get(bdf)
            if w is None:
                w = self._pcie_windows[bdf] = fabric._Window()
            w.add(now, n, p["window_s"])
            if w.delta() >= p["corrected_storm"] > 0:
                what = self._pci_names().get(bdf)
                found.append(
                    events.Finding(
                        ("aer_storm", bdf),
                        events.PCIE_AER_STORM,
                        events.NODE_WIDE,
                        "%d corrected PCIe errors in %.0f s at %s%s"
                        % (w.delta(), p["window_s"], bdf, " (%s)" % what if what else ""),
                        component=bdf,
                    )
                )
        self._apply("pcie", found)

    def _pci_names(self):
        """bdf -> "GPU 3" / "NIC mlx5_3": the parts a PCIe fault is said against."""
        names = {}
        for d in self.devices:
            k = d.get("pci")
            if k is not None:
                names[pcie.bdf_text(k)] = "GPU %d" % d["index"]
        root = self.cfg["fabric"]["sysfs_root"]
        try:
            for dev in os.listdir(root):
                real = os.path.realpath(os.path.join(root, dev, "device"))
                names[os.path.basename(real).lower()] = "NIC %s" % dev
        except OSError:
            pass
        return names

    def _progress_reader(self):
        sock = self.sock
        assert sock is not None  # started only once the socket is bound
        ph = self._progress_health
        assert ph is not None
        while not self.stop.is_set():
            if sock is None:  # removed and not bound again yet
                self.stop.wait(1.0)
                sock = self._progress_bind(ph)
                continue
            try:
                r, _, _ = select.select([sock], [], [], 1.0)
                if not r:
                    sock = self._progress_socket_check(sock, ph)
                    continue
                msg, pid = sock.recv()
            except (OSError, ValueError) as e:
                if self.stop.is_set():
                    return
                if isinstance(e, OSError):
                    ph.down(follow._why(e))
                    self.stop.wait(1.0)
                continue
            ph.ok()
            # applied here rather than queued: an ordinary beat only moves a deadline later, so the loop need
            # not wake for it; it is woken when the beat changes what stands (a stalled job moved again)
            with self.lock:
                self.tracker.message(msg, self.clock(), peer_pid=pid)
                dl = self.tracker.next_deadline()
                # wake the loop early only when this beat changed what stands, or moved the earliest deadline
                # before the loop's planned wake-up (a job leaving warm-up or a pause)
                wake = self.tracker.dirty or (dl is not None and dl < self._planned_wake)
            if wake:
                self.q.put(("wake",))

    def _progress_socket_check(self, sock, ph):
        """A socket file someone removed (a tmp cleaner, a second probe's start) takes every beat with it: the
        source is down until it is bound again, here, at once."""
        try:
            os.stat(sock.path)
            return sock
        except OSError:
            pass
        ph.down("socket file removed: %s" % sock.path)
        sock.sock.close()  # not sock.close(): that unlinks the path the new socket binds
        return self._progress_bind(ph)

    def _progress_bind(self, ph):
        path = self.cfg["progress"]["socket"]
        try:
            new = progress.ProgressSocket(path, self.cfg["progress"]["socket_mode"])
        except OSError as e:
            ph.down("cannot bind %s: %s" % (path, follow._why(e)))
            return None
        self.sock = new
        ph.ok()
        return new

    # --- the loop ------------------------------------------------------------------------------------------
    def _loop(self):
        interval = self.cfg["gpu"]["interval_s"]
        next_sample = self.clock() if self.gpu is not None else None
        while not self.stop.is_set():
            try:
                next_sample = self._iteration(next_sample, interval)
            except Exception:  # a bug in one check must not silence all the others
                self.loop_errors += 1
                log.exception("loop_error")  # a bug: its traceback goes with it
                self.stop.wait(0.5)

    def _iteration(self, next_sample, interval):
        now = self.clock()
        wake = now + 1.0
        if next_sample is not None:
            wake = min(wake, next_sample)
        with self.lock:
            dl = self.tracker.next_deadline()
            if dl is not None:
                wake = min(wake, dl + 0.001)
            self._planned_wake = wake
        try:
            item = self.q.get(timeout=max(0.0, wake - now))
        except queue.Empty:
            item = None
        with self.lock:
            while item is not None:
                self._handle(item)
                try:
                    item = self.q.get_nowait()
                except queue.Empty:
                    item = None
            now = self.clock()
            if next_sample is not None and now >= next_sample:
                self.sample_gpus(now)
                next_sample += interval
                if next_sample < now:  # fell behind (suspended, slow NVML): do not burst
                    next_sample = now + interval
            dl = self.tracker.next_deadline()
            if self.tracker.dirty or (dl is not None and now >= dl):
                self.evaluate_progress(now)
            if self.health.changes != self._health_seen:
                self.evaluate_sources()
        return next_sample

    def _handle(self, item):
        kind = item[0]
        if kind == "line":
            _, source, line, t = item
            self.lines += 1
            if source in self._xid_sources:
                self.on_kernel_line(line, t, source)
            elif source in self._fm_sources:
                self.on_hw_line(hwlog.parse_fabric_manager(line), t)
            else:
                self.on_nccl_line(line, source, t)
            return False
        if kind == "hw":
            _, which, reading, t = item
            if which == "fabric":
                self.on_fabric(reading, t)
            else:
                self.on_pcie(reading, t)
            return False
        if kind == "beat":
            _, msg, pid, t = item
            self.tracker.message(msg, t, peer_pid=pid)
            return True
        return False

    # --- checks (also called directly by tests and --once) ----------------------------------------------------
    def on_kernel_line(self, line, now, source="kmsg"):
        kl = self._kernel_logs.get(source)
        if kl is None:
            kl = self._kernel_logs[source] = xid.KernelLog()
        x = kl.feed(line)
        if x is None:
            return self.on_hw_line(hwlog.parse_kernel(line), now)
        if x.xid in self.xid_ignore:
            return None
        idx = self._pci.get(x.pci, events.NODE_WIDE)
        f = xid.finding(x, idx)
        if self.xid_once.admit(f.key, now):
            self.emit(f)
            return f
        return None

    def on_hw_line(self, h, now):
        """A hardware line (hwlog.HwLine or None) -> its findings, each said once per hold (edge-triggered: the
        kernel never prints the end of an SXid or an AER fatal; NVML / sysfs say when the part is back)."""
        if h is None:
            return None
        found = []
        if h.kind == "gpu_init":
            idx = self._pci.get(h.pci, events.NODE_WIDE) if h.pci else events.NODE_WIDE
            found.append(
                events.Finding(
                    ("gpu_init", idx if idx >= 0 else h.component),
                    events.GPU_LOST,
                    idx,
                    h.detail,
                    pci=xid.pci_text(h.pci),
                )
            )
        elif h.kind == "aer":
            found = self._aer_findings(h)
        else:
            found.append(events.Finding(h.key, h.event_type, events.NODE_WIDE, h.detail, component=h.component))
        out = None
        for f in found:
            if self.hw_once.admit(f.key, now):
                self.emit(f)
                out = f
        return out

    def _aer_findings(self, h):
        """A fatal AER / DPC / surprise down: said against the GPUs and NICs below the port (the sysfs parent
        chain); a GPU there is lost (P0), a NIC failed; a port with neither is a PCIe fault of its own."""
        bdf = pcie.bdf_text(h.pci) if h.pci else h.component
        names = self._pci_names()
        hit = pcie.below(self.cfg["pcie"]["sysfs_root"], bdf, names) if self.cfg["pcie"]["enabled"] else []
        if not hit and bdf in names:
            hit = [(bdf, names[bdf])]
        out = []
        for dev_bdf, what in sorted(hit):
            if what.startswith("GPU "):
                idx = int(what.split()[1])
                out.append(
                    events.Finding(
                        ("aer", idx),
                        events.GPU_LOST,
                        idx,
                        "%s (GPU %d below it)" % (h.detail, idx),
                        pci=dev_bdf,
                    )
                )
            else:
                nic = what.split()[1]
                out.append(
                    events.Finding(
                        ("aer", nic),
                        events.NIC_FAILURE,
                        events.NODE_WIDE,
                        "%s (%s below it)" % (h.detail, what),
                        component=nic,
                    )
                )
        if not out:
            out.append(events.Finding(("aer", bdf), events.PCIE_FATAL, events.NODE_WIDE, h.detail, component=bdf))
        return out

    def on_nccl_line(self, line, source, now):
        f = self.nccl_log.finding(line, source)
        if f is None:
            return None
        if self.nccl_once.admit(f.key, now):
            self.emit(f)
            return f
        return None

    def sample_gpus(self, now):
        gpu = self.gpu
        assert gpu is not None  # scheduled only with a GPU source
        t0 = time.perf_counter()
        try:
            readings = gpu.sample()
        except Exception as e:  # noqa: BLE001 - NVML's own classes: counted, the next sample runs
            self.sample_errors += 1
            self._gpu_failing += 1
            log_event(log, "gpu_sample_failed", logging.WARNING, error=error_words(e))
            if self._gpu_failing >= self.GPU_DOWN_AFTER and self._gpu_health is not None:
                self._gpu_health.down("%d samples in a row failed: %s" % (self._gpu_failing, error_words(e)))
            return
        self._gpu_failing = 0
        if self._gpu_health is not None:
            self._gpu_health.ok()
        self.samples += 1
        gen = getattr(self.gpu, "generation", 0)
        if gen != self._gpu_generation:  # a GPU came back: its facts (bus, maxima, thresholds) are known now
            self._gpu_generation = gen
            self.devices = gpu.devices()
            self.checker.refresh(self.devices)
            self._pci.update({d["pci"]: d["index"] for d in self.devices if d.get("pci")})
        findings = self.checker.check(readings, now)
        self._apply("gpu", findings)
        self.sample_health(now)
        self.sample_seconds += time.perf_counter() - t0

    def evaluate_sources(self):
        self._health_seen = self.health.changes
        self._apply("sources", self.health.finding(self.identity.host))

    def sample_health(self, now):
        """ECC / row remapping / retired pages every ``memory_every`` samples, clock event reasons every sample."""
        h = self.cfg["gpu_health"]
        fn = getattr(self.gpu, "health", None)
        if not h["enabled"] or fn is None:
            return
        memory = (self.samples - 1) % max(1, h["memory_every"]) == 0
        try:
            health = fn(memory=memory)
        except Exception as e:  # noqa: BLE001 - a health read that fails is counted; the GPU sample stands
            self.sample_errors += 1
            log_event(log, "gpu_health_read_failed", logging.WARNING, error=error_words(e))
            return
        self._apply("gpu_health", self.health_checker.check(health, now))

    def evaluate_progress(self, now):
        self._apply("progress", self.tracker.evaluate(now))

    def _apply(self, check, findings):
        revised = self.conditions.revise(check, findings)
        raised, cleared = self.conditions.update(check, findings, self.wall())
        for f in revised:  # same condition, news about it (a stalled job died): firing again, new detail
            self.emit(f)
        for f in raised:
            self.emit(f)
        for f in cleared:
            self.emit(f, recovered=True)

    FABRIC_NOTE = vocabulary.AFTER_TYPES  # the fabric warnings the gateway words a hang after
    HANG_AFTER = frozenset(
        (events.NCCL_TIMEOUT, events.PROGRESS_STALL, events.NCCL_PEER_LOST, events.NCCL_ERROR, events.GPU_UTIL_DROP)
    )
    NOTE_WORDS = {
        events.OPTICS_WARNING: "optical-module errors",
        events.NIC_CONGESTION: "a PFC pause storm / retransmissions",
        events.IB_PORT_DOWN: "InfiniBand port down",
        events.IB_LINK_DEGRADED: "a network link slowdown",
    }
    NOTE_HOLD_S = 600.0  # a hang within 10 min of a fabric warning on this node is said to follow it

    def _after_fabric(self, finding):
        """A hang P0 on a node whose fabric warned first says so: "after optical-module errors on mlx5_3"."""
        now = self.wall()
        notes = [(t, c, ty) for c, (t, ty) in self._fabric_notes.items() if now - t <= self.NOTE_HOLD_S]
        if not notes:
            return finding
        t, comp, ty = max(notes)
        after = "after %s on %s" % (self.NOTE_WORDS[ty], comp)
        extra = dict(finding.extra, after=after, after_type=ty, after_component=comp)  # the gateway words it
        return events.Finding(
            finding.key, finding.event_type, finding.gpu_index, "%s: %s" % (after, finding.detail or ""), **extra
        )

    def emit(self, finding, *, recovered=False):
        if not recovered and finding.event_type in self.FABRIC_NOTE and finding.extra.get("component"):
            self._fabric_notes[finding.extra["component"]] = (self.wall(), finding.event_type)
        elif not recovered and finding.event_type in self.HANG_AFTER:
            finding = self._after_fabric(finding)
        util = self.checker.last_util.get(finding.gpu_index)
        ev = events.body(self.identity, finding, util, recovered=recovered, now=self.wall())
        self.counts[ev["event_type"]] += 1
        self.recent.append(ev)
        del self.recent[:-50]
        log_event(
            log,
            "event_raised",
            logging.INFO,
            type=ev["event_type"],
            recovers=ev.get("recovers") if recovered else None,
            gpu=ev["gpu_index"],
            detail=ev.get("detail", ""),
        )
        if self.sender is not None:
            self.sender.submit(ev)
        return ev

    # --- status ------------------------------------------------------------------------------------------------
    def snapshot(self):
        with self.lock:
            now = self.clock()
            active = [
                {
                    "event_type": f.event_type,
                    "gpu_index": f.gpu_index,
                    "detail": f.detail,
                    "since": self.conditions.since.get(f.key),
                }
                for f in self.conditions.active()
            ]
            return {
                "rack": self.identity.rack,
                "host": self.identity.host,
                "uptime_s": round(self.wall() - self.started, 1),
                "gpu_source": getattr(self.gpu, "name", None),
                "gpus": len(self.devices),
                "samples": self.samples,
                "sample_errors": self.sample_errors,
                "loop_errors": self.loop_errors,
                # the last error of each failing NVML call per GPU ("3:nvmlDeviceGetHandleByIndex": "NVMLError_...")
                "gpu_failures": {"%s:%s" % k: v for k, v in sorted(getattr(self.gpu, "failures", {}).items(), key=str)},
                "sample_seconds": self.sample_seconds,
                "active": active,
                "xid_recent": [list(k) for k in self.xid_once.recent(now)],
                "jobs": self.tracker.snapshot(now),
                "followers": [{"name": f.name, "lines": f.lines, "error": f.error} for f in self.followers],
                "sources": self.health.snapshot(),
                # issue 35's sources: on or not, what they could not read, the commands that failed (said once)
                "hardware": {
                    "fabric": self._fabric_on(),
                    "fabric_root": self.cfg["fabric"]["sysfs_root"],
                    "fabric_ports": self.fabric_ports,
                    "hwmon_root": self.cfg["fabric"]["hwmon_root"],
                    # per NIC: which path watches its transceiver (ethtool -m needs CAP_NET_ADMIN; hwmon does not)
                    "optics": {c: _optics_path(p) for c, p in sorted(self.optics_paths.items())},
                    "pcie": self._pcie_on(),
                    "fabric_manager": bool(self._fm_sources),
                    "errors": {k: dict(v) for k, v in self.hw_errors.items() if v},
                    "commands": dict(self.commands.failures),
                    "polls": self.hw_polls,
                    "poll_seconds": round(self.hw_poll_seconds, 6),
                },
                "events": dict(self.counts),
                "sender": {
                    "url": self.sender.url if self.sender else None,
                    "pending": self.sender.pending() if self.sender else 0,
                    "sent": self.sender.sent if self.sender else 0,
                    "dropped": self.sender.dropped if self.sender else 0,
                    "failures": self.sender.failures if self.sender else 0,
                    "rejected": dict(self.sender.rejected_by_type) if self.sender else {},
                    "requests": getattr(self.sender, "requests", 0),
                    "batches": getattr(self.sender, "batches", 0),
                    "last_error": self.sender.last_error if self.sender else None,
                },
                "recent": list(self.recent[-10:]),
            }

    def metrics(self):
        s = self.snapshot()
        with self.lock:  # copied under the lock: the loop thread updates them
            corrected = dict(self.pcie_corrected)
            port_counters = dict(self.fabric_checker.totals)
            module_temps = dict(self.module_temps)
        page = Page()

        def m(name, help_, typ, samples):
            page.family("sentinel_probe_" + name, typ, help_)
            for labels, v in samples:
                page.lines.append("sentinel_probe_%s%s %s" % (name, page.label_pairs(labels), v))

        m(
            "events_total",
            "Events sent to the gateway by type.",
            "counter",
            [((("type", t),), n) for t, n in sorted(s["events"].items())],
        )
        by = {}
        for a in s["active"]:
            by[a["event_type"]] = by.get(a["event_type"], 0) + 1
        m(
            "active_conditions",
            "Conditions currently raised, by type.",
            "gauge",
            [
                ((("type", t),), by.get(t, 0))
                for t in events.EVENT_TYPES
                if t
                not in (
                    events.RECOVERED,
                    events.XID_FATAL,
                    events.XID_WARNING,
                    events.NCCL_TIMEOUT,
                    events.NCCL_NET_ERROR,
                    events.NCCL_PEER_LOST,
                    events.NCCL_ERROR,
                    events.CUDA_ERROR,
                    events.PROGRAM_ERROR,
                    events.JOB_FAILED,
                    events.RENDEZVOUS_FAILED,
                )
            ],
        )
        m(
            "source_up",
            "1 while the probe can read the source, 0 while it is down (an alarm), -1 not read yet.",
            "gauge",
            [
                ((("source", h["name"]), ("kind", h["kind"])), {"ok": 1, "down": 0}.get(h["state"], -1))
                for h in s["sources"]
            ],
        )
        m("gpu_samples_total", "GPU samples taken.", "counter", [((), s["samples"])])
        m("gpu_sample_errors_total", "GPU samples that failed.", "counter", [((), s["sample_errors"])])
        m(
            "gpu_sample_seconds_total",
            "Time spent reading and checking GPUs (NVML cost).",
            "counter",
            [((), round(s["sample_seconds"], 6))],
        )
        m("loop_errors_total", "Probe loop iterations that failed (see the log).", "counter", [((), s["loop_errors"])])
        m(
            "pcie_corrected_errors",
            "Corrected PCIe (AER) errors per device since boot (TOTAL_ERR_COR); an alarm only when they storm.",
            "gauge",
            [((("device", b),), n) for b, n in sorted(corrected.items())],
        )
        m(
            "fabric_port_counter",
            "IB/RoCE port counters and PFC pause figures as last read.",
            "gauge",
            [
                ((("device", p[0]), ("port", p[1]), ("counter", c)), v)
                for (p, c), v in sorted(port_counters.items(), key=str)
            ],
        )
        for name, key, what in (("", "temp_c", "temperature"), ("_crit", "crit_c", "critical threshold")):
            m(
                "module_temperature%s_celsius" % name,
                "Transceiver %s from the NIC's mlx5 hwmon, as last read." % what,
                "gauge",
                [((("device", c), ("sensor", v["label"])), v[key]) for c, v in sorted(module_temps.items())],
            )
        m(
            "hw_poll_seconds_total",
            "Time spent reading the fabric and PCIe sources.",
            "counter",
            [((), round(s["hardware"]["poll_seconds"], 6))],
        )
        m("jobs", "Training processes beating.", "gauge", [((), len(s["jobs"]))])
        m("sender_pending", "Events waiting for the gateway.", "gauge", [((), s["sender"]["pending"])])
        m("sender_sent_total", "Events the gateway accepted.", "counter", [((), s["sender"]["sent"])])
        m(
            "sender_dropped_total",
            "Events dropped because the queue was full.",
            "counter",
            [((), s["sender"]["dropped"])],
        )
        m("sender_failures_total", "Failed delivery attempts.", "counter", [((), s["sender"]["failures"])])
        m(
            "sender_requests_total",
            "Requests to the gateway (events queued together share one).",
            "counter",
            [((), s["sender"]["requests"])],
        )
        m(
            "sender_rejected_total",
            "Events the gateway refused (4xx): lost alarms, a format disagreement.",
            "counter",
            [((("type", t),), n) for t, n in sorted(s["sender"]["rejected"].items())],
        )
        m(
            "log_lines_total",
            "Log lines read by source.",
            "counter",
            [((("source", f["name"]),), f["lines"]) for f in s["followers"]],
        )
        return page.text()

    def _start_status(self, listen):
        host, port = listen.rsplit(":", 1)
        daemon = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path == "/metrics":
                    body, ctype = daemon.metrics().encode(), "text/plain; version=0.0.4"
                elif self.path in ("/status", "/"):
                    body, ctype = json.dumps(daemon.snapshot(), indent=1).encode(), "application/json"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.status_server = ThreadingHTTPServer((host, int(port)), Handler)  # bound now, served at the end of start

    @property
    def status_address(self):
        return self.status_server.server_address if self.status_server else None

    def close(self):
        self.stop.set()
        self.q.put(("wake",))
        for f in self.followers:
            if hasattr(f, "close"):
                f.close()
        if self.status_server is not None:
            if self._status_serving:  # shutdown() waits for serve_forever, which a failed start never ran
                self.status_server.shutdown()
            self.status_server.server_close()
        if self.sock is not None:
            self.sock.close()
        if self.sender is not None:
            self.sender.close()
        if self.gpu is not None:
            self.gpu.close()
        for t in self._threads:
            t.join(timeout=2)


def _optics_path(paths):
    """How /status says a module is watched: "ethtool -m" (temperature and rx power), "hwmon4" (temperature only)."""
    got = []
    if paths.get("ethtool"):
        got.append("ethtool -m (temperature, rx power)")
    if paths.get("hwmon"):
        got.append("%s (temperature)" % paths["hwmon"])
    if not got:
        return "none"
    if not paths.get("ethtool"):
        got.append("rx power unwatched: ethtool -m refused or absent")
    return "; ".join(got)


def _said_health(h, errors):
    """A sysfs tree's read errors ({path: reason}) -> its source health: down naming the first path, else ok."""
    if errors:
        path, why = next(iter(errors.items()))
        more = len(errors) - 1
        h.down("%s: %s%s" % (path, why, " (and %d more)" % more if more else ""))
    else:
        h.ok()
