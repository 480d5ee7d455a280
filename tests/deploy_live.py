"""Real gateway and probe processes for the deployment tests: started from their CLIs on free loopback ports with
throw-away configuration, scraped like Prometheus scrapes them. Not a test module (no test_ prefix)."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPLAY = os.path.join(ROOT, "tests", "fixtures", "probes", "nvml_replay.json")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode("utf-8", "replace")


def wait_http(url, proc=None, timeout=30.0):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise AssertionError("%s exited with %s: %s" % (proc.args, proc.returncode, _tail(proc)))
        try:
            return get(url, 2.0)
        except OSError as e:
            last = e
        time.sleep(0.1)
    raise AssertionError("%s not answering after %.0f s (%s)" % (url, timeout, last))


def _tail(proc):
    try:
        return (proc.stderr.read() or b"").decode(errors="replace")[-3000:] if proc.stderr else ""
    except (OSError, ValueError):
        return ""


def stop(proc, timeout=10.0):
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def metric_names(text):
    """Family names in a Prometheus text page: the # TYPE lines (present even before a family has samples) and
    the sample names, with a histogram's or summary's _bucket/_sum/_count folded into its family."""
    names = set()
    for line in text.splitlines():
        m = re.match(r"# TYPE ([A-Za-z_:][A-Za-z0-9_:]*) ", line)
        if m:
            names.add(m.group(1))
        elif line and not line.startswith("#"):
            names.add(re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line).group(0))
    for n in list(names):
        for suffix in ("_bucket", "_sum", "_count"):
            if n.endswith(suffix) and n[: -len(suffix)] in names:
                names.discard(n)
    return names


def start_gateway(tmp, terminal_url, key_id, secret, port=None, extra_toml=""):
    """sentinel-gateway on 127.0.0.1 delivering to one terminal "emu". Returns (process, base URL)."""
    port = port or free_port()
    tmp = str(tmp)
    cfg = os.path.join(tmp, "gateway.toml")
    with open(cfg, "w") as f:
        f.write('[gateway]\nhost = "127.0.0.1"\nport = %d\nstate_dir = "%s"\nlog_format = "text"\n\n'
                '[delivery]\nrate_interval_s = 0\nbackoff_initial_s = 0.05\nbackoff_max_s = 0.5\n\n'
                '[terminals.emu]\nurl = "%s"\nkey_id = "%s"\nsecret_env = "SENTINEL_SECRET_EMU"\n%s'
                % (port, os.path.join(tmp, "gw-state"), terminal_url, key_id, extra_toml))
    env = dict(os.environ, SENTINEL_SECRET_EMU=secret)
    proc = subprocess.Popen([sys.executable, "-m", "host_client.gateway.cli", "-c", cfg], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = "http://127.0.0.1:%d" % port
    wait_http(url + "/healthz", proc)
    return proc, url


def start_probe(tmp, gateway_url, port=None):
    """sentinel-probe replaying recorded NVML readings, its status server on 127.0.0.1. (process, base URL)."""
    port = port or free_port()
    tmp = str(tmp)
    kern = os.path.join(tmp, "kern.log")
    open(kern, "a").close()
    cfg = os.path.join(tmp, "probe.toml")
    with open(cfg, "w") as f:
        f.write('[node]\nrack = "A03"\nhost = "gpu-worker-08"\ngateway = "%s"\n\n'
                '[gpu]\nsource = "replay"\nreplay = "%s"\n\n[xid]\nsource = "file"\npath = "%s"\n\n'
                '[progress]\nsocket = "%s"\n\n[status]\nlisten = "127.0.0.1:%d"\n'
                % (gateway_url, REPLAY, kern, os.path.join(tmp, "progress.sock"), port))
    proc = subprocess.Popen([sys.executable, "-m", "host_client.probes.cli", "-c", cfg], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = "http://127.0.0.1:%d" % port
    wait_http(url + "/metrics", proc)
    return proc, url
