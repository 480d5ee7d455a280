"""Memory of the whole firmware under real MicroPython (the WebAssembly build, with the firmware's fakes of
machine / neopixel / network / ntptime): the heap held after importing everything, after building the terminal,
and while running; the heap allocated per accepted request and per rendered frame; and what is left of a plain
ESP32's ~110 KB Python heap.

    .venv/bin/python bench/bench_firmware.py
    .venv/bin/python bench/bench_firmware.py --against 0b82a34   # and that commit's firmware, same run, one table

The figures of past runs, each tree against another in the same run: docs/FIRMWARE.md "Comparing trees in one run".

How it is measured: gc.collect() then gc.mem_alloc() before and after. "held" is what stays allocated after a
collection; "allocated per X" is the mem_alloc delta over a run without a collection, divided by the count: the
total garbage made, an upper bound on the extra peak X needs. The WebAssembly heap is not the ESP32's, but the
object model and the sizes of Python objects are the same port-independent code (both are 32-bit builds, so
pointers and small objects are the same size); the times are only for scale. On the board the modules come as .mpy,
whose bytecode lives in the same heap as here (not frozen into flash).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from mpy import run_micropython  # noqa: E402

ESP32_HEAP = 110 * 1024
REQUESTS = 40
FRAMES = 100

# Both runs start alike: the fakes of the hardware (C or frozen modules on the board, imported before any
# baseline, so not counted), the board's .mpy files first on the path, and a collection that measures.
PRELUDE = r"""
import gc, sys, os, json
import machine, neopixel, network, ntptime
sys.path.insert(0, "/mpy/lib")
import asyncio as _aio
import js
async def settle():
    # The WebAssembly port only reclaims garbage once control has gone back to JavaScript, and each return to
    # JavaScript keeps a proxy in the Python heap until JavaScript's own collector has run: yield, run it (node runs
    # with --expose-gc), let its finalizers release the proxies, then collect. Without this every yield kept ~40 B
    # and the figures drifted from run to run.
    await _aio.sleep(0)
    js.gc()
    await _aio.sleep(0)
    await _aio.sleep(0)
    gc.collect()
async def held():
    await settle()
    return gc.mem_alloc()
"""

CODE = (
    PRELUDE
    + r"""
import micropython
# The layout: a block of __PAD__ bytes before everything measured shifts every address after it (see LAYOUTS).
_PAD = bytearray(__PAD__)
micropython.qstr_info()
MODS = []
BASE = await held()
async def imp(name):
    a = await held()
    __import__(name)
    MODS.append((name, await held() - a))
# Everything the board imports (main.py -> startup.boot -> Sentinel; app.main -> server), in import order.
# (Only those the measured tree has: an older tree, bench_firmware.py --against, lacks the newer ones.)
for _n in __MODS__:
    await imp(_n)
import json, time, asyncio
from sentinel_fw import app as fw_app, config, clock, store, server
from sentinel_core import signing, tts_syn6288
for _m in sys.modules:
    if _m.startswith("sentinel") and not sys.modules[_m].__file__.startswith("/mpy/"):
        raise SystemExit("not loaded from .mpy: %s" % _m)
IMPORTS = await held() - BASE
# Every name and short string in the loaded code is interned once, in pools the heap never gives back: printed before
# the baseline and here as "qstr pool: ... n_total_bytes=N" and parsed on the CPython side.
micropython.qstr_info()

SECRET = "0123456789abcdef0123456789abcdef"
CFG = {"board": "esp32", "wifi": {"ssid": "lab", "password": "password123"}, "keys": {"gw": SECRET},
       "terminal": {"utc_offset_min": 480}}
T0 = 1764460800
NOW = [T0]
sys.modules["sentinel_fw"].quiet = fw_app.quiet = True  # the log's switch: the package's (an older tree: app's)

def fake_time():
    return NOW[0]

b0 = await held()
cfg = config.validate(CFG)
s = fw_app.Sentinel(cfg, clock.Clock(ntptime, "pool.ntp.org", 3600, time_fn=fake_time),
                    store.Store("/bench_state.json"), network.WLAN(network.STA_IF))
web = server.make_app(s, cfg["http"]["max_body"])
def chip(frame):
    return b"\x41\x4f" if frame == tts_syn6288.STATUS else b"\x41"
machine.UART.registry[2].responder = chip
s.net_step(0)
s.net_step(500)
s.speech_step(600)
s.speech_step(700)
BUILT = await held() - b0
b1 = await held()
sys.modules["sentinel_fw.startup"].drop_boot_modules()
config = None
DROPPED = b1 - await held()

def req(i, level):
    body = json.dumps({"text": "A%02d gpu-worker-%02d NCCL timeout" % (i % 40, i), "color": "#FF0000",
                       "light_mode": "flash" if level == "P0" else "breath", "audio_mode": "cycle",
                       "repeat_times": 3, "level": level, "key": "A%02d:w%02d:NCCL" % (i % 40, i % 12),
                       "id": "m-%d" % i}).encode()
    # Each request one second after the previous: a full replay guard refuses a timestamp older than all it holds.
    t = T0 + i
    ts = str(t)
    return t, {"Content-Type": "application/json", "X-API-Key": "gw", "X-Timestamp": ts,
            "X-Signature": signing.sign(SECRET.encode(), ts, body)}, body

def measure(fn, n):
    gc.collect()
    a0 = gc.mem_alloc()
    t0 = time.ticks_us()
    for i in range(n):
        fn(i)
    dt = time.ticks_diff(time.ticks_us(), t0)
    a1 = gc.mem_alloc()
    return (a1 - a0) // n, dt // n

R0 = await held()
# Requests through the handler microdot calls.
REQS = [req(i, "P0" if i % 3 else "P1") for i in range(__N__)]
def one(i):
    NOW[0], h, b = REQS[i]
    st, out = s.handle_http("POST", "/api/v1/send_msg", h, b)
    assert st == 200, out
PER_REQ, REQ_US = measure(one, __N__)

# The same through the board's server as it runs: server.Server.serve around microdot's request parsing, routes and
# answers (parse, route, the handler, write the response). The request arrives as raw bytes, the
# way a socket delivers them; the reader returns new bytes per line like asyncio's StreamReader does, and the writer
# drops what it is given (a socket send that succeeds at once allocates nothing on MicroPython).
PEAK = [0]
async def _wait():
    # A socket server waits for the network here, its task suspended. The WebAssembly port only collects once
    # control is back in JavaScript, so the bench yields and collects at each such point: what survives is what the
    # request holds there, and the heap seen just before (all allocated since the previous collection on top of what
    # survived it) bounds the live heap in between from above. On the board a collection can run at any allocation.
    PEAK[0] = max(PEAK[0], gc.mem_alloc())
    await settle()
class Conn:
    WAIT = False
    def __init__(self, data):
        self.data = data
        self.pos = 0
    async def readline(self):
        if Conn.WAIT:
            await _wait()
        i = self.data.find(b"\n", self.pos) + 1
        if i == 0:
            i = len(self.data)
        line = self.data[self.pos:i]
        self.pos = i
        return line
    async def read(self, n=-1):
        if Conn.WAIT:
            await _wait()
        j = len(self.data) if n < 0 else min(len(self.data), self.pos + n)
        out = self.data[self.pos:j]
        self.pos = j
        return out
    async def readexactly(self, n):
        return await self.read(n)
    async def awrite(self, data):
        if Conn.WAIT:
            await _wait()
        self.sent += len(data)
    # The board's connection loop (server._Conn) writes, drains, drops unread input and closes its socket.
    def write(self, data):
        self.sent += len(data)
    async def drain(self):
        if Conn.WAIT:
            await _wait()
    def readinto(self, buf):
        return 0
    def close(self):
        pass
    async def aclose(self):
        pass
    def get_extra_info(self, name):
        return ("192.168.1.10", 40000)
def raw(method, path, h, b):
    head = "%s %s HTTP/1.1\r\nHost: sentinel.local\r\n" % (method, path)
    for k in h:
        head += "%s: %s\r\n" % (k, h[k])
    if b:
        head += "Content-Length: %d\r\n" % len(b)
    return head.encode() + b"\r\n" + b
from sentinel_fw import ticks as _ticks
SERVER = server.Server(web, cfg["http"]["max_body"]) if hasattr(server, "Server") else None
async def serve_board(c):
    # One accepted connection as the board serves it: server.Server.serve (deadlines, limits, out-of-memory answers)
    # around microdot's request parsing, routes and answers (a tree from before the board's own server: microdot's).
    if SERVER is None:
        await web.handle_request(c, c)
    else:
        await SERVER.serve(server._Conn(c, c, c, _ticks.ms(), cfg["http"]["max_body"]))
def conns(items):
    out = []
    for t, data in items:
        c = Conn(data)
        c.sent = 0
        out.append((t, c))
    return out
async def via_server(items):
    n = len(items)
    items.reverse()
    gc.collect()
    a0 = gc.mem_alloc()
    # Popped as they are served, so nothing of the prepared requests outlives the measurement.
    while items:
        t, c = items.pop()
        NOW[0] = t
        await serve_board(c)
        assert c.sent > 0
    return (gc.mem_alloc() - a0) // n
SRV = []
for i in range(__N__):
    t, h, b = req(3000 + i, "P1")
    SRV.append((t, raw("POST", "/api/v1/send_msg", h, b)))
SRV = conns(SRV)
PER_SERVER = await via_server(SRV)
STAT = conns([(T0 + 3000 + __N__, raw("GET", "/api/v1/status", {}, b"")) for i in range(10)])
PER_SERVER_STATUS = await via_server(STAT)
SRV = STAT = None

# A refused request (bad signature): what a flood of forgeries costs.
BAD = [req(2000 + i, "P0") for i in range(__N__)]
def bad(i):
    NOW[0], h, b = BAD[i]
    h["X-Signature"] = "0" * 64
    st, out = s.handle_http("POST", "/api/v1/send_msg", h, b)
    assert st == 401
PER_BAD, BAD_US = measure(bad, __N__)

# The status page.
def status(i):
    s.handle_http("GET", "/api/v1/status", {}, b"")
PER_STATUS, STATUS_US = measure(status, 10)

# The fakes stop copying what they are given: only the firmware's own allocations are measured from here.
neopixel.NeoPixel.instances[-1].keep = 0
neopixel.NeoPixel.instances[-1].frames = []
machine.UART.registry[2].record = False
# Frames: a P0 with a scrolling label owns the display now.
T = [100000]
def frame(i):
    T[0] += 40
    s.frame_step(T[0])
for i in range(200):
    frame(i)
PER_FRAME, FRAME_US = measure(frame, __F__)
def poll(i):
    T[0] += 10
    s.button_step(T[0])
PER_BUTTON, BUTTON_US = measure(poll, __F__)
def speech(i):
    T[0] += 50
    s.speech_step(T[0])
PER_SPEECH, SPEECH_US = measure(speech, __F__)
def net(i):
    T[0] += 500
    s.net_step(T[0])
PER_NET, NET_US = measure(net, 20)

# A box Prometheus scrapes holds the metrics module too (imported on the first scrape): scraped before the held figure.
assert s.handle_http("GET", "/metrics", {}, b"")[0] == 200

# Drop what only the bench holds (its prepared requests, the test client, the fakes' records) before measuring.
REQS = BAD = None
for _p in machine.Pin.registry.values():
    _p.history = []
machine.UART.registry[2].written = bytearray()
machine.UART.registry[2].writes = []
neopixel.NeoPixel.instances[-1].frames = []
micropython.qstr_info()  # the interned names while running: their pools double (one block of 4 B + 3 B a name)
RUNNING = await held() - BASE
STATE = await held() - R0

# The live peak of a request as the board serves it, bounded at every point where the server waits for the network
# (each readline, the body read, each awrite of the response). Measured after the held figures: every yield to
# JavaScript leaves a few dozen bytes behind in this port, which would otherwise count as held.
async def peak_of(items):
    items.reverse()
    worst = 0
    Conn.WAIT = True
    while items:
        t, c = items.pop()
        NOW[0] = t
        h0 = await held()
        PEAK[0] = 0
        await serve_board(c)
        await _wait()
        assert c.sent > 0
        worst = max(worst, PEAK[0] - h0)
    Conn.WAIT = False
    return worst
_items = []
for i in range(__N__):
    t, h, b = req(5000 + i, "P0" if i % 3 else "P1")
    _items.append((t, raw("POST", "/api/v1/send_msg", h, b)))
PEAK_ACCEPTED = await peak_of(conns(_items))
_items = []
for i in range(10):
    t, h, b = req(6000 + i, "P0")
    h["X-Signature"] = "0" * 64
    _items.append((t, raw("POST", "/api/v1/send_msg", h, b)))
PEAK_REFUSED = await peak_of(conns(_items))
PEAK_STATUS = await peak_of(conns([(T0 + 6100, raw("GET", "/api/v1/status", {}, b"")) for i in range(10)]))
PEAK_METRICS = await peak_of(conns([(T0 + 6100, raw("GET", "/metrics", {}, b"")) for i in range(5)]))
_items = None

# The state file the running box saved: a reboot restores it (measure_boot).
with open("/bench_state.json") as _f:
    STATE_FILE = _f.read()
# For comparison, after the held figures (importing the test client interns a few KB of names for good): microdot's
# TestClient, whose own work (rendering the request, parsing the response) is counted.
BEFORE_TC = set(sys.modules)
from microdot.test_client import TestClient
client = TestClient(web)
REQS2 = [req(7000 + i, "P1") for i in range(__N__)]
async def via_microdot():
    gc.collect()
    a0 = gc.mem_alloc()
    for i in range(__N__):
        NOW[0], h, b = REQS2[i]
        r = await client.post("/api/v1/send_msg", headers=h, body=b)
        assert r.status_code == 200, r.text
    return (gc.mem_alloc() - a0) // __N__
PER_HTTP = await via_microdot()
# The test client and whatever it imported (websocket helpers, functools...) are not on the board.
REQS2 = client = TestClient = None
for _m in set(sys.modules) - BEFORE_TC:
    _parent, _, _leaf = _m.rpartition(".")
    if _parent in sys.modules and hasattr(sys.modules[_parent], _leaf):
        delattr(sys.modules[_parent], _leaf)
    sys.modules.pop(_m)

print(json.dumps({"imports": IMPORTS, "built": BUILT, "running": RUNNING, "per_req": PER_REQ, "req_us": REQ_US,
                  "per_http": PER_HTTP,
                  "per_server": PER_SERVER, "per_server_status": PER_SERVER_STATUS,
                  "per_bad": PER_BAD, "bad_us": BAD_US, "per_status": PER_STATUS,
                  "per_frame": PER_FRAME, "frame_us": FRAME_US, "per_button": PER_BUTTON,
                  "button_us": BUTTON_US, "per_speech": PER_SPEECH, "per_net": PER_NET,
                  "active": len(s.terminal.snapshot(NOW[0])["active"]), "state_writes": s.store.writes,
                  "mods": MODS, "dropped": DROPPED, "state": STATE, "state_file": STATE_FILE,
                  "peak_accepted": PEAK_ACCEPTED, "peak_refused": PEAK_REFUSED, "peak_status": PEAK_STATUS,
                  "peak_metrics": PEAK_METRICS,
                  "files": [m.__file__ for m in sys.modules.values()
                            if getattr(m, "__file__", "").startswith("/mpy/")]}))
"""
)


# The board's boot in main.py's order, from the same .mpy files: main.py imports startup (and app), startup checks
# the config file, drops config and pins (collecting), builds the terminal (restoring the state file if there is
# one), drops the boot-only modules (collecting), then app.main's run() builds the microdot app. Between two of the
# firmware's own collections nothing is collected here either, so the heap at a phase's end (garbage included)
# bounds that phase's peak; the bench collects where the firmware does.
BOOT_CODE = (
    PRELUDE
    + r"""
BASE = await held()
from sentinel_fw import startup
cfg = startup.load_config("/config.json")
assert isinstance(cfg, dict), cfg
P_CONFIG = gc.mem_alloc() - BASE
if hasattr(startup, "_drop"):  # a tree from before the board's one module-dropping helper (--against)
    startup._drop(("config", "pins"))
else:
    startup.drop_boot_modules(("config", "pins"))
H_CONFIG = await held() - BASE
t = startup.make_terminal(cfg, "/state.json")
P_BUILD = gc.mem_alloc() - BASE
ACTIVE = len(t.terminal.snapshot(t.clock.now())["active"])
startup.drop_boot_modules()
startup = None
H_BUILD = await held() - BASE
from sentinel_fw.server import make_app
web = make_app(t, cfg["http"]["max_body"])
tasks = list(t.tasks())
P_SERVE = gc.mem_alloc() - BASE
H_SERVE = await held() - BASE
for _m in sys.modules:
    if _m.startswith("sentinel") and not sys.modules[_m].__file__.startswith("/mpy/"):
        raise SystemExit("not loaded from .mpy: %s" % _m)
print(json.dumps({"p_config": P_CONFIG, "h_config": H_CONFIG, "p_build": P_BUILD, "h_build": H_BUILD,
                  "p_serve": P_SERVE, "h_serve": H_SERVE, "active": ACTIVE}))
"""
)

BOOT_CONFIG = {
    "board": "esp32",
    "wifi": {"ssid": "lab", "password": "password123"},
    "keys": {"gw": "0123456789abcdef0123456789abcdef"},
    "terminal": {"utc_offset_min": 480},
}

# Everything the board imports (main.py -> startup.boot -> Sentinel; app.main -> server), in import order; a tree
# measured with --against imports those of them it has.
BOARD_MODULES = (
    "json",
    "time",
    "asyncio",
    "sentinel_fw.ticks",
    "sentinel_core.strictjson",
    "sentinel_core.alarm",
    "sentinel_core.signing",
    "sentinel_core.keyring",
    "sentinel_core.validate",
    "sentinel_core.receiver",
    "sentinel_core.display",
    "sentinel_core.speech",
    "sentinel_core.quiet",
    "sentinel_core.health",
    "sentinel_core.terminal",
    "sentinel_core.layout",
    "sentinel_core.render",
    "sentinel_core.button",
    "sentinel_core.shell",
    "sentinel_core.tts_syn6288",
    "sentinel_fw.pins",
    "sentinel_fw.config",
    "sentinel_fw.clock",
    "sentinel_fw.store",
    "sentinel_fw.wifi",
    "sentinel_fw.pixels",
    "sentinel_fw.buttonpoll",
    "sentinel_fw.tts_uart",
    "sentinel_fw.watchdog",
    "microdot",
    "sentinel_fw.server",
    "sentinel_fw.app",
    "sentinel_fw.startup",
)

SIZES = {}


def board_modules(root):
    lib = os.path.join(root, "firmware", "lib")
    return tuple(
        n
        for n in BOARD_MODULES
        if not n.startswith("sentinel") or os.path.exists(os.path.join(lib, n.replace(".", os.sep) + ".py"))
    )


def board_mpy(root=ROOT):
    """Python code that writes the .mpy files deploy.py builds into /mpy on the MicroPython file system (root: the
    tree whose firmware is built)."""
    import binascii
    import importlib.util
    import tempfile

    SIZES.clear()
    spec = importlib.util.spec_from_file_location("deploy", os.path.join(root, "firmware", "deploy.py"))
    deploy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(deploy)
    lines = [
        "import binascii, os",
        "def _mk(p):",
        "    try:",
        "        os.mkdir(p)",
        "    except OSError:",
        "        pass",
        "_mk('/mpy')",
        "_mk('/mpy/lib')",
    ]
    with tempfile.TemporaryDirectory() as d:
        # microdot's TestClient is not on the board; the bench needs it (imported after the heap is measured).
        files = deploy.board_files() + [
            (os.path.join(deploy.microdot_dir(), "test_client.py"), "lib/microdot/test_client.py")
        ]
        built = deploy.compile_all(files, d, log=lambda s: None)
        dirs = set()
        total = 0
        for local, dst in built:
            if not dst.endswith(".mpy"):
                continue
            parent = "/mpy/" + os.path.dirname(dst)
            if parent not in dirs:
                lines.append("_mk(%r)" % parent)
                dirs.add(parent)
            with open(local, "rb") as f:
                data = f.read()
            if not dst.endswith("test_client.mpy"):
                total += len(data)
                SIZES["/mpy/" + dst] = len(data)
            lines.append(
                "with open(%r, 'wb') as _f:\n    _f.write(binascii.unhexlify(%r))"
                % ("/mpy/" + dst, binascii.hexlify(data).decode())
            )
    return "\n".join(lines) + "\n", total


def measure(root=ROOT, pad=0, boots=True):
    """The figures of root's firmware, its heap laid out after a block of pad bytes (LAYOUTS); boots: measure the
    boot phases too (the same for every pad: a separate run)."""
    import json

    setup, mpy_bytes = board_mpy(root)
    code = setup + (
        CODE.replace("__N__", str(REQUESTS))
        .replace("__F__", str(FRAMES))
        .replace("__PAD__", str(pad))
        .replace("__MODS__", repr(board_modules(root)))
    )
    out = run_micropython(code, firmware=True)
    line = [x for x in out.splitlines() if x.startswith("{")][-1]
    m = json.loads(line)
    pools = []
    for q in [x for x in out.splitlines() if x.startswith("qstr pool:")][:3]:
        pools.append(dict(kv.split("=") for kv in q.split(":", 1)[1].replace(",", " ").split()))
    # The names of the fakes and of this script were interned before the baseline: not counted.
    m["qstr_n"] = int(pools[1]["n_qstr"]) - int(pools[0]["n_qstr"])
    m["qstr_bytes"] = int(pools[1]["n_total_bytes"]) - int(pools[0]["n_total_bytes"])
    m["qstr_running"] = int(pools[2]["n_qstr"]) - int(pools[0]["n_qstr"])
    m["qstr_pools"] = int(pools[2]["n_pool"])
    m["mpy_bytes"] = mpy_bytes
    m["pad"] = pad
    state = m.pop("state_file")
    if boots:
        m["boot_first"] = measure_boot(setup, None)
        m["boot_reboot"] = measure_boot(setup, state)
    # Bytecode and constants of the modules in use: in RAM when loaded from a .mpy, in flash when frozen.
    m["in_use"] = sum(SIZES.get(f, 0) for f in m["files"] if "/config." not in f and "/pins." not in f)
    return m


def measure_boot(setup, state):
    """The boot's phase bounds (bytes above the heap before main.py's imports), with state as /state.json."""
    import json

    files = [("/config.json", json.dumps(BOOT_CONFIG))]
    if state is not None:
        files.append(("/state.json", state))
    code = "".join("with open(%r, 'w') as _f:\n    _f.write(%r)\n" % f for f in files)
    out = run_micropython(setup + code + BOOT_CODE, firmware=True)
    return json.loads([x for x in out.splitlines() if x.startswith("{")][-1])


def kb(n):
    return "%.1f KB" % (n / 1024)


def budget(m):
    """(boot, running, worst request's name, its peak, the requests' peaks) from measure()'s figures: boot is the
    worst phase of a first boot and of a reboot with state; running is what is held plus the worst request's live
    peak bound. The firmware fits a plain ESP32 when both are under ESP32_HEAP."""
    # What a request needs on top of what is held: the bound of its live peak at the server's network waits.
    peaks = (
        ("an accepted alarm", m["peak_accepted"]),
        ("a refused request", m["peak_refused"]),
        ("GET /api/v1/status", m["peak_status"]),
        ("GET /metrics", m["peak_metrics"]),
    )
    worst_name, worst = max(peaks, key=lambda x: x[1])
    b1, b2 = m["boot_first"], m["boot_reboot"]
    boot = max(b1["p_config"], b1["p_build"], b1["p_serve"], b2["p_config"], b2["p_build"], b2["p_serve"])
    return boot, m["running"] + worst, worst_name, worst, peaks


def tree_of(ref, tmp):
    """A directory holding ref's firmware/: ref itself when it is a directory, else that git commit's firmware/
    exported into tmp (git archive: no worktree, nothing left behind)."""
    import io
    import subprocess
    import tarfile

    if os.path.isdir(ref):
        return ref
    d = os.path.join(tmp, ref.replace("/", "_"))
    data = subprocess.run(["git", "-C", ROOT, "archive", ref, "firmware"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        t.extractall(d)
    return d


# The collector is conservative: any word in the heap that happens to hold the address of a live block's start
# keeps that block and all it refers to. On this port the heap sits at low addresses (~0x50000-0x850000), so
# bytecode, counters and small binary data are full of such words; which blocks they hit moves with every shift of
# the layout. With nothing changed but a block of 0-1024 bytes allocated before the baseline, one run gave 130.4-131.5
# KB held while running for 27bd3e1's firmware and 132.1-133.3 KB for 0b82a34's. Trees are therefore compared over
# several layouts, by the least figure (the nearest to what the firmware itself holds) and the spread. A difference
# that stays in every layout is the firmware's own (docs/FIRMWARE.md "Comparing trees"). (On an ESP32 the heap is at
# 0x3FFxxxxx: words that look like its addresses are far rarer there.)
LAYOUTS = (0, 64, 256, 512, 1024)


def compare(refs, pads=LAYOUTS, jobs=2):
    """The headline figures of each ref's firmware and of this tree's, measured by this one script in each layout
    (pads): the held figure moves by KBs with what the bench itself interns before its baseline (the qstr pools grow
    in doubling blocks) and with false pointers (LAYOUTS), so trees are compared only within one run of the same
    script, by their least figure over the layouts."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    with tempfile.TemporaryDirectory() as tmp:
        trees = [(ref, tree_of(ref, tmp)) for ref in refs] + [("this tree", ROOT)]
        runs = [(name, root, pad) for name, root in trees for pad in pads]
        with ThreadPoolExecutor(jobs) as ex:  # memory figures do not depend on the machine's load
            results = list(ex.map(lambda r: measure(r[1], r[2], boots=r[2] == pads[0]), runs))
    print(
        "Same run, same bench script, each tree's firmware (.mpy install, WebAssembly), least over %d layouts "
        "(spread of held while running in brackets):" % len(pads)
    )
    print()
    print(
        "| tree | .mpy on flash | held after imports | qstrs while running (pools) | worst boot phase "
        "| held while running | worst request's live peak | worst (held + that peak) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, _root in trees:
        ms = [m for (n, _r, _p), m in zip(runs, results, strict=True) if n == name]
        boots = ms[0]
        least = min(ms, key=lambda m: m["running"])
        least.setdefault("boot_first", boots["boot_first"])
        least.setdefault("boot_reboot", boots["boot_reboot"])
        boot, worst_total, worst_name, worst, _ = budget(least)
        print(
            "| %s | %s | %s | %d (%d) | %s | %s (%s) | %d B (%s) | %s |"
            % (
                name,
                kb(least["mpy_bytes"]),
                kb(min(m["imports"] for m in ms)),
                least["qstr_running"],
                least["qstr_pools"],
                kb(boot),
                kb(least["running"]),
                "-".join(kb(f(m["running"] for m in ms)) for f in (min, max)),
                worst,
                worst_name,
                kb(worst_total),
            )
        )
    return 0


def main():
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="REF",
        help="also measure this git commit's (or directory's) firmware in the same run and print one table "
        "of the headline figures (repeatable)",
    )
    a = p.parse_args()
    if a.against:
        return compare(a.against)
    m = measure()
    boot, running, worst_name, worst, peaks = budget(m)
    b1, b2 = m["boot_first"], m["boot_reboot"]
    total = max(running, boot)
    # The older, looser measure: all the garbage of the worst request, as if nothing were collected during it.
    loose_extra = max(m["per_server"], m["per_server_status"], m["per_req"], m["per_status"])
    loose = m["running"] + loose_extra
    in_use = m["in_use"]
    frozen = running - in_use
    print("Firmware memory under MicroPython (WebAssembly build, fakes for the hardware)")
    print()
    print("| what | heap |")
    print("|---|---|")
    print("| .mpy files on flash (deploy.py's build of every board library) | %s |" % kb(m["mpy_bytes"]))
    print("| held after importing every module the board runs (from those .mpy) | %s |" % kb(m["imports"]))
    print(
        "| of which interned names (%d qstrs: identifiers, attribute and key names, short strings) | %s |"
        % (m["qstr_n"], kb(m["qstr_bytes"]))
    )
    print(
        "| held by the built terminal (config, state machine, renderer, receiver, drivers, microdot app) | %s |"
        % kb(m["built"])
    )
    print(
        "| boot in main.py's order, peak bound while checking the config file (config, pins loaded) | %s |"
        % kb(b1["p_config"])
    )
    print(
        "| boot, peak bound while building the terminal: first boot / reboot restoring %d active alarms | %s / %s |"
        % (b2["active"], kb(b1["p_build"]), kb(b2["p_build"]))
    )
    print(
        "| boot, peak bound while making the microdot app and the tasks: first boot / reboot | %s / %s |"
        % (kb(b1["p_serve"]), kb(b2["p_serve"]))
    )
    print("| held when the loop starts: first boot / reboot | %s / %s |" % (kb(b1["h_serve"]), kb(b2["h_serve"])))
    print("| freed by dropping the boot-only modules (config, pins, startup) once built | -%s |" % kb(m["dropped"]))
    print(
        "| held while running (after %d accepted alarms, %d active, replay guard filled, /metrics scraped) | %s |"
        % (REQUESTS * 2, m["active"], kb(m["running"]))
    )
    print(
        "| of which appeared while serving (16 active alarms, speech queue, persist, metrics) | %s |" % kb(m["state"])
    )
    for name, n in peaks:
        print("| live peak of %s above what is held (bound at the server's network waits) | %d B |" % (name, n))
    print(
        "| allocated per accepted request, through the handler microdot calls (all garbage) | %d B (%d us) |"
        % (m["per_req"], m["req_us"])
    )
    print("| allocated per accepted request, through microdot's server side (all garbage) | %d B |" % m["per_server"])
    print(
        "| allocated per GET /api/v1/status, through microdot's server side (all garbage) | %d B |"
        % m["per_server_status"]
    )
    print(
        "| (for comparison) per accepted request through microdot's TestClient, the client's own work included "
        "| %d B |" % m["per_http"]
    )
    print("| allocated per refused request (bad signature) | %d B (%d us) |" % (m["per_bad"], m["bad_us"]))
    print("| allocated per GET /api/v1/status, handler only | %d B |" % m["per_status"])
    print(
        "| allocated per rendered frame (display + render + NeoPixel, P0 with a scrolling label) | %d B (%d us) |"
        % (m["per_frame"], m["frame_us"])
    )
    print("| allocated per button poll (100 Hz) | %d B (%d us) |" % (m["per_button"], m["button_us"]))
    print("| allocated per speech step (20 Hz) | %d B |" % m["per_speech"])
    print("| allocated per network step (2 Hz) | %d B |" % m["per_net"])
    print()
    print("Heap held per module import (in import order; shared dependencies count where first imported; lumpy: the")
    print("interned-name pool grows in doubling chunks, charged to the module that needed the next one):")
    for name, n in sorted(m["mods"], key=lambda x: -x[1])[:12]:
        print("  %-28s %s" % (name, kb(n)))
    print()
    print(
        "Against a plain ESP32's ~%s of Python heap (a lower bound: no fragmentation, collections at the waits;"
        % kb(ESP32_HEAP)
    )
    print("bench/bench_firmware_heap.py bisects the heap a real runtime needs):")
    print("  the .mpy install (deploy.py's default, for a board with PSRAM):")
    print("    boot (main.py's order; the worst phase of a first boot and of a reboot with state): %s" % kb(boot))
    print(
        "    running: held + the live peak of the worst request (%s) = %s + %s = %s"
        % (worst_name, kb(m["running"]), kb(worst), kb(running))
    )
    print(
        "    -> %s"
        % (
            "within the WROOM's heap by this bound, %s left; a real heap needs more" % kb(ESP32_HEAP - total)
            if total < ESP32_HEAP
            else "%s over a WROOM's heap even by this bound: the .mpy install is for PSRAM boards"
            % kb(total - ESP32_HEAP)
        )
    )
    print(
        "    (looser: held + all the garbage of the worst request, nothing collected = %s + %s = %s)"
        % (kb(m["running"]), kb(loose_extra), kb(loose))
    )
    print(
        "  frozen into the image (firmware/manifest.py, the plain WROOM's install; estimate: running minus the %s"
        % kb(in_use)
    )
    print("  of .mpy bytecode and constants of the modules in use, which then run from flash):")
    print(
        "    ~%s -> headroom ~%s (%.0f %% of the heap free)"
        % (kb(frozen), kb(ESP32_HEAP - frozen), 100.0 * (ESP32_HEAP - frozen) / ESP32_HEAP)
    )
    print("  ESP32-WROVER / ESP32-S3 with PSRAM (stock SPIRAM image): megabytes of heap, the .mpy install's board.")
    per_s = m["per_frame"] * 25 + m["per_button"] * 100 + m["per_speech"] * 20 + m["per_net"] * 2
    print(
        "  garbage made per second when idle-but-animating (25 fps, button 100 Hz, speech 20 Hz, net 2 Hz): %s/s"
        % kb(per_s)
    )
    return 0 if frozen < ESP32_HEAP else 1


if __name__ == "__main__":
    sys.exit(main())
