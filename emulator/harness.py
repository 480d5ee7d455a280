"""A whole emulator (config in a directory of your choice, engine, voice, HTTP front on a free loopback port) started
and stopped from Python: what the end-to-end tests, the benchmark and the docs' screenshot run against."""

import json
import os
import time
import urllib.error
import urllib.request

from emulator import config as config_mod
from emulator.engine import Engine
from emulator.voice import Voice
from emulator.web import Server, create_app


class Harness:
    """Harness(config_dir, voice="off"|"wav"|"device", wav_dir=None, terminal={...}, voice_rate=None,
    **config overrides).

    Quiet hours are off unless `terminal` sets them, so results never depend on the time of day.

    The config file is created in config_dir exactly as on a first start (never under the real home).
    """

    def __init__(
        self,
        config_dir,
        voice="off",
        wav_dir=None,
        terminal=None,
        persist=False,
        log=None,
        server_threads=8,
        voice_rate=None,
        **overrides,
    ):
        self.config_path = os.path.join(config_dir, config_mod.APP_DIR, config_mod.FILE_NAME)
        self.logs = []
        self.log = log or self.logs.append
        over: dict = {"port": 0}
        over.update(overrides)
        # Quiet hours off unless a test asks for them: otherwise what the terminal says would depend on the hour
        # the suite happens to run (a P1 is rightly silent after 22:00).
        term = {"quiet_enabled": False}
        term.update(terminal or {})
        over["terminal"] = term
        if voice_rate:
            over["voice"] = {"rate": voice_rate}
        self.cfg, _, self.created, self.warnings = config_mod.load(self.config_path, over)
        self.voice = Voice(
            mode=voice, wav_dir=wav_dir, rate=self.cfg["voice"].get("rate", 170), voices=self.cfg["voice"], log=self.log
        )
        self.state_path = os.path.join(config_dir, "emulator-state.json") if persist else None
        self.engine = None
        self.server = None
        self.server_threads = server_threads

    def start(self):
        self.voice.start()
        self.engine = Engine(self.cfg, voice=self.voice, state_path=self.state_path, log=self.log).start()
        self.app = create_app(self.cfg, self.engine)
        self.server = Server(self.app, "127.0.0.1", self.cfg["port"], threads=self.server_threads).start()
        return self

    def stop(self):
        if self.server is not None:
            self.server.stop()
        if self.engine is not None:
            self.engine.stop()
        self.voice.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self):
        assert self.server is not None, "start() first"
        return self.server.url

    def client(self, **kwargs):
        from host_client import AlarmClient

        kwargs.setdefault("retries", 0)
        return AlarmClient(self.url, self.cfg["key_id"], self.cfg["secret"], **kwargs)

    def get(self, path):
        """(status, bytes) of a GET on the running server."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def status(self):
        code, body = self.get("/api/v1/status")
        if code != 200:
            raise RuntimeError("status answered %d" % code)
        return json.loads(body.decode("utf-8"))

    def wait_for(self, predicate, timeout=10.0, interval=0.02):
        """Poll predicate(status dict) until it is true; returns that status, or raises AssertionError."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.status()
            if predicate(last):
                return last
            time.sleep(interval)
        raise AssertionError("condition not met within %.1f s; last status: %r" % (timeout, last))
