"""The emulator's engine: one thread owns the core's shell glue (sentinel_core.shell: Terminal, Receiver, Button,
Renderer) and steps it at a steady frame rate; the engine itself only does I/O (the voice, the state file, frames
for the window and the web page). The contract between the two: docs/SHELL_CONTRACT.md. Everything else (HTTP
threads, the window, the voice worker, tests) talks to it through a thread-safe inbox and reads what it publishes:
an immutable View replaced after every change, so readers never need a lock and never see half an update.

A signed request is verified and applied inside the engine thread and only then answered, so an HTTP 200 means the
terminal has the alarm (the RFC's gateway counts 200 as the terminal's acknowledgement).
"""

import collections
import json
import os
import queue
import sys
import threading
import time
from typing import Any

from emulator import png
from host_client.logs import error_words
from sentinel_core import silence
from sentinel_core.alarm import LEVEL_NAMES
from sentinel_core.button import Button
from sentinel_core.keyring import KeyRing
from sentinel_core.layout import Layout
from sentinel_core.live_settings import RESTART_KEYS as CORE_RESTART_KEYS
from sentinel_core.live_settings import apply_live
from sentinel_core.quiet import format_hhmm
from sentinel_core.receiver import Receiver
from sentinel_core.render import Renderer
from sentinel_core.shell import COMPLETED, CUT, SAY, STOP, ShellGlue, applied

ANSWER_TIMEOUT_S = 2.0
FRAMES_KEPT = 120
STATE_SAVE_MIN_S = 1.0
TICKS_MASK = (1 << 30) - 1  # the core's ms ticks wrap like MicroPython's ticks_ms()


class Frame:
    """One rendered frame: rgb is row-major (x, y) RGB bytes, whatever the strip's wiring and byte order."""

    __slots__ = ("seq", "t_ms", "now", "width", "height", "rgb", "display")

    def __init__(self, *, seq, t_ms, now, width, height, rgb, display):
        self.seq = seq
        self.t_ms = t_ms
        self.now = now
        self.width = width
        self.height = height
        self.rgb = rgb
        self.display = display

    def pixel(self, x, y):
        i = (y * self.width + x) * 3
        return tuple(self.rgb[i : i + 3])

    def png(self, scale=16):
        if scale <= 1:
            return png.encode(self.width, self.height, self.rgb)
        return png.encode(*png.matrix_image(self.width, self.height, self.rgb, scale=scale, gap=max(1, scale // 5)))


class View:
    """What the engine publishes: the latest frame, the terminal's snapshot and the emulator's own facts."""

    __slots__ = ("frame", "snapshot", "display", "voice", "button_pressed", "stamp", "silence")

    def __init__(self, *, frame, snapshot, display, voice, button_pressed, stamp, silence=None):
        self.frame = frame
        self.snapshot = snapshot
        self.display = display
        self.voice = voice
        self.button_pressed = button_pressed
        self.stamp = stamp
        self.silence = silence  # why the shown alarm is not spoken: sentinel_core.silence.reason, or None


class _Pending:
    __slots__ = ("args", "done", "result", "posted")

    def __init__(self, args):
        self.args = args
        self.done = threading.Event()
        self.result: Any = None  # what fn returned in the engine thread, or the exception it raised
        self.posted = time.perf_counter()


class Metrics:
    """The emulator's own counters for /metrics (what the terminal counts is the glue's), written by the engine
    thread, read under a lock by the HTTP thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.frame_overruns = 0
        self.state_writes = 0
        self.handle_seconds_sum = 0.0
        self.handle_count = 0


def local_utc_offset_min(now=None):
    t = time.localtime(now)
    return int(t.tm_gmtoff // 60)


def terminal_settings(cfg, now):
    """The core Terminal's settings from the emulator's config: its terminal section, with the laptop's UTC offset
    (or the config's utc_offset_min) for quiet hours."""
    term_cfg = dict(cfg.get("terminal") or {})
    if term_cfg.get("utc_offset_min") is None:
        off = cfg.get("utc_offset_min")
        term_cfg["utc_offset_min"] = local_utc_offset_min(now) if off is None else off
    return term_cfg


# The config keys a running emulator does not take: they size the matrix, the window, the voice, the replay memory
# or the terminal's health and speech queue. A reload names those that changed.
RESTART_KEYS = (
    "host",
    "port",
    "width",
    "height",
    "serpentine",
    "rotation",
    "fps",
    "brightness",
    "night_brightness",
    "night_p0_full",
    "budget_ma",
    "replay_capacity",
    "voice",
    "key_id",
    "secret",
)


def accepted_line(result):
    """One line for the log of a request the terminal accepted and acted on (an alarm, an ACK, an unmute), else
    None. Never the secret or a signature: the request's kind, level, key, id and text."""
    kind = result.kind
    if kind == "alarm":
        a = result.alarm
        text = a.text if len(a.text) <= 60 else a.text[:57] + "..."
        return "accepted %s alarm%s%s: %s" % (
            LEVEL_NAMES[a.level],
            " key %s" % a.key if a.key else "",
            " id %s" % a.id if a.id else "",
            text,
        )
    if kind == "ack":
        ack = result.ack
        what = "clear (long press)" if ack["long"] else "mute"
        return "accepted ACK: %s%s" % (what, " of incident %s" % ack["key"] if ack.get("key") else "")
    if kind == "unmute":
        key = (result.payload or {}).get("key")
        return "accepted unmute%s" % (" of incident %s" % key if key else ": the mute and the acknowledgements end")
    return None


class Engine:
    def __init__(self, cfg, voice=None, state_path=None, log=None, clock=time.time, ticks=time.monotonic):
        self.cfg = cfg
        self._boot_cfg = cfg
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.clock = clock
        self.ticks = ticks
        self.period = 1.0 / cfg["fps"]
        self.metrics = Metrics()
        self.state_path = state_path
        self.voice = voice
        self._inbox = queue.Queue()
        self._button_level = False
        self._t0 = ticks()
        self._frame_seq = 0
        self._frames = collections.deque(maxlen=FRAMES_KEPT)
        self._frames_lock = threading.Lock()
        self._running = False
        self._thread = None
        self._last_save = 0.0
        self._view = None
        self.error = None

        now = clock()
        term_cfg = terminal_settings(cfg, now)
        receiver = Receiver(
            KeyRing({cfg["key_id"]: cfg["secret"].encode("utf-8")}), replay_capacity=cfg.get("replay_capacity", 2048)
        )
        # Layout and Renderer raise ValueError on a panel they cannot drive: the caller reports it as config.
        self.layout = Layout(
            cfg["width"], cfg["height"], serpentine=cfg.get("serpentine", True), rotation=cfg.get("rotation", 0)
        )
        renderer = Renderer(
            self.layout,
            brightness=cfg["brightness"],
            night_brightness=cfg["night_brightness"],
            night_p0_full=cfg.get("night_p0_full", True),
            budget_ma=cfg["budget_ma"],
        )
        button = Button(int(term_cfg.get("debounce_ms", 30)), int(term_cfg.get("long_ms", 3000)))
        self.glue = ShellGlue(term_cfg, receiver, renderer, button, now=now)
        self.config_error = self.glue.config_error
        if self.config_error:
            self.log("config: %s: the matrix shows config_error until it is fixed" % self.config_error)
        self.terminal = self.glue.terminal
        self.receiver = receiver
        self.renderer = renderer
        self.button = button
        # The image as it reads on the mounted panel (a rotated panel swaps width and height).
        self.width = self.layout.cols
        self.height = self.layout.rows
        self.glue.health("clock", ok=True, now=now)  # the laptop's clock is NTP-synced by its OS
        self.glue.health("network", ok=True, now=now)  # it answers on loopback, so it is reachable
        if voice is not None:
            voice.on_done = self._voice_done
            if voice.mode != "off":
                # Honest health: a voice nobody can hear (no audio device and no --wav-dir, no speech engine) is
                # a speech fault, as a dead TTS chip is on the box; the status's emulator.voice says why.
                self.glue.health("speech", ok=bool(voice.audible), now=now)
                if not voice.audible:
                    self.log("voice: %s: the speech health flag is down" % voice.silent_reason)
        self._restore(now)
        self._render(now)

    # -- lifecycle ------------------------------------------------------------------
    def start(self):
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout=2.0):
        self._running = False
        self._inbox.put(("wake",))
        if self._thread is not None:
            self._thread.join(timeout)
        self._save(force=True)

    @property
    def alive(self):
        return self._thread is not None and self._thread.is_alive()

    # -- API for other threads ----------------------------------------------------------------------------------------
    def handle_request(self, method, path, headers, body, timeout=ANSWER_TIMEOUT_S):
        """Verify and apply one HTTP request in the engine thread; returns the core's Result (or None on timeout)."""
        p = _Pending((method, path, headers, body))
        self._inbox.put(("request", p))
        if not p.done.wait(timeout):
            return None
        return p.result

    def refused(self, result, timeout=ANSWER_TIMEOUT_S):
        """A request the HTTP front refused by its head alone (result: the core's refusal, e.g.
        Receiver.too_large): counted by the glue in the engine thread, as the board's server counts it. Returns
        result, for the front to answer."""
        p = _Pending(result.answer.get("error"))
        self._inbox.put(("refusal", p))
        p.done.wait(timeout)
        return result

    def call(self, fn, timeout=ANSWER_TIMEOUT_S):
        """Run fn(terminal, now) in the engine thread and return its value (for tests and tools)."""
        p = _Pending(fn)
        self._inbox.put(("call", p))
        if not p.done.wait(timeout):
            raise TimeoutError("engine did not answer within %.1f s" % timeout)
        if isinstance(p.result, BaseException):
            raise p.result
        return p.result

    def reload(self, cfg):
        """Give the running terminal cfg's live settings (sentinel_core.live_settings.LIVE); ValueError (nothing
        changed) on a bad one. Returns a line saying what is in force and which changed keys need a restart."""
        term_cfg = terminal_settings(cfg, self.clock())
        quiet = self.call(lambda t, now: apply_live(t, term_cfg))
        boot = self._boot_cfg  # what the parts that do not change live were built from
        old_term, new_term = boot.get("terminal") or {}, cfg.get("terminal") or {}
        restart = [k for k in RESTART_KEYS if boot.get(k) != cfg.get(k)]
        restart += [
            "terminal." + k
            for k in CORE_RESTART_KEYS + ("debounce_ms", "long_ms")
            if old_term.get(k) != new_term.get(k)
        ]
        self.cfg = dict(self.cfg, terminal=new_term, utc_offset_min=cfg.get("utc_offset_min"))
        line = "quiet hours %s, mute %d s, speech gap %s s" % (
            "%s-%s" % (format_hhmm(quiet.start), format_hhmm(quiet.end)) if quiet.enabled else "off",
            term_cfg.get("mute_s", 900),
            term_cfg.get("speech_gap_s", 2),
        )
        if restart:
            line += "; %s changed: they take a restart" % ", ".join(restart)
        return line

    def set_button(self, *, pressed):
        """The raw button level (window click, keyboard, tests). The core's Button debounces it."""
        self._inbox.put(("button", bool(pressed)))

    def press_event(self, kind, timeout=ANSWER_TIMEOUT_S, *, by="window"):
        """A whole press from the window or the browser page, applied in the engine thread before this returns:
        "short" (mute) or "long" (clear), as the debounced button gives them, or "unmute". A click needs no
        debounce: that is the mechanical button's (set_button feeds the core's Button)."""
        if kind not in ("short", "long", "unmute"):
            raise ValueError("press must be short, long or unmute, got %r" % (kind,))
        return self.call(lambda _t, now: self._press_now(kind, now, by), timeout)

    def _press_now(self, kind, now, by):
        if kind == "unmute":
            self.glue.unmute(None, now)
        else:
            self.glue.press(kind, now, by)
        self.log("button: %s" % ("unmute" if kind == "unmute" else "%s press" % kind))

    def press(self, hold_s=0.2):
        """Press and release the on-screen button (blocking for hold_s); a hold of 3 s or more is a long press."""
        self.set_button(pressed=True)
        time.sleep(hold_s)
        self.set_button(pressed=False)

    def step(self):
        """One turn of the engine thread's loop, for an engine that was not started (tests with a fake ticks
        clock): what the inbox holds, then a frame step (button sample, tick, voice, frame, state save)."""
        if self.alive:
            raise RuntimeError("the engine thread steps a started engine")
        while True:
            try:
                msg = self._inbox.get_nowait()
            except queue.Empty:
                break
            self._dispatch(msg)
        self._step(self.clock())

    @property
    def view(self):
        return self._view

    def frames(self):
        with self._frames_lock:
            return list(self._frames)

    def uptime_s(self):
        return int(self.ticks() - self._t0)

    def t_ms(self):
        return int((self.ticks() - self._t0) * 1000) & TICKS_MASK

    # -- the engine thread ------------------------------------------------------------------
    def _loop(self):
        next_frame = self.ticks()
        try:
            while self._running:
                wait = next_frame - self.ticks()
                try:
                    msg = self._inbox.get(timeout=wait) if wait > 0 else self._inbox.get_nowait()
                except queue.Empty:
                    msg = None
                changed = False
                while msg is not None:
                    changed = self._dispatch(msg) or changed
                    try:
                        msg = self._inbox.get_nowait()
                    except queue.Empty:
                        msg = None
                now = self.clock()
                if changed:
                    self._speech(now)
                    self._publish(now, self._view.frame if self._view else None)
                t = self.ticks()
                if t >= next_frame:
                    self._step(now)
                    next_frame += self.period
                    if t - next_frame > self.period:  # fell behind (e.g. a suspended laptop): no catch-up burst
                        with self.metrics.lock:
                            self.metrics.frame_overruns += 1
                        next_frame = t + self.period
        except Exception as e:  # logged and exposed: HTTP answers 503 from here on
            self.error = error_words(e)
            self.log("engine stopped: %s" % self.error)
            raise

    def _dispatch(self, msg):
        kind = msg[0]
        now = self.clock()
        if kind == "request":
            p = msg[1]
            p.result = self._apply_request(p.args, now)
            if applied(p.result):
                line = accepted_line(p.result)
                if line is not None:
                    self.log(line)
                # Publish before answering, so a client that reads /status right after its 200 sees its alarm.
                self._speech(now)
                self._publish(now, self._view.frame if self._view else None)
            elapsed = time.perf_counter() - p.posted
            with self.metrics.lock:
                self.metrics.handle_seconds_sum += elapsed
                self.metrics.handle_count += 1
            p.done.set()
            return False
        if kind == "call":
            p = msg[1]
            try:
                p.result = p.args(self.terminal, now)
            except Exception as e:  # noqa: BLE001  (handed back to the caller)
                p.result = e
            p.done.set()
            return True
        if kind == "refusal":
            p = msg[1]
            self.glue.refusal(p.args)
            p.done.set()
            return False
        if kind == "button":
            self._button_level = msg[1]
            return False
        if kind == "voice_done":
            self.glue.voice_done(now, msg[1], COMPLETED if msg[2] else CUT)
            return True
        return False

    def _apply_request(self, args, now):
        method, path, headers, body = args
        result = self.receiver.handle(method, path, headers, body, int(now), synced=True, commit=False)
        self.glue.request(result, now)  # PERSIST: the frame step saves it (at most once a second)
        return result

    def _voice_done(self, seq, completed):
        self._inbox.put(("voice_done", seq, completed))

    def _voice_busy(self):
        # None: no voice that can speak (the glue consumes utterances at once, so the queue's rules still run).
        voice = self.voice
        if voice is None or voice.mode == "off" or not voice.available:
            return None
        return voice.busy

    def _speech(self, now):
        act = self.glue.speech(now, self._voice_busy())
        voice = self.voice
        if voice is None:  # nothing to speak with: the glue has consumed the utterance already
            return
        if act == STOP:
            voice.interrupt()
        elif act == SAY:
            u = self.glue.utterance
            if u is not None:
                voice.say(u.seq, u.text)

    def _step(self, now):
        glue = self.glue
        event = glue.button_level(self._button_level, self.t_ms())
        if event is not None:
            self.log("button: %s press" % event)
            glue.press(event, now)
        glue.tick(now)
        self._speech(now)
        frame = self._render(now)
        self._save()
        return frame

    def _render(self, now):
        t_ms = self.t_ms()
        buf = self.glue.frame(now, t_ms)
        display = self.glue.display
        rgb = bytearray(self.width * self.height * 3)
        pixel = self.renderer.pixel
        i = 0
        for y in range(self.height):
            for x in range(self.width):
                rgb[i : i + 3] = bytes(pixel(buf, x, y))
                i += 3
        self._frame_seq += 1
        frame = Frame(
            seq=self._frame_seq,
            t_ms=t_ms,
            now=now,
            width=self.width,
            height=self.height,
            rgb=bytes(rgb),
            display=display.to_dict() if display is not None else None,
        )
        with self._frames_lock:
            self._frames.append(frame)
        self._publish(now, frame)
        return frame

    def _publish(self, now, frame):
        snap = self.terminal.snapshot(now)
        voice = None
        if self.voice is not None:
            voice = self.voice.describe()
        self._view = View(
            frame=frame,
            snapshot=snap,
            display=frame.display if frame else None,
            voice=voice,
            button_pressed=self.button.pressed,
            stamp=now,
            silence=silence.reason(self.terminal, snap["shown"].get("key"), now),
        )

    # -- persistence ------------------------------------------------------------------
    def _restore(self, now):
        if not self.state_path or not os.path.exists(self.state_path):
            return
        try:
            with open(self.state_path, encoding="utf-8") as f:
                d = json.load(f)
            self.glue.restore(d, now)
            self.log("state: restored active alarms and mute from %s" % self.state_path)
        except (OSError, ValueError) as e:
            self.log("state: ignoring %s: %s" % (self.state_path, error_words(e)))

    def _save(self, force=False):
        if not self.state_path or not self.glue.dirty:
            return
        mono = self.ticks()
        if not force and mono - self._last_save < STATE_SAVE_MIN_S:
            return
        self._last_save = mono
        tmp = self.state_path + ".tmp"
        try:
            os.makedirs(os.path.dirname(self.state_path) or ".", exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                version = self.glue.write_state(f)
            os.replace(tmp, self.state_path)
            self.glue.saved(version)
            with self.metrics.lock:
                self.metrics.state_writes += 1
        except OSError as e:
            self.log("state: cannot save %s: %s" % (self.state_path, error_words(e)))
