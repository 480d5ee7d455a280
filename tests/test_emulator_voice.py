"""The voice worker against the real speech engine (pyttsx3 + espeak-ng): WAV output measured with sox, the Chinese
voice for Chinese text, immediate interruption, and a clear message when no engine works."""

import re
import shutil
import subprocess
import threading
import time

import pytest

from emulator import voice as voice_mod
from emulator.voice import Voice, language_of

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None or shutil.which("sox") is None,
                                reason="espeak-ng and sox are installed by tools/install-system-deps.sh")


def sox_stat(path):
    out = subprocess.run(["sox", path, "-n", "stat"], capture_output=True, text=True, timeout=30).stderr
    length = float(re.search(r"Length \(seconds\):\s+([\d.]+)", out).group(1))
    rms = float(re.search(r"RMS\s+amplitude:\s+([\d.]+)", out).group(1))
    return length, rms


class Done:
    def __init__(self):
        self.events = []
        self.cond = threading.Condition()

    def __call__(self, job_id, completed):
        with self.cond:
            self.events.append((job_id, completed, time.monotonic()))
            self.cond.notify_all()

    def wait(self, n, timeout=20):
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.events) >= n, timeout), self.events
        return self.events[n - 1]


def test_language_detection():
    assert language_of("P0 NCCL deadlock on gpu-worker-08") == "en"
    assert language_of("训练集群已恢复正常") == "zh"
    assert language_of("机架 A03 节点 gpu-worker-08") == "zh"
    assert language_of("rack A03，down") == "zh"  # a full-width comma is enough


def test_english_and_chinese_wavs(tmp_path):
    done = Done()
    v = Voice(mode="wav", wav_dir=str(tmp_path), rate=240, on_done=done, log=lambda m: None).start()
    try:
        assert v.available, v.error
        v.say(1, "NVLink slow down on rack A03, node gpu worker 11")
        assert done.wait(1)[:2] == (1, True)
        v.say(2, "训练集群已恢复正常")
        assert done.wait(2)[:2] == (2, True)
    finally:
        v.stop()
    en, zh = v.spoken[-2], v.spoken[-1]
    assert en.lang == "en" and "en" in en.voice
    assert zh.lang == "zh" and "cmn" in zh.voice
    for rec, lo, hi in ((en, 1.5, 8.0), (zh, 1.5, 7.0)):
        length, rms = sox_stat(rec.path)
        assert lo <= length <= hi, (rec.text, length)
        assert rms > 0.02, (rec.text, rms)
        assert abs(length - rec.seconds) < 0.05
    # In wav mode the utterance occupies the voice as long as it would on a speaker.
    assert en.ended - en.started >= en.seconds * 0.9


def test_chinese_voice_really_reads_chinese(tmp_path):
    # The English voice reads each ideograph as "Chinese letter": far longer than the Mandarin reading.
    synth = voice_mod.shared_synth(170, {"en": "gmw/en-us", "zh": "sit/cmn"})
    zh_path, en_path = str(tmp_path / "zh.wav"), str(tmp_path / "en.wav")
    synth.synth("训练集群已恢复正常", "zh", zh_path)
    synth.synth("训练集群已恢复正常", "en", en_path)
    zh_len, _ = sox_stat(zh_path)
    en_len, _ = sox_stat(en_path)
    assert en_len > zh_len * 1.5, (zh_len, en_len)


def test_interrupt_cuts_at_once(tmp_path):
    done = Done()
    v = Voice(mode="wav", wav_dir=str(tmp_path), on_done=done, log=lambda m: None).start()
    try:
        v.say(7, "This is a long warning about optical module errors on the spine switch, read slowly and "
                 "completely so that there is plenty of time to cut it short.")
        time.sleep(0.5)  # synthesized (a few ms) and now "playing"
        assert v.busy
        t0 = time.monotonic()
        v.interrupt()
        job, completed, when = done.wait(1)
        assert (job, completed) == (7, False)
        assert when - t0 < 0.2
        assert not v.busy
        rec = v.spoken[-1]
        assert rec.seconds > 5 and rec.ended - rec.started < rec.seconds
    finally:
        v.stop()


def test_no_engine_is_a_clear_message_and_utterances_still_end(tmp_path, monkeypatch):
    class Broken:
        def __init__(self, *a, **k):
            raise ImportError("No module named 'pyttsx3'")

    monkeypatch.setattr(voice_mod, "shared_synth", Broken)
    logs = []
    done = Done()
    v = Voice(mode="wav", wav_dir=str(tmp_path), on_done=done, log=logs.append).start()
    try:
        assert not v.available
        assert "no speech engine works" in v.error and "espeak-ng" in v.error
        assert any("the light" in m or "light" in m for m in logs)
        v.say(1, "hello")
        assert done.wait(1)[:2] == (1, False)
    finally:
        v.stop()


def test_off_mode_and_bad_arguments():
    with pytest.raises(ValueError):
        Voice(mode="loud")
    with pytest.raises(ValueError):
        Voice(mode="wav")
    v = Voice(mode="off").start()
    assert v.available is False and v.error is None
    v.stop()
