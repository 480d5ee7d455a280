"""The slow and greedy clients of tests/test_gateway_slow_clients.py, in a process of their own (so that the test's
own measurements do not wait for this loop's turn at the GIL). Runs until its stdin closes, then prints what it did
as one JSON line.

    python tests/slow_attack.py PORT [N_TRICKLE N_BODY ROUND_S]
"""

import json
import resource
import socket
import sys
import threading
import time


class Attack:
    """n_trickle connections sending a head one byte per round, n_body connections sending 60 KB of a 64 KB body
    once; every round_s, dropped ones are opened again."""

    WAVE = 50
    WAVE_S = 0.025
    HEAD = b"POST /api/v1/gpu_event HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Pad: " + b"a" * 200

    def __init__(self, port, n_trickle=1100, n_body=1000, round_s=5.0):
        self.port = port
        self.n_trickle = n_trickle
        self.n_body = n_body
        self.round_s = round_s
        self.trickle = []  # [socket or None, bytes sent]
        self.bodies = []
        self.stop = threading.Event()
        self.opened = 0
        self.dropped = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", self.port))
        self.opened += 1
        return s

    def _send(self, s, data):
        try:
            return s.send(data)
        except BlockingIOError:
            return 0
        except OSError:
            return -1

    def _run(self):
        body_head = b"POST /api/v1/gpu_event HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n"
        chunk = b"x" * 61440
        # Opened in waves of WAVE every WAVE_S (2,100 in about a second): a flood the front can take in turn. All at
        # once, the newcomer waits behind every connection queued before it (docs/GATEWAY.md, "Limits").
        for i in range(0, max(self.n_trickle, self.n_body), self.WAVE):
            self.trickle += [[self._open(), 0] for _ in range(min(self.WAVE, self.n_trickle - i))]
            wave = [[self._open(), 0] for _ in range(min(self.WAVE, self.n_body - i))]
            self.bodies += wave
            time.sleep(self.WAVE_S)
            for slot in wave:  # connected by now: the head and 60 KB of the body
                slot[1] = max(0, self._send(slot[0], body_head + chunk))
        while not self.stop.is_set():
            redo_t, redo_b = [], []
            for slot in self.trickle:
                s, n = slot
                if self._send(s, self.HEAD[n % len(self.HEAD) : n % len(self.HEAD) + 1]) < 0:
                    redo_t.append(slot)
                else:
                    slot[1] = n + 1
            for slot in self.bodies:
                if self._send(slot[0], b"") < 0 or self._peer_gone(slot[0]):
                    redo_b.append(slot)
            # what the gateway dropped is opened again, in waves as at the start
            for i in range(0, max(len(redo_t), len(redo_b)), self.WAVE):
                for slot in redo_t[i : i + self.WAVE] + redo_b[i : i + self.WAVE]:
                    slot[0].close()
                    self.dropped += 1
                    slot[0], slot[1] = self._open(), 0
                time.sleep(self.WAVE_S)
                for slot in redo_b[i : i + self.WAVE]:
                    slot[1] = max(0, self._send(slot[0], body_head + chunk))
            self.stop.wait(self.round_s)

    @staticmethod
    def _peer_gone(s):
        try:
            s.recv(4096)
        except BlockingIOError:
            return False
        except OSError:
            return True
        return True  # an answer (503, 408) or EOF: either way this one was dropped

    def close(self):
        self.stop.set()
        self.thread.join(30)
        for s, _n in self.trickle + self.bodies:
            s.close()


def main():
    port = int(sys.argv[1])
    n_trickle, n_body, round_s = (
        (int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
        if len(sys.argv) > 4
        else (
            1100,
            1000,
            5.0,
        )
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * (n_trickle + n_body) + 64
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(hard, want), hard))
    a = Attack(port, n_trickle, n_body, round_s)
    a.thread.start()
    sys.stdin.read()  # until the test closes it
    a.close()
    print(json.dumps({"opened": a.opened, "dropped": a.dropped}), flush=True)


if __name__ == "__main__":
    main()
