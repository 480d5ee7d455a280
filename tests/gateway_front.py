"""The gateway on loopback for tests: a Gateway behind its one HTTP front (host_client/gateway/server.py) in a thread
of the test process, and a small client over real HTTP (urllib) whose answers read like a test client's."""

import json
import threading
import urllib.error
import urllib.request

from host_client.gateway.config import Config
from host_client.gateway.server import IngestFront
from host_client.gateway.service import Gateway


class Answer:
    def __init__(self, status, headers, body):
        self.status_code = status
        self.headers = headers
        self.data = body

    @property
    def json(self):
        try:
            return json.loads(self.data)
        except ValueError:
            return None

    def get_data(self, as_text=False):
        return self.data.decode() if as_text else self.data


class Client:
    def __init__(self, url):
        self.url = url

    def open(self, path, *, method, body=None, json_body=None, headers=None):
        h = dict(headers or {})
        if json_body is not None:
            body = json.dumps(json_body).encode()
            h.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(self.url + path, body, h, method=method)
        try:
            with urllib.request.urlopen(req, timeout=20) as r:
                return Answer(r.status, r.headers, r.read())
        except urllib.error.HTTPError as e:
            return Answer(e.code, e.headers, e.read())

    def post(self, path, json=None, data=None, headers=None, content_type=None):  # the usual name
        h = dict(headers or {})
        if content_type:
            h["Content-Type"] = content_type
        return self.open(path, method="POST", body=data if data is not None else b"", json_body=json, headers=h)

    def get(self, path, headers=None):
        return self.open(path, method="GET", headers=headers)


class ServedGateway:
    """cfg: a Config (or a dict, validated as the TOML file is). clients: {terminal: client} replacing AlarmClient.
    start: start the delivery workers now. close() stops the front, then the gateway (its final save)."""

    def __init__(self, cfg, *, clients=None, on_delivered=None, start=True):
        if isinstance(cfg, dict):
            cfg = Config.from_dict(cfg)
        self.cfg = cfg
        self.gw = Gateway(cfg, clients=clients, on_delivered=on_delivered)
        if start:
            self.gw.start()
        self.front = IngestFront(self.gw, cfg)
        ready = threading.Event()
        self.thread = threading.Thread(target=self.front.run, args=("127.0.0.1", 0, ready.set), daemon=True)
        self.thread.start()
        assert ready.wait(10), "the gateway's front did not start"
        self.port = self.front.port
        self.url = "http://127.0.0.1:%d" % self.port

    def test_client(self):
        return Client(self.url)

    def stop_front(self, timeout=5):
        self.front.stop()
        self.thread.join(timeout)

    def close(self, timeout=5):
        self.stop_front(timeout)
        self.gw.stop()
