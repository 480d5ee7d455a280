"""The real emulator as its own process (`python -m emulator --headless`), for the benches: a fresh config home,
no voice, nothing persisted, on a free loopback port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

from testkit.net import free_port, running, wait_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class EmulatorProcess:
    """start() returns once /api/v1/status answers; .url, .port, .cfg (its first-start config: key_id, secret)."""

    def __init__(self, config_home, run_for_s=600):
        self.config_home = str(config_home)
        self.run_for_s = run_for_s
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.proc = None
        self.cfg = None

    def start(self, timeout=30.0):
        env = dict(os.environ, XDG_CONFIG_HOME=self.config_home, SDL_VIDEODRIVER="dummy", SDL_AUDIODRIVER="dummy")
        env.pop("SENTINEL_EMULATOR_CONFIG", None)
        cmd = [sys.executable, "-m", "emulator", "--headless", "--no-voice", "--no-persist"]
        cmd += ["--port", str(self.port), "--run-for", str(self.run_for_s)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, timeout, alive=running(self.proc))
        with urllib.request.urlopen(self.url + "/api/v1/status", timeout=timeout):
            pass  # answering: its first-start config is complete on disk
        with open(os.path.join(self.config_home, "gpu-sentinel", "emulator.json"), encoding="utf-8") as f:
            self.cfg = json.load(f)
        return self

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
