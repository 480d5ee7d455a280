"""A real terminal on loopback: http.server in a thread in front of the core's Receiver, the same handler the
board and the emulator call. It records what it received and accepted, and misbehaves on request: slow (delay_s),
busy (fail_first answers of fail_status), answers lost (drop_first), or one request at a time with a short listen
backlog, as a board busy speaking is (one_at_a_time)."""

from __future__ import annotations

import http.server
import json
import socketserver
import threading
import time

from sentinel_core.keyring import KeyRing
from sentinel_core.receiver import PATH_ALARM, Receiver


class LoopbackTerminal:
    def __init__(
        self,
        keys,
        *,
        fail_first=0,
        fail_status=503,
        delay_s=0.0,
        drop_first=0,
        one_at_a_time=False,
        backlog=8,
        port=0,
        replay_capacity=4096,
    ):
        self.receiver = Receiver(KeyRing(keys), replay_capacity=replay_capacity)
        self.accepted = []  # Results the terminal acted on (not duplicates)
        self.answers = []  # every (status, answer)
        self.received = []  # every POST as it arrived: (wall time, path, JSON body or {})
        self.requests = 0  # requests the Receiver answered
        self.last = time.monotonic()  # when the last of them was answered
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.drop_first = drop_first  # act on the request, then close without answering (lost answer)
        self.delay_s = delay_s
        self.one_at_a_time = one_at_a_time
        self.backlog = backlog
        self.port = port
        self.lock = threading.Lock()
        self._server = None

    def start(self):
        term = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    obj = json.loads(body)
                except ValueError:
                    obj = {}
                with term.lock:
                    term.received.append((time.time(), self.path, obj))
                if term.delay_s:
                    time.sleep(term.delay_s)
                with term.lock:
                    if term.fail_first > 0:
                        term.fail_first -= 1
                        self.send_response(term.fail_status)
                        self.end_headers()
                        self.wfile.write(b'{"ok":false,"error":"busy","message":"try later"}')
                        return
                    res = term.receiver.handle("POST", self.path, dict(self.headers.items()), body, time.time())
                    term.requests += 1
                    term.last = time.monotonic()
                    term.answers.append((res.status, res.answer))
                    if res.status == 200 and not res.duplicate:
                        term.accepted.append(res)
                    if term.drop_first > 0:
                        term.drop_first -= 1
                        self.close_connection = True
                        return
                out = res.body_bytes()
                try:
                    self.send_response(res.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except OSError:
                    pass  # the sender gave up waiting (its timeout): what it missed is its retry's business

            def log_message(self, *a):
                pass

        if self.one_at_a_time:

            class Server(socketserver.TCPServer):
                request_queue_size = self.backlog
                allow_reuse_address = True

        else:
            Server = http.server.ThreadingHTTPServer  # a class picked by mode

        self._server = Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def alarms(self):
        """(arrival time, wire body) of every alarm POSTed, accepted or not, in arrival order."""
        with self.lock:
            return [(t, o) for t, p, o in self.received if p == PATH_ALARM]

    def close(self):
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
