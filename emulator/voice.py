"""The emulator's voice: speaks the state machine's utterances in a worker thread that can be cut off at once.

Every utterance is synthesized by pyttsx3 (espeak-ng on Linux) into a WAV file first, then played by an interruptible
player (pygame's mixer, else aplay/paplay/afplay). Synthesizing first gives three things pyttsx3's own playback does
not: an immediate stop (a P0 cuts a P1 short, ACK silences at once), a --wav-dir mode that keeps each utterance as a
file (tests, headless machines), and a known duration, so the light and the state machine see speech that lasts as
long as it would on the box even when no sound card is present.
"""

import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import wave

# Code points whose presence makes an utterance Chinese: CJK ideographs, CJK punctuation, full-width forms.
_CJK_RANGES = ((0x3000, 0x303F), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0xFF00, 0xFFEF),
               (0x20000, 0x2FA1F))

NO_ENGINE_HINT = ("no speech engine works (%s): alarms still light the matrix but are not spoken. "
                  "On Debian/Ubuntu: sudo apt-get install espeak-ng; then pip install pyttsx3")


def is_chinese(text):
    for ch in text:
        c = ord(ch)
        for lo, hi in _CJK_RANGES:
            if lo <= c <= hi:
                return True
    return False


def language_of(text):
    return "zh" if is_chinese(text) else "en"


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
        self.path = None
        self.seconds = 0.0
        self.started = None
        self.ended = None
        self.completed = False
        self.error = None

    def as_dict(self):
        return {"id": self.job_id, "text": self.text, "lang": self.lang, "voice": self.voice, "path": self.path,
                "seconds": round(self.seconds, 3), "completed": self.completed, "error": self.error}


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
        return synth


class _Pyttsx3Synth:
    """pyttsx3 wrapped: text + language -> WAV file. Thread-safe (one synthesis at a time)."""

    def __init__(self, rate, voice_ids):
        import pyttsx3  # noqa: PLC0415  (optional dependency: imported where it is needed)
        self._espeak_busy = None
        try:
            import pyttsx3.drivers.espeak as espeak_driver  # noqa: PLC0415
            # The espeak driver prints "Audio saved to ..." for every file; the emulator logs that itself.
            espeak_driver.print = lambda *a, **k: None
            self._espeak_busy = espeak_driver._espeak.IsPlaying
        except Exception:  # noqa: BLE001  (other platforms have other drivers)
            pass
        self.engine = pyttsx3.init()
        self.lock = threading.Lock()
        self.available = {}
        for v in self.engine.getProperty("voices") or []:
            self.available[str(v.id).lower()] = v
        self.warnings = []
        self.voices = self.pick_voices(voice_ids)

    def pick_voices(self, voice_ids):
        return {lang: self._pick(self.available, lang, wanted) for lang, wanted in voice_ids.items()}

    def _pick(self, available, lang, wanted):
        if wanted and wanted.lower() in available:
            return available[wanted.lower()].id
        prefixes = ("cmn", "zh", "yue") if lang == "zh" else ("en-us", "en")
        for prefix in prefixes:
            for vid, v in available.items():
                langs = [str(x).lower() for x in (getattr(v, "languages", None) or [])]
                if any(x.startswith(prefix) for x in langs) or vid.rsplit("/", 1)[-1].startswith(prefix):
                    return v.id
        self.warnings.append("no %s voice found (wanted %r): using the engine's default" % (lang, wanted))
        return None

    def synth(self, text, lang, path, voices=None, rate=None):
        voice = (voices or self.voices).get(lang)
        with self.lock:
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
                    return voice
        raise RuntimeError("the speech engine wrote no audio")

    def _wait_engine_idle(self, timeout):
        if self._espeak_busy is None:
            return
        deadline = time.monotonic() + timeout
        while self._espeak_busy() and time.monotonic() < deadline:
            time.sleep(0.005)


def _audio_device_likely():
    """On Linux, SDL's mixer spews ALSA errors when there is no sound device at all: look before trying."""
    if not sys.platform.startswith("linux"):
        return True
    run = os.environ.get("XDG_RUNTIME_DIR", "")
    return (os.path.exists("/dev/snd") or bool(os.environ.get("PULSE_SERVER"))
            or (run and (os.path.exists(os.path.join(run, "pulse", "native"))
                         or os.path.exists(os.path.join(run, "pipewire-0"))))
            or os.environ.get("SDL_AUDIODRIVER") == "dummy")


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
                import pygame  # noqa: PLC0415
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
            log("voice: no audio output device or player found: speech is timed but silent "
                "(use --wav-dir DIR to keep each utterance as a WAV file)")

    def play(self, path, seconds, cancel):
        """Block until the audio ends or cancel (a threading.Event) is set. Returns True if it played to the end."""
        if self.kind == "pygame.mixer":
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
        self.voice_ids = {"en": voices.get("en", "gmw/en-us"), "zh": voices.get("zh", "sit/cmn")}
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

    # -- control (any thread) -------------------------------------------------------------------------------------
    def start(self, wait=5.0):
        if self.mode == "wav":
            os.makedirs(self.wav_dir, exist_ok=True)
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
                self._voices = synth.pick_voices(self.voice_ids)
                for w in synth.warnings:
                    self.log("voice: " + w)
            except Exception as e:  # noqa: BLE001  (ImportError, RuntimeError from espeak, OSError from drivers)
                self.available = False
                self.error = NO_ENGINE_HINT % ("%s: %s" % (type(e).__name__, e))
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
                rec.error = "%s: %s" % (type(e).__name__, e)
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
            path = os.path.join(self.wav_dir, "%04d-%s.wav" % (self._count, rec.lang))
        else:
            path = os.path.join(self._tmp, "utterance.wav")
        rec.voice = synth.synth(rec.text, rec.lang, path, self._voices, self.rate)
        rec.seconds = wav_seconds(path)
        if self.mode == "wav":
            rec.path = path
            self.log("voice: wrote %s (%.1f s, voice %s): %s" % (path, rec.seconds, rec.voice, rec.text))
            # Timed silence: the utterance occupies the voice as long as it would on a speaker.
            return not self._cancel.wait(rec.seconds)
        return player.play(path, rec.seconds, self._cancel)
