"""A real terminal on loopback for tests: http.server in a thread in front of the core's Receiver, the same
handler the board and the emulator call. It records what it accepted and can misbehave on request."""

import http.server
import threading
import time

from sentinel_core.keyring import KeyRing
from sentinel_core.receiver import Receiver


class LoopbackTerminal:
    def __init__(self, keys, fail_first=0, fail_status=503, delay_s=0.0, drop_first=0):
        self.receiver = Receiver(KeyRing(keys), replay_capacity=4096)
        self.accepted = []  # Results the terminal acted on (not duplicates)
        self.answers = []  # every (status, answer)
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.drop_first = drop_first  # act on the request, then close without answering (lost answer)
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self._server = None

    def __enter__(self):
        term = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
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
                    term.answers.append((res.status, res.answer))
                    if res.status == 200 and not res.duplicate:
                        term.accepted.append(res)
                    if term.drop_first > 0:
                        term.drop_first -= 1
                        self.close_connection = True
                        return
                out = res.body_bytes()
                self.send_response(res.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self._server.server_address[1]

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
