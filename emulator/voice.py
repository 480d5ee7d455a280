"""The emulator's voice: speaks the state machine's utterances in a worker thread that can be cut off at once.

Every utterance is synthesized by pyttsx3 (espeak-ng on Linux) into a WAV file first, then played by an interruptible
player (pygame's mixer, else aplay/paplay/afplay). Synthesizing first gives three things pyttsx3's own playback does
not: an immediate stop (a P0 cuts a P1 short, ACK silences at once), a --wav-dir mode that keeps each utterance as a
file (tests, headless machines), and a known duration, so the light and the state machine see speech that lasts as
long as it would on the box even when no sound card is present.
"""

import array
import atexit
import glob
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import wave
from typing import Any

from emulator import reading
from emulator.reading import is_chinese
from host_client.logs import error_words

NO_ENGINE_HINT = (
    "no speech engine works (%s): alarms still light the matrix but are not spoken. "
    "On Debian/Ubuntu: sudo apt-get install espeak-ng; then pip install pyttsx3"
)
NO_DEVICE_REASON = (
    "no audio output device or player: nothing is heard (use --wav-dir DIR to keep each utterance as a WAV file)"
)

# Hanzi from the product's own alarm texts that espeak-ng 1.51's `cmn` voice reads as English-spelled pinyin: the
# start-up check speaks them (to phonemes only) with each candidate Mandarin voice and keeps the first that does not
# switch to English, which espeak-ng marks "(en)" in its phoneme output.
PROBE_HANZI = "训练集群紧急预警节点触发通信死锁"
# Mandarin voices in the order tried when the config says "auto" (or its choice falls back to English).
ZH_CANDIDATES = ("cmn-latn-pinyin", "cmn", "zh", "yue")


def language_of(text):
    return "zh" if is_chinese(text) else "en"


def espeak_cli():
    return shutil.which("espeak-ng") or shutil.which("espeak")


def espeak_phonemes(voice, text, timeout=15):
    """espeak-ng's phoneme mnemonics (-x) for text read by voice, or None without the espeak-ng command."""
    cmd = espeak_cli()
    if cmd is None:
        return None
    out = subprocess.run([cmd, "-q", "-x", "-v", voice, text], capture_output=True, timeout=timeout)
    return out.stdout.decode("utf-8", "replace")


def falls_back_to_english(voice, text=PROBE_HANZI):
    """True when espeak-ng switches to English for some of text with this voice; None when it cannot be checked."""
    ph = espeak_phonemes(voice, text)
    if ph is None:
        return None
    return "(en)" in ph


def wav_seconds(path):
    with wave.open(path, "rb") as w:
        rate = w.getframerate() or 1
        return w.getnframes() / float(rate)


class Spoken:
    """What the voice did with one utterance (kept for tests, the status page and the log)."""

    def __init__(self, job_id, text, lang, voice):
        self.job_id = job_id
        self.text = text
        self.lang = lang
        self.voice = voice
        self.runs = []  # [(lang, voice id, words)] as spoken, in order
        self.path = None
        self.seconds = 0.0
        self.started: float | None = None
        self.ended: float | None = None
        self.completed = False
        self.error: str | None = None

    def as_dict(self):
        return {
            "id": self.job_id,
            "text": self.text,
            "lang": self.lang,
            "voice": self.voice,
            "path": self.path,
            "runs": [{"lang": lang, "voice": v, "text": t} for lang, v, t in self.runs],
            "seconds": round(self.seconds, 3),
            "completed": self.completed,
            "error": self.error,
        }


_SHARED = {}
_SHARED_LOCK = threading.Lock()


def shared_synth(rate, voice_ids):
    """The process's one speech engine. espeak can be initialised once per process, and when a pyttsx3 engine is
    garbage-collected its driver unregisters espeak's (global) audio callback, silencing any newer engine: so the
    first engine is kept for the life of the process and every Voice uses it, one utterance at a time."""
    with _SHARED_LOCK:
        synth = _SHARED.get("synth")
        if synth is None:
            synth = _Pyttsx3Synth(rate, voice_ids)
            _SHARED["synth"] = synth
            atexit.register(synth.close)
        return synth


class _Pyttsx3Synth:
    """pyttsx3 wrapped: text + language -> WAV file. Thread-safe (one synthesis at a time)."""

    def __init__(self, rate, voice_ids):
        import pyttsx3  # optional dependency: imported where it is needed

        self._espeak_busy = None
        try:
            import pyttsx3.drivers.espeak as espeak_driver

            # The espeak driver prints "Audio saved to ..." for every file; the emulator logs that itself.
            # a module global the driver looks up
            espeak_driver.print = lambda *a, **k: None  # pyright: ignore[reportAttributeAccessIssue]
            self._espeak_busy = espeak_driver._espeak.IsPlaying
        except Exception:  # noqa: BLE001  (other platforms have other drivers)
            pass
        self.engine = pyttsx3.init()
        self.lock = threading.Lock()
        self.available = {}
        voices: Any = self.engine.getProperty("voices")  # a list of pyttsx3 Voice objects
        for v in voices or []:
            self.available[str(v.id).lower()] = v
        self.warnings = []
        self.notes = []
        self._checked = {}
        self.voices = self.pick_voices(voice_ids)

    def close(self):
        """At exit, while the modules still exist: pyttsx3's DriverProxy.__del__ would otherwise run during the
        interpreter's teardown and print "Exception ignored in DriverProxy.__del__"."""
        # A daemon voice thread may be stuck inside a synthesis at exit: do not wait for it for long.
        locked = self.lock.acquire(timeout=2.0)
        try:
            proxy = getattr(self.engine, "proxy", None)
            driver = getattr(proxy, "_driver", None)
            if driver is None:
                return
            try:
                driver.destroy()
            except Exception:  # noqa: BLE001  (best effort at exit)
                pass
            proxy._driver = None  # pyright: ignore[reportOptionalMemberAccess]  (driver is not None: nor is proxy)
            # The proxy itself must go now, not at teardown: its __del__ uses the module global `contextlib`, which
            # the interpreter may already have set to None by then ("'NoneType' object has no attribute
            # 'suppress'", seen in pytest's worker processes). The engine holds the only strong reference.
            self.engine.proxy = None  # pyright: ignore[reportAttributeAccessIssue]  (pyttsx3's own field)
            del proxy
        finally:
            if locked:
                self.lock.release()

    def pick_voices(self, voice_ids):
        return {lang: self._pick(self.available, lang, wanted) for lang, wanted in voice_ids.items()}

    def _tail(self, vid):
        return str(vid).lower().rsplit("/", 1)[-1]

    def _reads_hanzi(self, vid):
        """None when it cannot be checked (no espeak-ng command, another platform's engine)."""
        if vid not in self._checked:
            try:
                bad = falls_back_to_english(vid)
            except (OSError, subprocess.SubprocessError):
                bad = None
            self._checked[vid] = None if bad is None else not bad
        return self._checked[vid]

    def _pick(self, available, lang, wanted):
        if lang == "zh":
            return self._pick_zh(available, wanted)
        if wanted and wanted != "auto" and wanted.lower() in available:
            return available[wanted.lower()].id
        for prefix in ("en-us", "en"):
            for vid, v in available.items():
                langs = [str(x).lower() for x in (getattr(v, "languages", None) or [])]
                if any(x.startswith(prefix) for x in langs) or self._tail(vid).startswith(prefix):
                    return v.id
        self.warnings.append("no %s voice found (wanted %r): using the engine's default" % (lang, wanted))
        return None

    def _pick_zh(self, available, wanted):
        candidates = []
        if wanted and wanted != "auto" and wanted.lower() in available:
            candidates.append(available[wanted.lower()].id)
        for name in ZH_CANDIDATES:
            for vid, v in available.items():
                if self._tail(vid) == name and v.id not in candidates:
                    candidates.append(v.id)
        if not candidates:
            self.warnings.append("no Mandarin voice found (wanted %r): Chinese text is not read correctly" % wanted)
            return None
        unknown = []
        for vid in candidates:
            ok = self._reads_hanzi(vid)
            if ok:
                if wanted and wanted != "auto" and vid.lower() != wanted.lower():
                    why = (
                        "reads hanzi as English on this espeak-ng"
                        if wanted.lower() in available
                        else "is not installed"
                    )
                    self.warnings.append("Mandarin voice %r %s: using %s" % (wanted, why, vid))
                self.notes.append("Mandarin voice %s (checked: reads hanzi as Mandarin)" % vid)
                return vid
            if ok is None:
                unknown.append(vid)
        if unknown:
            # Cannot check (no espeak-ng command): cmn-latn-pinyin reads hanzi as Mandarin on 1.51 and later.
            best = next((v for v in unknown if self._tail(v) == "cmn-latn-pinyin"), unknown[0])
            self.notes.append("Mandarin voice %s (not checked: no espeak-ng command)" % best)
            return best
        self.warnings.append(
            "every Mandarin voice (%s) reads hanzi as English here: Chinese text will sound wrong"
            % ", ".join(candidates)
        )
        return candidates[0]

    def synth(self, text, lang, path, *, voices=None, rate=None):
        voice = (voices or self.voices).get(lang)
        with self.lock:
            self._synth_locked(text, voice, path, rate)
        return voice

    def _synth_locked(self, text, voice, path, rate):
        for _attempt in range(2):
            # pyttsx3's runAndWait begins by stopping espeak if it is still busy, and that stop can land on the
            # new utterance: start only once the engine is idle.
            self._wait_engine_idle(2.0)
            if rate:
                self.engine.setProperty("rate", rate)
            if voice is not None:
                self.engine.setProperty("voice", voice)
            self.engine.save_to_file(text, path)
            self.engine.runAndWait()
            # espeak synthesises in its own thread, and pyttsx3's espeak driver can return from runAndWait
            # before it is done (seen: 12 ms, no file yet): the file is written when the utterance ends.
            self._wait_engine_idle(30.0)
            if os.path.exists(path) and os.path.getsize(path) > 44:
                return
        raise RuntimeError("the speech engine wrote no audio")

    def synth_runs(self, runs, path, *, voices=None, rate=None):
        """Each Run with its language's voice, joined into one WAV with the runs' pauses. Returns the
        [(lang, voice, words)] spoken."""
        voices = voices or self.voices
        spoken = [(r.lang, voices.get(r.lang), r.text) for r in runs]
        if len(runs) == 1:
            with self.lock:
                self._synth_locked(runs[0].text, spoken[0][1], path, rate)
            return spoken
        parts = []
        tried = []
        try:
            with self.lock:
                for i, r in enumerate(runs):
                    part = part_path(path, i)
                    tried.append(part)
                    self._synth_locked(r.text, spoken[i][1], part, rate)
                    parts.append((part, r.pause_s))
            join_wavs(parts, path)
        finally:
            # whatever failed (a run, the join): no part outlives its utterance
            for part in tried:
                if os.path.exists(part):
                    os.remove(part)
        return spoken

    def _wait_engine_idle(self, timeout):
        if self._espeak_busy is None:
            return
        deadline = time.monotonic() + timeout
        while self._espeak_busy() and time.monotonic() < deadline:
            time.sleep(0.005)


def part_path(path, i):
    """Where run i of the utterance for path is written before the runs are joined."""
    return "%s.part%d.wav" % (path, i)


def remove_parts(wav_dir):
    """Delete run files (`NNNN-xx.wav.partN.wav`) left in wav_dir by an utterance that never finished."""
    for p in glob.glob(os.path.join(glob.escape(wav_dir), "*.wav.part*.wav")):
        try:
            os.remove(p)
        except OSError:
            pass  # gone already, or not ours to remove: the next start tries again


SILENCE_LEVEL = 300  # of 32767: below this a 16-bit sample counts as silence when trimming a run's edges
EDGE_KEEP_S = 0.02


def _trim(samples, rate):
    n = len(samples)
    first = 0
    while first < n and abs(samples[first]) < SILENCE_LEVEL:
        first += 1
    last = n
    while last > first and abs(samples[last - 1]) < SILENCE_LEVEL:
        last -= 1
    keep = int(rate * EDGE_KEEP_S)
    return samples[max(0, first - keep) : min(n, last + keep)]


def join_wavs(parts, out_path, tail_s=0.25):
    """[(wav path, pause before it in s)] -> one 16-bit WAV: each part's leading and trailing silence trimmed, the
    pauses put in between, a short tail of silence at the end (espeak's own end pause)."""
    params = None
    out = array.array("h")
    for i, (path, pause) in enumerate(parts):
        with wave.open(path, "rb") as w:
            p = (w.getnchannels(), w.getsampwidth(), w.getframerate())
            if p[1] != 2 or p[0] != 1:
                raise RuntimeError("cannot join %d-channel %d-byte audio" % (p[0], p[1]))
            if params is not None and p != params:
                raise RuntimeError("the voices wrote audio of different formats: %r, %r" % (params, p))
            params = p
            samples = array.array("h")
            samples.frombytes(w.readframes(w.getnframes()))
        if sys.byteorder == "big":
            samples.byteswap()
        if i:
            out.extend(array.array("h", bytes(2 * int(params[2] * pause))))
        out.extend(_trim(samples, params[2]))
    if params is None:
        raise RuntimeError("no audio to join")
    out.extend(array.array("h", bytes(2 * int(params[2] * tail_s))))
    if sys.byteorder == "big":
        out.byteswap()
    with wave.open(out_path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(params[2])
        w.writeframes(out.tobytes())


def _audio_device_likely():
    """On Linux, SDL's mixer spews ALSA errors when there is no sound device at all: look before trying."""
    if not sys.platform.startswith("linux"):
        return True
    run = os.environ.get("XDG_RUNTIME_DIR", "")
    return (
        os.path.exists("/dev/snd")
        or bool(os.environ.get("PULSE_SERVER"))
        or (
            run
            and (
                os.path.exists(os.path.join(run, "pulse", "native")) or os.path.exists(os.path.join(run, "pipewire-0"))
            )
        )
        or os.environ.get("SDL_AUDIODRIVER") == "dummy"
    )


class _Player:
    """Plays a WAV file; stop() cuts it off. Falls back to timed silence when there is no audio output."""

    def __init__(self, log):
        self.log = log
        self.kind = None
        self._proc = None
        self._channel = None
        self._mixer = None
        if _audio_device_likely():
            try:
                import pygame

                pygame.mixer.init(frequency=22050, size=-16, channels=1)
                self._mixer = pygame.mixer
                self.kind = "pygame.mixer"
            except Exception:  # noqa: BLE001  (no pygame, no audio device: try the command-line players)
                self._mixer = None
        if self.kind is None:
            for cmd in ("paplay", "aplay", "afplay", "pw-play"):
                if shutil.which(cmd):
                    self.kind = cmd
                    break
        if self.kind is None:
            self.kind = "silent"
            log("voice: " + NO_DEVICE_REASON)

    def play(self, path, seconds, cancel):
        """Block until the audio ends or cancel (a threading.Event) is set. Returns True if it played to the end."""
        if self.kind == "pygame.mixer":
            assert self._mixer is not None  # kind says pygame's mixer was set up
            sound = self._mixer.Sound(path)
            self._channel = sound.play()
            deadline = time.monotonic() + seconds + 0.5
            while self._channel is not None and self._channel.get_busy() and time.monotonic() < deadline:
                if cancel.wait(0.01):
                    self._channel.stop()
                    return False
            return not cancel.is_set()
        if self.kind == "silent":
            return not cancel.wait(seconds)
        args = [self.kind, "-q", path] if self.kind == "aplay" else [self.kind, path]
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while self._proc.poll() is None:
            if cancel.wait(0.01):
                self._proc.kill()
                self._proc.wait()
                return False
        return True


class Voice:
    """A speech worker. mode: "device" (sound card), "wav" (files in wav_dir, played as timed silence), "off".

    say() queues nothing: the state machine owns the queue; the voice holds at most the utterance it speaks now,
    and a new say() while busy replaces it (the engine only calls say() when the voice is idle or was interrupted).
    on_done(job_id, completed) is called from the worker thread when an utterance ends or is cut off.
    """

    def __init__(self, mode="device", wav_dir=None, rate=170, voices=None, on_done=None, log=None, keep=200):
        if mode not in ("device", "wav", "off"):
            raise ValueError("voice mode must be device, wav or off, got %r" % mode)
        if mode == "wav" and not wav_dir:
            raise ValueError("voice mode wav needs a wav_dir")
        self.mode = mode
        self.wav_dir = wav_dir
        self.rate = rate
        voices = voices or {}
        # Only the language entries: the config's voice section also holds the rate.
        self.voice_ids = {"en": voices.get("en", "gmw/en-us"), "zh": voices.get("zh", "auto")}
        self.on_done = on_done
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.keep = keep
        self.available = mode != "off"
        self.error = None
        self.player_kind = None
        self.spoken = []  # Spoken records, newest last (bounded by keep)
        self._jobs = queue.Queue()
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._current = None
        self._count = 0
        self._ready = threading.Event()
        self._thread = None
        self._tmp = None
        self._voices = None
        self.notes = []

    @property
    def audible(self):
        """Can anyone hear (or, with --wav-dir, keep) what the voice says? The honest answer for health."""
        return self.mode != "off" and self.available and not (self.mode == "device" and self.player_kind == "silent")

    @property
    def silent_reason(self):
        """Why nothing is heard (None when something is)."""
        if self.mode == "off":
            return "voice turned off (--no-voice)"
        if not self.available:
            return self.error or "no speech engine"
        if self.mode == "device" and self.player_kind == "silent":
            return NO_DEVICE_REASON
        return None

    def describe(self):
        """The facts the status page, the window and /metrics show."""
        return {
            "mode": self.mode,
            "available": bool(self.available),
            "audible": self.audible,
            "silent_reason": self.silent_reason,
            "error": self.error,
            "player": self.player_kind,
            "busy": self.busy,
            "voices": dict(self._voices or {}),
            "notes": list(self.notes),
        }

    # -- control (any thread) -------------------------------------------------------------------------------------
    def start(self, wait=5.0):
        if self.mode == "wav":
            assert self.wav_dir  # __init__ refuses mode wav without one
            os.makedirs(self.wav_dir, exist_ok=True)
            remove_parts(self.wav_dir)  # a run killed while it spoke left them
        self._thread = threading.Thread(target=self._run, name="voice", daemon=True)
        self._thread.start()
        self._ready.wait(wait)
        return self

    def say(self, job_id, text):
        with self._lock:
            self._cancel.clear()
            self._current = job_id
        self._jobs.put((job_id, text))

    def interrupt(self):
        """Cut off the current utterance now (its on_done reports completed=False)."""
        with self._lock:
            if self._current is not None:
                self._cancel.set()

    @property
    def busy(self):
        with self._lock:
            return self._current is not None

    def stop(self, timeout=2.0):
        self.interrupt()
        self._jobs.put(None)
        if self._thread is not None:
            self._thread.join(timeout)
        if self.mode == "wav" and not (self._thread is not None and self._thread.is_alive()):
            remove_parts(self.wav_dir)  # none is left; a voice still speaking removes its own when it ends
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def wait_idle(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.busy and self._jobs.empty():
                return True
            time.sleep(0.01)
        return False

    # -- worker ------------------------------------------------------------------
    def _run(self):
        synth = None
        player = None
        if self.mode != "off":
            try:
                synth = shared_synth(self.rate, self.voice_ids)
                synth.warnings = []
                synth.notes = []
                self._voices = synth.pick_voices(self.voice_ids)
                self.notes = list(synth.notes)
                for w in synth.warnings:
                    self.log("voice: " + w)
                for n in synth.notes:
                    self.log("voice: " + n)
            except Exception as e:  # noqa: BLE001  (ImportError, RuntimeError from espeak, OSError from drivers)
                self.available = False
                self.error = NO_ENGINE_HINT % error_words(e)
                self.log("voice: " + self.error)
            if synth is not None and self.mode == "device":
                player = _Player(self.log)
                self.player_kind = player.kind
            if self.mode == "device":
                self._tmp = tempfile.mkdtemp(prefix="sentinel-voice-")
        self._ready.set()
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job_id, text = job
            lang = language_of(text)
            rec = Spoken(job_id, text, lang, None)
            rec.started = time.time()
            completed = False
            try:
                if synth is not None and not self._cancel.is_set():
                    completed = self._speak(synth, player, rec)
            except Exception as e:  # noqa: BLE001  (a broken utterance must not kill the voice)
                rec.error = error_words(e)
                self.log("voice: cannot speak utterance %s: %s" % (job_id, rec.error))
            rec.ended = time.time()
            rec.completed = completed
            self.spoken.append(rec)
            if len(self.spoken) > self.keep:
                del self.spoken[0]
            with self._lock:
                if self._current == job_id:
                    self._current = None
                self._cancel.clear()
            if self.on_done is not None:
                self.on_done(job_id, completed)

    def _speak(self, synth, player, rec):
        self._count += 1
        if self.mode == "wav":
            assert self.wav_dir
            path = os.path.join(self.wav_dir, "%04d-%s.wav" % (self._count, rec.lang))
        else:
            assert self._tmp is not None  # made by the voice thread before its first job
            path = os.path.join(self._tmp, "utterance.wav")
        runs = reading.runs(rec.text) or [reading.Run(rec.lang, rec.text, 0.0, rec.text)]
        try:
            rec.runs = synth.synth_runs(runs, path, voices=self._voices, rate=self.rate)
        except RuntimeError as e:
            if len(runs) == 1:
                raise
            # Runs that cannot be joined (another platform's engine writes other formats per voice): the whole
            # text by its language's voice, rather than nothing.
            self.log("voice: cannot join the runs of utterance %s (%s): one voice reads it all" % (rec.job_id, e))
            v = synth.synth(rec.text, rec.lang, path, voices=self._voices, rate=self.rate)
            rec.runs = [(rec.lang, v, rec.text)]
        used = []
        for _lang, v, _t in rec.runs:
            if v is not None and v not in used:
                used.append(v)
        rec.voice = "+".join(used) or None
        rec.seconds = wav_seconds(path)
        if self.mode == "wav":
            rec.path = path
            self.log("voice: wrote %s (%.1f s, voice %s): %s" % (path, rec.seconds, rec.voice, rec.text))
            # Timed silence: the utterance occupies the voice as long as it would on a speaker.
            return not self._cancel.wait(rec.seconds)
        return player.play(path, rec.seconds, self._cancel)
