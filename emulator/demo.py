"""The RFC's story, played against a running emulator with the same client library every alert source uses:
a P0 NCCL deadlock on rack A03, the engineer's ACK (15-minute mute, the light stays), then the recovery. At the end
(or when the story is cut short) it restores what it changed: the mute is lifted, an open incident closed."""

import json
import time
import urllib.request

from emulator import config as config_mod
from sentinel_core.alarm import preset

INCIDENT = "A03:gpu-worker-08:NCCL_TIMEOUT"
P0_TEXT = "训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁，全环算力挂起"


def _status(url):
    with urllib.request.urlopen(url.rstrip("/") + "/api/v1/status", timeout=3) as r:
        return json.loads(r.read().decode("utf-8"))


def _describe(snap):
    shown = snap.get("shown") or {}
    mute = snap.get("mute") or {}
    speaking = (snap.get("speech") or {}).get("speaking")
    parts = ["matrix: %s %s" % (shown.get("level") or "-", shown.get("pattern"))]
    parts.append("muted %ss" % mute.get("remaining_s") if mute.get("active") else "sound on")
    if speaking:
        parts.append("speaking %s/%s" % (speaking.get("n"), speaking.get("of")))
    return ", ".join(parts)


def make_client(config_path=None, url=None):
    from host_client import AlarmClient  # the lead's library; imported where it is used

    path = config_path or config_mod.default_path()
    with open(path, encoding="utf-8") as f:
        stored = json.load(f)
    return AlarmClient(url or stored["url"], stored["key_id"], stored["secret"])


def run_demo(config_path=None, url=None, pause=8.0, log=print, client=None, sleep=time.sleep):
    """Returns 0 when every step was acknowledged by the terminal, 1 otherwise."""
    try:
        client = client or make_client(config_path, url)
    except (OSError, ValueError, KeyError) as e:
        log("demo: cannot read the emulator's config (start `sentinel-emulator` first): %s" % e)
        return 1
    base = getattr(client, "url", url)
    steps = [
        (
            "02:07 the NCCL watchdog fires on gpu-worker-08: P0, red flash, spoken 3 times",
            lambda: client.send(preset("p0", P0_TEXT, key=INCIDENT)),
        ),
        (
            "02:09 the on-call engineer reaches the rack and presses ACK: 15-minute mute, the light stays",
            lambda: client.ack(),
        ),
        (
            "02:31 the node is isolated, the job resumes from its checkpoint: recovery, green for 10 s",
            lambda: client.send(preset("normal", key=INCIDENT)),
        ),
    ]
    done = 0
    try:
        for i, (title, act) in enumerate(steps):
            log("demo %d/3: %s" % (i + 1, title))
            try:
                ack = act()
            except Exception as e:  # noqa: BLE001  (any SentinelError: say what failed and stop the story)
                log("demo: the terminal refused or did not answer: %s" % e)
                return 1
            done = i + 1
            log("demo:   terminal answered %s" % getattr(ack, "status", ack))
            if base:
                try:
                    log("demo:   " + _describe(_status(base)))
                except OSError as e:
                    log("demo:   (status unavailable: %s)" % e)
            if i < len(steps) - 1:
                sleep(pause)
    finally:
        _restore(client, done, log)
    log("demo: done. The incident is closed; the terminal returns to idle after the green.")
    return 0


def _restore(client, done, log):
    """Leave the terminal as the demo found it: the ACK's 15-minute mute lifted (an unmute), and a P0 left by an
    interrupted story cleared (its recovery)."""
    if done == 0:
        return
    try:
        if done < 3:
            client.send(preset("normal", key=INCIDENT))
        if done >= 2:
            client.unmute()
        log(
            "demo: restored the terminal (%s)"
            % ("mute lifted" if done == 3 else "incident cleared, mute lifted" if done == 2 else "incident cleared")
        )
    except Exception as e:  # noqa: BLE001  (the story's outcome stands; say what is left behind)
        log("demo: could not restore the terminal (%s): it may stay muted; run sentinel-send --unmute" % e)
