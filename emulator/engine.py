"""The emulator's engine: one thread owns the core (Receiver, Terminal, Button, Renderer) and steps it at a steady
frame rate. Everything else (HTTP threads, the window, the voice worker, tests) talks to it through a thread-safe
inbox and reads what it publishes: an immutable View replaced after every change, so readers never need a lock and
never see half an update.

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

from emulator import png
from sentinel_core.button import Button
from sentinel_core.keyring import KeyRing
from sentinel_core.layout import Layout
from sentinel_core.receiver import Receiver
from sentinel_core.render import Renderer
from sentinel_core.terminal import Terminal

ANSWER_TIMEOUT_S = 2.0
FRAMES_KEPT = 120
STATE_SAVE_MIN_S = 1.0
TICKS_MASK = (1 << 30) - 1  # the core's ms ticks wrap like MicroPython's ticks_ms()

_ENDPOINTS = {"/api/v1/send_msg": "send_msg", "/api/v1/ack": "ack", "/api/v1/heartbeat": "heartbeat",
              "/api/v1/unmute": "unmute"}


class Frame:
    """One rendered frame: rgb is row-major (x, y) RGB bytes, whatever the strip's wiring and byte order."""

    __slots__ = ("seq", "t_ms", "now", "width", "height", "rgb", "display")

    def __init__(self, seq, t_ms, now, width, height, rgb, display):
        self.seq = seq
        self.t_ms = t_ms
        self.now = now
        self.width = width
        self.height = height
        self.rgb = rgb
        self.display = display

    def pixel(self, x, y):
        i = (y * self.width + x) * 3
        return tuple(self.rgb[i:i + 3])

    def png(self, scale=16):
        if scale <= 1:
            return png.encode(self.width, self.height, self.rgb)
        return png.encode(*png.matrix_image(self.width, self.height, self.rgb, scale=scale, gap=max(1, scale // 5)))


class View:
    """What the engine publishes: the latest frame, the terminal's snapshot and the emulator's own facts."""

    __slots__ = ("frame", "snapshot", "display", "voice", "button_pressed", "stamp")

    def __init__(self, frame, snapshot, display, voice, button_pressed, stamp):
        self.frame = frame
        self.snapshot = snapshot
        self.display = display
        self.voice = voice
        self.button_pressed = button_pressed
        self.stamp = stamp


class _Pending:
    __slots__ = ("args", "done", "result", "posted")

    def __init__(self, args):
        self.args = args
        self.done = threading.Event()
        self.result = None
        self.posted = time.perf_counter()


class Metrics:
    """Counters for /metrics, written by the engine thread, read under a lock by the HTTP thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = collections.Counter()   # (endpoint, outcome, status) -> n
        self.alarms = collections.Counter()     # level name -> n
        self.buttons = collections.Counter()    # "short" / "long" -> n
        self.frames = 0
        self.frame_overruns = 0
        self.utterances = collections.Counter()  # "completed" / "cut" -> n
        self.handle_seconds_sum = 0.0
        self.handle_count = 0

    def copy(self):
        with self.lock:
            return {
                "requests": dict(self.requests), "alarms": dict(self.alarms), "buttons": dict(self.buttons),
                "frames": self.frames, "frame_overruns": self.frame_overruns,
                "utterances": dict(self.utterances), "handle_seconds_sum": self.handle_seconds_sum,
                "handle_count": self.handle_count,
            }


def local_utc_offset_min(now=None):
    t = time.localtime(now)
    return int(t.tm_gmtoff // 60)


class Engine:
    def __init__(self, cfg, voice=None, state_path=None, log=None, clock=time.time, ticks=time.monotonic):
        self.cfg = cfg
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
        term_cfg = dict(cfg.get("terminal") or {})
        if term_cfg.get("utc_offset_min") is None:
            off = cfg.get("utc_offset_min")
            term_cfg["utc_offset_min"] = local_utc_offset_min(now) if off is None else off
        self.config_error = None
        try:
            self.terminal = Terminal(term_cfg)
        except ValueError as e:
            self.config_error = str(e)
            self.terminal = Terminal()
            self.terminal.set_health("config", False, now, self.config_error)
            self.log("config: %s: the matrix shows config_error until it is fixed" % e)
        self.terminal.set_health("clock", True, now)    # the laptop's clock is NTP-synced by its OS
        self.terminal.set_health("network", True, now)  # it answers on loopback, so it is reachable
        self.button = Button(int(term_cfg.get("debounce_ms", 30)), int(term_cfg.get("long_ms", 3000)))
        self.receiver = Receiver(KeyRing({cfg["key_id"]: cfg["secret"].encode("utf-8")}),
                                 replay_capacity=cfg.get("replay_capacity", 2048))
        # Layout and Renderer raise ValueError on a panel they cannot drive: the caller reports it as config.
        self.layout = Layout(cfg["width"], cfg["height"], serpentine=cfg.get("serpentine", True),
                             rotation=cfg.get("rotation", 0))
        self.renderer = Renderer(self.layout, brightness=cfg["brightness"],
                                 night_brightness=cfg["night_brightness"], budget_ma=cfg["budget_ma"])
        # The image as it reads on the mounted panel (a rotated panel swaps width and height).
        self.width = self.layout.cols
        self.height = self.layout.rows
        if voice is not None:
            voice.on_done = self._voice_done
            if voice.mode != "off":
                # Honest health: a voice nobody can hear (no audio device and no --wav-dir, no speech engine) is
                # a speech fault, as a dead TTS chip is on the box; the status's emulator.voice says why.
                self.terminal.set_health("speech", bool(voice.audible), now)
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

    def call(self, fn, timeout=ANSWER_TIMEOUT_S):
        """Run fn(terminal, now) in the engine thread and return its value (for tests and tools)."""
        p = _Pending(fn)
        self._inbox.put(("call", p))
        if not p.done.wait(timeout):
            raise TimeoutError("engine did not answer within %.1f s" % timeout)
        if isinstance(p.result, BaseException):
            raise p.result
        return p.result

    def set_button(self, pressed):
        """The raw button level (window click, keyboard, tests). The core's Button debounces it."""
        self._inbox.put(("button", bool(pressed)))

    def press_event(self, kind, timeout=ANSWER_TIMEOUT_S):
        """A whole press from the window or the browser page, applied in the engine thread before this returns:
        "short" (mute) or "long" (clear), as the debounced button gives them, or "unmute". A click needs no
        debounce: that is the mechanical button's (set_button feeds the core's Button)."""
        if kind not in ("short", "long", "unmute"):
            raise ValueError("press must be short, long or unmute, got %r" % (kind,))
        return self.call(lambda _t, now: self._press_now(kind, now), timeout)

    def _press_now(self, kind, now):
        if kind == "unmute":
            self.terminal.on_unmute(None, now)
        else:
            self.terminal.on_button(kind, now)
            with self.metrics.lock:
                self.metrics.buttons[kind] += 1
        self.log("button: %s" % ("unmute" if kind == "unmute" else "%s press" % kind))

    def press(self, hold_s=0.2):
        """Press and release the on-screen button (blocking for hold_s); a hold of 3 s or more is a long press."""
        self.set_button(True)
        time.sleep(hold_s)
        self.set_button(False)

    @property
    def view(self):
        return self._view

    def frames(self):
        with self._frames_lock:
            return list(self._frames)

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
        except Exception as e:  # noqa: BLE001  (logged and exposed: HTTP answers 503 from here on)
            self.error = "%s: %s" % (type(e).__name__, e)
            self.log("engine stopped: %s" % self.error)
            raise

    def _dispatch(self, msg):
        kind = msg[0]
        now = self.clock()
        if kind == "request":
            p = msg[1]
            p.result = self._apply_request(p.args, now)
            changed = p.result.status == 200 and not p.result.duplicate
            if changed:
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
        if kind == "button":
            self._button_level = msg[1]
            return False
        if kind == "voice_done":
            self.terminal.speech_finished(now, msg[1])
            with self.metrics.lock:
                self.metrics.utterances["completed" if msg[2] else "cut"] += 1
            return True
        return False

    def _apply_request(self, args, now):
        method, path, headers, body = args
        result = self.receiver.handle(method, path, headers, body, int(now))
        endpoint = _ENDPOINTS.get(path, "other")
        if result.status == 200:
            outcome = "duplicate" if result.duplicate else "accepted"
        else:
            outcome = result.answer.get("error", "error")
        with self.metrics.lock:
            self.metrics.requests[(endpoint, outcome, result.status)] += 1
        if result.status != 200 or result.duplicate:
            return result
        if result.kind == "alarm":
            self.terminal.on_alarm(result.alarm, now)
            with self.metrics.lock:
                self.metrics.alarms[("NORMAL", "P1", "P0")[result.alarm.level]] += 1
        elif result.kind == "ack":
            self.terminal.on_ack(result.ack["key"], result.ack["long"], now)
        elif result.kind == "heartbeat":
            self.terminal.on_heartbeat(result.heartbeat["interval"], now)
        elif result.kind == "unmute":
            self.terminal.on_unmute(result.payload["key"], now)
        return result

    def _voice_done(self, seq, completed):
        self._inbox.put(("voice_done", seq, completed))

    def _speech(self, now):
        t = self.terminal
        voice = self.voice
        speaking = t.speaking
        if speaking is not None and t.must_interrupt(now):
            if voice is not None:
                voice.interrupt()
            t.speech_finished(now, speaking.seq)
        if voice is not None and voice.mode != "off" and voice.available:
            if voice.busy:
                return
            u = t.next_utterance(now)
            if u is not None:
                voice.say(u.seq, u.text)
            return
        # No voice: utterances are consumed at once so the queue and its timing rules still run.
        for _ in range(4):
            u = t.next_utterance(now)
            if u is None:
                return
            t.speech_finished(now, u.seq)

    def _step(self, now):
        event = self.button.sample(self._button_level, self.t_ms())
        if event is not None:
            self.terminal.on_button(event, now)
            with self.metrics.lock:
                self.metrics.buttons[event] += 1
            self.log("button: %s press" % event)
        self.terminal.tick(now)
        self._speech(now)
        frame = self._render(now)
        self._save()
        with self.metrics.lock:
            self.metrics.frames += 1
        return frame

    def _render(self, now):
        t_ms = self.t_ms()
        display = self.terminal.display(now)
        buf = self.renderer.render(display, t_ms)
        rgb = bytearray(self.width * self.height * 3)
        pixel = self.renderer.pixel
        i = 0
        for y in range(self.height):
            for x in range(self.width):
                rgb[i:i + 3] = bytes(pixel(buf, x, y))
                i += 3
        self._frame_seq += 1
        frame = Frame(self._frame_seq, t_ms, now, self.width, self.height, bytes(rgb), display.to_dict())
        with self._frames_lock:
            self._frames.append(frame)
        self._publish(now, frame)
        return frame

    def _publish(self, now, frame):
        snap = self.terminal.snapshot(now)
        voice = None
        if self.voice is not None:
            voice = self.voice.describe()
        self._view = View(frame, snap, frame.display if frame else None, voice, self.button.pressed, now)

    # -- persistence ------------------------------------------------------------------
    def _restore(self, now):
        if not self.state_path or not os.path.exists(self.state_path):
            return
        try:
            with open(self.state_path, encoding="utf-8") as f:
                d = json.load(f)
            # The replay floor too: a request captured before a restart stays refused after it.
            self.receiver.replay.restore(d)
            self.terminal.restore(d, now)
            self.terminal.mark_saved()
            self.log("state: restored active alarms and mute from %s" % self.state_path)
        except (OSError, ValueError) as e:
            self.log("state: ignoring %s: %s" % (self.state_path, e))

    def _save(self, force=False):
        if not self.state_path or not self.terminal.dirty:
            return
        mono = self.ticks()
        if not force and mono - self._last_save < STATE_SAVE_MIN_S:
            return
        self._last_save = mono
        d = self.terminal.export_state()
        d.update(self.receiver.replay.export())
        tmp = self.state_path + ".tmp"
        try:
            os.makedirs(os.path.dirname(self.state_path) or ".", exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(d, f)
            os.replace(tmp, self.state_path)
            self.terminal.mark_saved(d["version"])
        except OSError as e:
            self.log("state: cannot save %s: %s" % (self.state_path, e))
