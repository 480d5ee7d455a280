"""Real gateway and probe processes for the deployment tests: started from their CLIs on free loopback ports with
throw-away configuration, scraped like Prometheus scrapes them. Not a test module (no test_ prefix)."""

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

from testkit.net import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPLAY = os.path.join(ROOT, "tests", "fixtures", "probes", "nvml_replay.json")


def get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode("utf-8", "replace")


# The ingest token of the gateways these helpers start with authentication (examples/gateway.toml's [ingest]), and
# the one alertmanager_config() gives Alertmanager.
INGEST_TOKEN = "deploy-live-ingest-token-0123456789"


def post(url, body, timeout=5.0, token=None):
    """(status, text) of a JSON POST (with a bearer token if given); an HTTP error status is returned, not raised."""
    import urllib.error

    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    req = urllib.request.Request(url, body if isinstance(body, bytes) else body.encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


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
    """sentinel-gateway on 127.0.0.1 delivering to one terminal "emu" (extra_toml: more sections, e.g.
    [grouping] / [debounce]). Returns (process, base URL)."""
    port = port or free_port()
    tmp = str(tmp)
    cfg = os.path.join(tmp, "gateway.toml")
    with open(cfg, "w") as f:
        f.write(
            '[gateway]\nhost = "127.0.0.1"\nport = %d\nstate_dir = "%s"\nlog_format = "text"\n\n'
            "[delivery]\nrate_interval_s = 0\nbackoff_initial_s = 0.05\nbackoff_max_s = 0.5\n\n%s\n"
            '[terminals.emu]\nurl = "%s"\nkey_id = "%s"\nsecret_env = "SENTINEL_SECRET_EMU"\n'
            % (port, os.path.join(tmp, "gw-state"), extra_toml, terminal_url, key_id)
        )
    env = dict(os.environ, SENTINEL_SECRET_EMU=secret)
    proc = subprocess.Popen(
        [sys.executable, "-m", "host_client.gateway.cli", "-c", cfg],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = "http://127.0.0.1:%d" % port
    wait_http(url + "/healthz", proc)
    return proc, url


EXAMPLE_GATEWAY = os.path.join(ROOT, "examples", "gateway.toml")


def start_example_gateway(tmp, *, room, office, port=None, also=()):
    """examples/gateway.toml with this run's addresses and state directory (nothing else changed, unless also gives
    (old, new) text replacements) delivering to two emulators: room and office are each (URL, the emulator's
    config dict, as start_emulator returns them; its key_id the example's). Its ingest token is INGEST_TOKEN.
    Returns (process, base URL)."""
    port = port or free_port()
    text = open(EXAMPLE_GATEWAY).read()
    subs = [
        ('host = "0.0.0.0"', 'host = "127.0.0.1"'),
        ("port = 8080", "port = %d" % port),
        ('state_dir = "/var/lib/sentinel-gateway"', 'state_dir = "%s"' % os.path.join(str(tmp), "gw-state")),
        ('url = "http://192.168.10.200"', 'url = "%s"' % room[0]),
        ('url = "http://192.168.20.31:8765"', 'url = "%s"' % office[0]),
    ] + list(also)
    for old, new in subs:
        assert text.count(old) == 1, "examples/gateway.toml changed: %r" % old
        text = text.replace(old, new)
    path = os.path.join(str(tmp), "gateway.toml")
    with open(path, "w") as f:
        f.write(text)
    env = dict(
        os.environ,
        SENTINEL_SECRET_MACHINE_ROOM=room[1]["secret"],
        SENTINEL_SECRET_OFFICE=office[1]["secret"],
        SENTINEL_INGEST_TOKEN=INGEST_TOKEN,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "host_client.gateway.cli", "-c", path],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = "http://127.0.0.1:%d" % port
    wait_http(url + "/healthz", proc)
    return proc, url


def start_watchers(tmp, *, gateway_url, fallback_url, deadman_url, pager_url, terminals):
    """The shipped Alertmanager routes (1 s group timers) and Prometheus rules (1 s scrape and evaluation, 1 s
    resend) watching one gateway and the terminals named {name: URL}. Returns [(process, URL) for Alertmanager,
    for Prometheus]."""
    am, am_url = start_alertmanager(
        tmp,
        alertmanager_config(
            tmp, gateway_url, fallback_url, deadman_url, group_wait="1s", group_interval="1s", pager_url=pager_url
        ),
    )
    try:
        prom, prom_url = start_prometheus(
            tmp,
            prometheus_config(
                tmp,
                scrape_s=1,
                eval_s=1,
                am_address=am_url.split("//")[1],
                gateway_addresses=[gateway_url.split("//")[1]],
                dcgm_addresses=[],
                terminal_addresses={n: u.split("//")[1] for n, u in terminals.items()},
            ),
            extra_args=["--rules.alert.resend-delay=1s"],
        )
    except BaseException:
        stop(am)
        raise
    return [(am, am_url), (prom, prom_url)]


def start_probe(tmp, gateway_url, port=None, xid_hold_s=600.0, host="gpu-worker-08"):
    """sentinel-probe replaying recorded NVML readings, following tmp/kern.log as its kernel log, its status
    server on 127.0.0.1. (process, base URL)."""
    port = port or free_port()
    tmp = str(tmp)
    kern = os.path.join(tmp, "kern.log")
    open(kern, "a").close()
    cfg = os.path.join(tmp, "probe.toml")
    with open(cfg, "w") as f:
        f.write(
            '[node]\nrack = "A03"\nhost = "%s"\ngateway = "%s"\n\n'
            '[gpu]\nsource = "replay"\nreplay = "%s"\n\n[xid]\nsource = "file"\npath = "%s"\nhold_s = %r\n\n'
            '[progress]\nsocket = "%s"\n\n[status]\nlisten = "127.0.0.1:%d"\n'
            % (host, gateway_url, REPLAY, kern, float(xid_hold_s), os.path.join(tmp, "progress.sock"), port)
        )
    proc = subprocess.Popen(
        [sys.executable, "-m", "host_client.probes.cli", "-c", cfg],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = "http://127.0.0.1:%d" % port
    wait_http(url + "/metrics", proc)
    return proc, url


# --- the Prometheus path: a dcgm-exporter-format endpoint, Prometheus, Alertmanager, gateway, emulator -------------

PROMETHEUS = "/usr/bin/prometheus"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
DCGM_FIXTURE = os.path.join(ROOT, "tests", "fixtures", "deploy", "dcgm-exporter-hgx-h100.prom")


class DcgmExporter:
    """Serves a recorded dcgm-exporter page (tests/fixtures/deploy/) on 127.0.0.1; set() changes one GPU's
    value the way dcgm-exporter shows it (the XID gauge also carries err_code / err_msg labels, which change with
    it, so the series changes as it does on a real node)."""

    def __init__(self, path=DCGM_FIXTURE):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        with open(path) as f:
            self.lines = [ln.rstrip("\n") for ln in f if not ln.startswith("# SOURCE")]
        self.lock = threading.Lock()
        self.scrapes = 0
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # http.server's naming
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                with exporter.lock:
                    body = ("\n".join(exporter.lines) + "\n").encode()
                    exporter.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.server.server_address[1]

    def set(self, metric, gpu, value, err_msg=None):
        pat = re.compile(r'^%s\{gpu="%d",' % (re.escape(metric), gpu))
        with self.lock:
            for i, ln in enumerate(self.lines):
                if pat.match(ln):
                    labels, _old = ln.rsplit(" ", 1)
                    if metric == "DCGM_FI_DEV_XID_ERRORS":
                        labels = re.sub(r'err_code="[^"]*"', 'err_code="%d"' % value, labels)
                        labels = re.sub(r'err_msg="[^"]*"', 'err_msg="%s"' % (err_msg or "No Error"), labels)
                    self.lines[i] = "%s %s" % (labels, value)
                    return
        raise KeyError("%s for GPU %d is not in the page" % (metric, gpu))

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Sink:
    """Records POSTed JSON bodies (the dead-man receiver's target)."""

    def __init__(self):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.bodies = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                sink.bodies.append(json.loads(self.rfile.read(n) or b"null"))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def prometheus_config(
    tmp, *, scrape_s, eval_s, am_address, gateway_addresses, dcgm_addresses, terminal_addresses, probe_addresses=()
):
    """deploy/prometheus/prometheus.yml as shipped (its jobs, relabelling and rule files), with this run's
    addresses and intervals. Returns the path of the config written into tmp."""
    import yaml

    src = os.path.join(ROOT, "deploy", "prometheus")
    with open(os.path.join(src, "prometheus.yml")) as f:
        cfg = yaml.safe_load(f)
    cfg["global"].update(
        scrape_interval="%ss" % scrape_s, evaluation_interval="%ss" % eval_s, scrape_timeout="%ss" % min(scrape_s, 10)
    )
    cfg["rule_files"] = [os.path.join(src, p) for p in cfg["rule_files"]]
    cfg["alerting"]["alertmanagers"][0]["static_configs"] = [{"targets": [am_address]}]
    tdir = os.path.join(str(tmp), "targets")
    os.makedirs(tdir, exist_ok=True)
    for job in cfg["scrape_configs"]:
        name = job["job_name"]
        if name == "sentinel-gateway":
            job["static_configs"] = [{"targets": list(gateway_addresses)}]
        elif name == "sentinel-terminal":
            # a list: one terminal "emu"; a dict: terminal name -> address, as the shipped file labels them
            named = terminal_addresses if isinstance(terminal_addresses, dict) else {"emu": terminal_addresses}
            job["static_configs"] = [
                {"targets": [a] if isinstance(a, str) else list(a), "labels": {"terminal": n, "kind": "emulator"}}
                for n, a in named.items()
            ]
        elif name in ("dcgm-exporter", "sentinel-probe"):
            addrs = dcgm_addresses if name == "dcgm-exporter" else probe_addresses
            path = os.path.join(tdir, "%s.yml" % name)
            with open(path, "w") as f:
                yaml.safe_dump([{"targets": list(addrs), "labels": {"rack": "A03"}}] if addrs else [], f)
            job["file_sd_configs"] = [{"files": [path], "refresh_interval": "1s"}]
    path = os.path.join(str(tmp), "prometheus.yml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    return path


def alertmanager_config(
    tmp, gateway_url, fallback_url, deadman_url, group_wait=None, group_interval=None, pager_url=None
):
    """deploy/alertmanager/alertmanager.yml as shipped (its routes and receivers), with this run's URLs, a token
    file, and optionally shorter group timers. Returns the path. Without pager_url the pager receiver points at a
    loopback port nothing listens on."""
    import yaml

    with open(os.path.join(ROOT, "deploy", "alertmanager", "alertmanager.yml")) as f:
        cfg = yaml.safe_load(f)
    tok = os.path.join(str(tmp), "sentinel-gateway.token")
    with open(tok, "w") as f:
        f.write(INGEST_TOKEN + "\n")
    urls = {
        "sentinel": gateway_url + "/api/v1/alertmanager",
        "sentinel-fallback": fallback_url + "/api/v1/alertmanager",
        "deadman": deadman_url,
        "pager": pager_url or "http://127.0.0.1:9/pager",
    }
    for r in cfg["receivers"]:
        for w in r.get("webhook_configs", []):
            w["url"] = urls[r["name"]]
            if "authorization" in w.get("http_config", {}):
                w["http_config"]["authorization"]["credentials_file"] = tok
    for route in [cfg["route"]] + cfg["route"]["routes"]:
        if group_wait is not None and "group_wait" in route:
            route["group_wait"] = group_wait
        if group_interval is not None and "group_interval" in route:
            route["group_interval"] = group_interval
    path = os.path.join(str(tmp), "alertmanager.yml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    return path


def start_prometheus(tmp, config_path, port=None, extra_args=()):
    """Debian's prometheus on 127.0.0.1; returns once it is ready and has discovered its Alertmanager (alerts
    that fire before that are dropped by its notifier, and re-sent only after --rules.alert.resend-delay)."""
    import json

    port = port or free_port()
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            "--config.file=" + config_path,
            "--storage.tsdb.path=" + os.path.join(str(tmp), "prom-data"),
            "--web.listen-address=127.0.0.1:%d" % port,
            "--log.level=warn",
        ]
        + list(extra_args),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = "http://127.0.0.1:%d" % port
    wait_http(url + "/-/ready", proc)
    end = time.monotonic() + 30
    while not json.loads(get(url + "/api/v1/alertmanagers")[1])["data"]["activeAlertmanagers"]:
        if time.monotonic() > end:
            raise AssertionError("prometheus did not discover its Alertmanager")
        time.sleep(0.1)
    return proc, url


def start_alertmanager(tmp, config_path, port=None):
    port = port or free_port()
    proc = subprocess.Popen(
        [
            ALERTMANAGER,
            "--config.file=" + config_path,
            "--storage.path=" + os.path.join(str(tmp), "am-data"),
            "--web.listen-address=127.0.0.1:%d" % port,
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = "http://127.0.0.1:%d" % port
    wait_http(url + "/-/ready", proc)
    return proc, url


def start_emulator(tmp, wav_dir=None, port=None, key_id=None):
    """The real emulator CLI, headless, its voice into WAV files (key_id: the one a gateway's config names).
    Returns (process, URL, its config dict)."""
    import json

    from emulator import config as emu_config

    port = port or free_port()
    path = os.path.join(str(tmp), "emulator.json")
    emu_config.load(path, {})  # created as on a first start (random secret, mode 600)
    with open(path) as f:
        cfg = json.load(f)
    cfg["terminal"] = dict(cfg.get("terminal") or {}, quiet_enabled=False)  # not at the mercy of the hour
    if key_id is not None:
        cfg["key_id"] = key_id
    with open(path, "w") as f:
        json.dump(cfg, f)
    cmd = [sys.executable, "-m", "emulator", "--config", path, "--headless", "--no-persist", "--port", str(port)]
    cmd += ["--wav-dir", wav_dir] if wav_dir else ["--no-voice"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = "http://127.0.0.1:%d" % port
    wait_http(url + "/api/v1/status", proc)
    return proc, url, cfg


def emulator_status(url):
    import json

    return json.loads(get(url + "/api/v1/status")[1])


def wait_status(url, pred, timeout, interval=0.05):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = emulator_status(url)
        if pred(last):
            return time.monotonic(), last
        time.sleep(interval)
    raise AssertionError("emulator: condition not met within %.0f s; last status %r" % (timeout, last))


def live_metric_names(tmp):
    """The metric families a real gateway (delivering to a real emulator), a real probe and that emulator export
    right now: what dashboards and rules must use (the names change as the code does: never a hand-made list)."""
    from emulator.harness import Harness
    from emulator.metrics import render_metrics

    tmp = str(tmp)
    with Harness(os.path.join(tmp, "emu")) as h:
        gw, gw_url = start_gateway(tmp, h.url, h.cfg["key_id"], h.cfg["secret"])
        probe = None
        try:
            probe, probe_url = start_probe(tmp, gw_url)
            return {
                "gateway": metric_names(get(gw_url + "/metrics")[1]),
                "probe": metric_names(get(probe_url + "/metrics")[1]),
                "emulator": metric_names(render_metrics(h.engine)),
            }
        finally:
            stop(probe)
            stop(gw)
