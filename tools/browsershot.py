"""Make the docs' screenshot of the browser page: `.venv/bin/python tools/browsershot.py docs/img/browser.png`.

A private emulator (temporary config, loopback, free port), Debian's headless chromium on a fresh profile (driven
over DevTools by tests/cdp.py), the RFC's P0 sent through host_client, then a real click on the page's ACK button:
the picture shows the flashing matrix and the panel saying why the alarm is now silent.
"""

import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

P0_TEXT = "训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁，全环算力挂起"
KEY = "A03:gpu-worker-08:NCCL_TIMEOUT"
CENTRE_RED = (
    "(() => { const c = document.getElementById('m'), p = +c.dataset.pitch;"
    " return c.getContext('2d').getImageData(p * 8 + p / 2 | 0, p * 3 + p / 2 | 0, 1, 1).data[0]; })()"
)


def make(path):
    from cdp import Browser

    from emulator.harness import Harness
    from host_client import preset

    with tempfile.TemporaryDirectory() as tmp:
        h = Harness(os.path.join(tmp, "cfg"), voice="wav", wav_dir=os.path.join(tmp, "wav")).start()
        b = Browser(os.path.join(tmp, "profile"), width=960, height=520)
        try:
            b.goto(h.url + "/")
            b.wait_js("document.body.dataset.ready === '1'")
            h.client().send(preset("p0", P0_TEXT, key=KEY))
            b.wait_js("document.getElementById('badge').textContent.startsWith('P0')")
            x, y = b.js(
                "(() => { const r = document.getElementById('ack').getBoundingClientRect();"
                " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
            )
            b.click(x, y)
            b.wait_js("document.getElementById('silence').textContent.includes('acknowledged')")
            deadline = time.monotonic() + 3
            while b.js(CENTRE_RED) < 150 and time.monotonic() < deadline:  # the flash's lit half
                time.sleep(0.02)
            b.screenshot(path)
        finally:
            b.close()
            h.stop()
    return path


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "docs", "img", "browser.png")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    print(make(out))
