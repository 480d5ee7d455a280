"""A waitress server on loopback in a thread of the test process, stopped from its own thread.

waitress's run() loops in select() until interrupted; closing its sockets from the test's thread while that select
waits made the loop thread die with "OSError: [Errno 9] Bad file descriptor" (pytest's unhandled-thread-exception
warning, in test_gateway_auth and test_gateway_ha). Here the loop runs in short turns and the sockets are closed by
the loop's own thread once it sees the stop flag, then the worker threads are shut down.
"""

import threading


class WaitressThread:
    def __init__(self, app, *, threads=4):
        from waitress.server import create_server

        self.server = create_server(app, host="127.0.0.1", port=0, threads=threads)
        self.url = "http://127.0.0.1:%d" % int(self.server.effective_port)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        s = self.server
        try:
            while not self._stop.is_set():
                s.asyncore.loop(timeout=0.05, map=s._map, count=1)
        finally:
            s.close()  # in this thread: no select() is waiting on these sockets
            for d in list(s._map.values()):  # connections still open, and the trigger
                d.close()
            s.task_dispatcher.shutdown()

    def close(self, timeout=5):
        self._stop.set()
        self.thread.join(timeout)
