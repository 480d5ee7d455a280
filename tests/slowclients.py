"""Slow clients against a terminal over loopback: N connections held open from an asyncio loop in a thread, a third
of each kind: idle (connects and sends nothing), dripping (a request head one byte per second) and lying (a whole
head with Content-Length: 2000 and ten bytes of body, then nothing). A connection the terminal closes (deadline,
shed) is opened again after 50 ms, so the pressure stays at N. Used by bench/bench_slowclients.py (N=1000) and the
board's flood test in tests/test_runtime_unix.py."""

import asyncio
import resource
import threading


def raise_fd_limit(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = need if hard == resource.RLIM_INFINITY else min(hard, need)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Attacker:
    """N slow connections held open from an asyncio loop in a thread; reopened 50 ms after the terminal closes one."""

    def __init__(self, port, n):
        self.port = port
        self.n = n
        self.open = 0
        self.opened = 0
        self.closed_by_peer = 0
        self.failed_connects = 0
        self._stop = None
        self._loop = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _run(self):
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self):
        tasks = [asyncio.ensure_future(self._keep(i % 3)) for i in range(self.n)]
        await self._stop.wait()
        pending = set(tasks)
        while pending:  # again for those that went on: Python 3.11's wait_for can swallow a cancellation
            for t in pending:
                t.cancel()
            _, pending = await asyncio.wait(pending, timeout=0.5)

    async def _keep(self, kind):
        await asyncio.sleep(kind * 0.01)
        while True:
            try:
                r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 5)
            except (OSError, asyncio.TimeoutError):
                self.failed_connects += 1
                await asyncio.sleep(0.05)
                continue
            self.open += 1
            self.opened += 1
            try:
                if kind == 1:  # dripping: a request head, one byte a second
                    head = b"POST /api/v1/send_msg HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    reading = asyncio.ensure_future(r.read(1))
                    reading.add_done_callback(lambda t: t.cancelled() or t.exception())  # a reset is expected
                    for b in head:
                        w.write(bytes([b]))
                        await w.drain()
                        done, _ = await asyncio.wait([reading], timeout=1.0)
                        if done:
                            break
                    await reading
                else:
                    if kind == 2:  # lying: Content-Length 2000, ten bytes sent
                        w.write(
                            b"POST /api/v1/send_msg HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                            b"Content-Length: 2000\r\n\r\n0123456789"
                        )
                        await w.drain()
                    await r.read(1)  # idle until the terminal closes it
                self.closed_by_peer += 1
            except (OSError, asyncio.IncompleteReadError):
                self.closed_by_peer += 1
            finally:
                self.open -= 1
                w.close()
            await asyncio.sleep(0.05)

    def stop(self):
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
