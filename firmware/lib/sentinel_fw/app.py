# The terminal on the board: the shared core's shell glue (sentinel_core.shell) wired to the ESP32's I/O. Each
# concern is one small step method driven by its own asyncio task; a step reads its hardware, hands what it read to
# the glue and does what the glue answers (show this frame, say this, stop speaking, write the state). Tests call the
# same methods with a fake clock and fake hardware. Getting from the config file to a running terminal (or to the
# config-error screen) is sentinel_fw.startup, dropped once the terminal runs. The contract: docs/SHELL_CONTRACT.md.
import gc
import json
import sys

from sentinel_core import VERSION
from sentinel_core.compat import const
from sentinel_core.shell import COMPLETED, FAILED, PERSIST, SAY, STOP
from sentinel_fw import forget, log, ticks

# The classes the annotations of Sentinel name, for pyright alone (firmware/pyrightconfig.json defines _TYPING
# true): the constant folds to 0, so MicroPython's compiler drops the block.
_TYPING = const(0)
if _TYPING:
    from sentinel_core.shell import ShellGlue
    from sentinel_fw.buttonpoll import ButtonPoller
    from sentinel_fw.pixels import Pixels
    from sentinel_fw.tts_uart import TtsUart
    from sentinel_fw.watchdog import Watchdog
    from sentinel_fw.wifi import WiFi


async def _sleep_ms(ms):
    import asyncio

    if hasattr(asyncio, "sleep_ms"):
        await asyncio.sleep_ms(ms)
    else:
        await asyncio.sleep(ms / 1000)


def _json_parts(v, depth):
    # v's JSON text (json.dumps's own spacing) in pieces, down to depth levels of dicts and lists: a value holding a
    # list of dicts (the speech queue's ~16 entries) then never sits beside the whole of its text.
    if depth and isinstance(v, (dict, list)):
        d = isinstance(v, dict)
        sep = "{" if d else "["
        for x in v:
            if d:
                yield '%s"%s": ' % (sep, x)
                x = v[x]
            else:
                yield sep
            yield from _json_parts(x, depth - 1)
            sep = ", "
        yield ("{}" if d else "[]") if sep != ", " else ("}" if d else "]")
    else:
        yield json.dumps(v)


class Sentinel:
    """The running terminal. cfg: a validated config (sentinel_fw.config). clock: a sentinel_fw.clock.Clock.
    wlan: a network.WLAN (None: no Wi-Fi, e.g. tests of the HTTP path). store: a sentinel_fw.store.Store."""

    # Its parts, set by name by sentinel_fw.build (bare annotations: nothing on the board, the names for pyright).
    glue: "ShellGlue"
    frame_ms: int
    pixels: "Pixels"
    button: "ButtonPoller | None"
    tts: "TtsUart | None"
    wifi: "WiFi | None"
    watchdog: "Watchdog"

    def __init__(self, cfg, clock, store=None, wlan=None, wdt_factory=None, config_error=None):
        self.cfg = cfg
        self.clock = clock
        self.store = store
        self.errors = []  # (what, message) shown in the status: a missing chip, a bad restore...
        self.started_ms = ticks.ms()
        # Building the parts is boot-only code, in its own module so that its bytecode leaves the heap once built.
        from sentinel_fw.build import build

        try:
            build(self, wlan, wdt_factory, config_error)  # sets the parts annotated above, by name
        finally:
            forget("sentinel_fw", "build")
        self.terminal = self.glue.terminal
        self.receiver = self.glue.receiver

    def problem(self, what, message):
        """A part that is missing at boot or a state that cannot be restored (build.py says so): shown in the
        status and logged, and the rest works."""
        self.errors.append((what, message))
        log("%s: %s" % (what, message))

    # ---- persistence

    def persist(self):
        """Write the state to flash when it changed; True when written."""
        g = self.glue
        if self.store is None or not g.dirty:
            return False
        # Written field by field into the file: the document is never built in the heap.
        version = g.terminal.state_version
        if self.store.save_with(g.write_state):
            g.saved(version)
            return True
        return False

    # ---- HTTP

    def handle_http(self, method, path, headers, body, persist=True):
        """The handler microdot calls: (status, body bytes). persist=False: the caller writes the state once the
        answer is sent (the server does, so that the write is not part of the request's peak)."""
        now = self.clock.now()
        if path == "/api/v1/status":
            if method != "GET":
                return 405, b'{"ok": false, "error": "method_not_allowed", "message": "use GET"}'
            return 200, json.dumps(self.status(now)).encode()
        if path == "/metrics":
            if method != "GET":
                return 405, b'{"ok": false, "error": "method_not_allowed", "message": "use GET"}'
            return 200, "".join(self.metrics_parts(now)).encode()
        r = self.receiver.handle(method, path, headers, body, now, self.clock.synced, False)
        if self.glue.request(r, now) == PERSIST and persist:
            self.persist()
        return r.status, r.body_bytes()

    def status(self, now):
        snap = self.terminal.snapshot(now)
        snap["device"] = self.device_status()
        return snap

    def status_parts(self, now):
        """GET /api/v1/status as JSON text in pieces: one top-level entry, or one active alarm, each. The server
        writes each piece as it comes, so the board never holds the whole document nor all of its dicts (~12 KB
        with 16 active alarms). Parses to what json.dumps(self.status(now)) gives (the same text on CPython)."""
        sep = "{"
        for k, v in self.terminal.snapshot_items(now):
            if k == "active":
                yield sep + '"active": ['
                s = ""
                for row in self.terminal.active_rows(now):
                    yield s + json.dumps(row)
                    s = ", "
                yield "]"
            else:
                yield '%s"%s": ' % (sep, k)
                yield from _json_parts(v, 2)
            v = None
            sep = ", "
        sep = ', "device": {'
        for k, v in self.device_items():
            yield '%s"%s": ' % (sep, k)
            yield from _json_parts(v, 1)
            sep = ", "
        yield "}}"

    def metrics_parts(self, now):
        """GET /metrics in pieces (sentinel_core.metrics, the emulator's writer too). The module is loaded for the
        scrape and dropped after it: a scrape every few seconds costs a .mpy load, a box holding it between scrapes
        its heap for good."""
        from sentinel_core import metrics

        shell = {
            "state_writes_total": 0 if self.store is None else self.store.writes,
            "uptime_seconds": ticks.diff(ticks.ms(), self.started_ms) // 1000,
            "watchdog_feeds_total": self.watchdog.feeds,
        }
        try:
            shell["heap_free_bytes"] = gc.mem_free()
        except AttributeError:
            pass
        try:
            yield from metrics.parts(self.glue, now, shell)
        finally:
            metrics = None
            shell = None
            forget("sentinel_core", "metrics")

    def device_status(self):
        return dict(self.device_items())

    def device_items(self):
        """The status page's "device" entry, one (key, value) at a time: status_parts writes each as it comes, since
        the whole dict and its JSON text at once were the status page's largest step (~2 KB above the rest)."""
        tts = self.tts
        yield "board", self.cfg["board"]
        yield "name", self.cfg["name"]
        yield "firmware", VERSION
        yield "uptime_s", ticks.diff(ticks.ms(), self.started_ms) // 1000
        yield "matrix", {"ok": self.pixels.ok, "leds": self.pixels.n, "frames": self.pixels.frames}
        yield (
            "speech",
            {
                "chip": self.cfg["tts"]["chip"],
                "present": tts is not None,
                "answering": None if tts is None else tts.answering,
            },
        )
        yield "clock", {"synced": self.clock.synced, "syncs": self.clock.syncs, "error": self.clock.last_error}
        yield (
            "wifi",
            None
            if self.wifi is None
            else {"connected": self.wifi.connected, "ip": self.wifi.address(), "attempts": self.wifi.attempts},
        )
        yield "watchdog", {"feeds": self.watchdog.feeds, "stale": self.watchdog.stale(ticks.ms())}
        total, refused = self.glue.http_totals()
        yield "http", {"requests": total, "refused": refused}
        yield "flash", None if self.store is None else {"writes": self.store.writes, "error": self.store.last_error}
        yield "problems", ["%s: %s" % p for p in self.errors]
        try:
            free = gc.mem_free()
        except AttributeError:
            return
        yield "heap_free", free

    # ---- the steps, one per task

    def frame_step(self, t_ms):
        g = self.glue
        buf = g.frame(self.clock.now(), t_ms)
        self.pixels.show(buf)
        if self.button is not None:
            self.button.set_lamp(g.lamp)
        self.watchdog.beat("frame", t_ms)
        return buf

    def button_step(self, t_ms):
        """The press this poll completed ("short", "long") or None."""
        ev = None
        if self.button is not None:
            ev = self.glue.button_level(self.button.pressed(), t_ms)
            if ev is not None:
                log("button: %s press" % ev)
                self.glue.press(ev, self.clock.now())
                self.persist()
        self.watchdog.beat("button", t_ms)
        return ev

    def speech_step(self, t_ms):
        """The utterance handed to the chip in this step, or None."""
        g = self.glue
        tts = self.tts
        now = self.clock.now()
        said = None
        if tts is None:
            g.speech(now, None)
        else:
            # The glue first: a cut (a press, a P0) wins over an end the chip reports in the same step.
            act = g.speech(now, tts.speaking)
            if act == STOP:
                tts.stop(t_ms)
            elif act == SAY:
                u = g.utterance
                try:
                    tts.say(u.text, t_ms, u.seq)
                    said = u
                except ValueError as e:
                    log("speech: cannot say utterance %d: %s" % (u.seq, e))
                    g.voice_done(now, u.seq, FAILED)
            if tts.step(t_ms):
                g.voice_done(now, tts.seq, COMPLETED)
            if tts.answering is not None:
                g.health("speech", tts.answering, now)
        self.watchdog.beat("speech", t_ms)
        return said

    def net_step(self, t_ms):
        g = self.glue
        if self.wifi is not None:
            up = self.wifi.step(t_ms)
            g.health("network", up, self.clock.now())
            if up and self.clock.due(t_ms):
                was = self.clock.synced
                ok = self.clock.sync(t_ms)
                if ok and not was:
                    log("clock synced by NTP")
                elif not ok:
                    log("NTP failed: %s" % self.clock.last_error)
                g.health("clock", self.clock.synced, self.clock.now())
        if g.tick(self.clock.now()) == PERSIST:
            self.persist()
        self.watchdog.beat("net", t_ms)

    # ---- the loop

    async def _every(self, period_ms, step):
        while True:
            try:
                step(ticks.ms())
            except Exception as e:  # noqa: BLE001 - a step failing for good stops its beats: the watchdog
                log("%s failed: %s: %s" % (getattr(step, "__name__", "step"), type(e).__name__, e))
                try:
                    sys.print_exception(e)
                except AttributeError:
                    pass
            await _sleep_ms(period_ms)

    def watchdog_step(self, t_ms):
        return self.watchdog.check(t_ms)

    def tasks(self):
        """The coroutines of the main loop (the HTTP server is started separately)."""
        t0 = ticks.ms()
        for name in ("frame", "button", "speech", "net"):
            self.watchdog.expect(name, t0)
        return [
            self._every(self.frame_ms, self.frame_step),
            self._every(10, self.button_step),
            self._every(50, self.speech_step),
            self._every(500, self.net_step),
            self._every(1000, self.watchdog_step),
        ]

    async def run(self):
        import asyncio

        from sentinel_fw.server import make_server

        http = self.cfg["http"]
        self.server = make_server(self, http)
        for coro in self.tasks():
            asyncio.create_task(coro)
        log("listening on port %d" % http["port"])
        await self.server.run("0.0.0.0", http["port"])


def gc_every(free):
    """Bytes to allocate between two collections when `free` bytes are free: a quarter of it, 4-64 KB. gc.threshold()
    counts what was allocated since the last collection; the old mem_free() // 4 + mem_alloc() added what is held,
    so on a nearly full heap it was above what is free and never fired (collections came only when the heap was
    full). Small, frequent collections keep the heap from fragmenting; 64 KB bounds a PSRAM board's pauses."""
    n = free // 4
    return 4096 if n < 4096 else 65536 if n > 65536 else n


def main(terminal):
    """Run a built terminal (sentinel_fw.startup.boot) until the board resets."""
    try:
        gc.collect()
        gc.threshold(gc_every(gc.mem_free()))
    except AttributeError:
        pass
    import asyncio

    log("GPU Sentinel %s on %s" % (VERSION, terminal.cfg["board"]))
    asyncio.run(terminal.run())
