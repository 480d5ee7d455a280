"""Make the docs' screenshot of the real window: `python -m emulator.docshot docs/img/emulator.png`.

It starts a private emulator (temporary config, loopback, a free port), sends the RFC's P1 and P0 through
host_client exactly as a gateway would, and saves the window while the P0 flash is lit and the voice speaks.
"""

import os
import sys
import tempfile
import time

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")

P0_TEXT = "训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁，全环算力挂起"


def lit_count(frame):
    rgb = frame.rgb
    return sum(1 for i in range(0, len(rgb), 3) if rgb[i] or rgb[i + 1] or rgb[i + 2])


def make(path, min_frames=40, max_frames=300):
    from emulator.harness import Harness
    from emulator.window import Window
    from host_client import preset

    with tempfile.TemporaryDirectory() as tmp:
        h = Harness(tmp, voice="wav", wav_dir=os.path.join(tmp, "wav")).start()
        assert h.engine is not None  # start() made it
        try:
            c = h.client()
            c.send(preset("p1", "NVLink slow-down on gpu-worker-11", key="A03:gpu-worker-11:NVLINK"))
            c.send(preset("p0", P0_TEXT, key="A03:gpu-worker-08:NCCL_TIMEOUT"))
            win = Window(h.engine, url="http://127.0.0.1:8765")
            best = 0
            for i in range(max_frames):
                win.draw()
                view = h.engine.view
                assert view is not None  # the running engine has published its first view
                frame = view.frame
                n = lit_count(frame)
                if i >= min_frames and n >= best and n > 40:
                    win.save(path)
                    return path
                best = max(best, n)
                time.sleep(1.0 / 30)
            win.save(path)
            return path
        finally:
            h.stop()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    path = argv[0] if argv else os.path.join("docs", "img", "emulator.png")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    print(make(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
