"""deploy/kubernetes: every manifest validates against the Kubernetes schemas (offline, `kubernetes-validate`,
strict, an older and the newest supported version), and every port, flag, path, secret name and config key the
manifests use exists in the code: the CLIs' own argparse parsers parse the containers' args, the ConfigMaps'
TOML files load through the gateway's and the probe's own config loaders, the probes' HTTP paths answer on a
real gateway and a real probe."""

import argparse
import glob
import os
import re
import sys

import pytest
import yaml
from deploy_live import ROOT, get, post, start_gateway, start_probe, stop

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

kv = pytest.importorskip("kubernetes_validate")

K8S = os.path.join(ROOT, "deploy", "kubernetes")
MANIFESTS = sorted(
    p
    for p in glob.glob(os.path.join(K8S, "*.yaml")) + glob.glob(os.path.join(K8S, "examples", "*.yaml"))
    if os.path.basename(p) != "kustomization.yaml"
)
VERSIONS = ("1.29.0", "1.37.0")


def docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def objects():
    return {(d["kind"], d["metadata"]["name"]): d for p in MANIFESTS for d in docs(p)}


def obj(kind, name):
    return objects()[(kind, name)]


def container(workload, name):
    return [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name][0]


def config_text(cm_name, key):
    return obj("ConfigMap", cm_name)["data"][key]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: os.path.relpath(p, K8S))
def test_manifest_validates_against_the_kubernetes_schema(path, version):
    for d in docs(path):
        kv.validate(d, version, strict=True)  # raises ValidationError naming the field


def test_the_validator_does_catch_a_typo():
    d = obj("PodDisruptionBudget", "sentinel-gateway")
    bad = dict(d, spec=dict(d["spec"], minAvaliable=1))
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, VERSIONS[-1], strict=True)


def test_kustomization_lists_every_manifest_but_the_secret_and_examples():
    with open(os.path.join(K8S, "kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    top = {os.path.basename(p) for p in MANIFESTS if os.path.dirname(p) == K8S}
    assert set(k["resources"]) == top - {"gateway-secret.example.yaml"}
    used = {
        c["image"]
        for p in MANIFESTS
        for d in docs(p)
        if d["kind"] in ("Deployment", "DaemonSet")
        for c in d["spec"]["template"]["spec"]["containers"] + d["spec"]["template"]["spec"].get("initContainers", [])
    }
    assert used == {i["name"] for i in k["images"]}


class _Captured(Exception):
    pass


def cli_parser(main, monkeypatch):
    """The argparse parser a CLI's main() builds, captured as it is about to parse."""
    seen = []
    real = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        seen.append(self)
        raise _Captured

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(_Captured):
        main([])
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", real)
    return seen[0]


def parse(parser, args):
    try:
        return parser.parse_args(args)
    except SystemExit:
        raise AssertionError("%s refuses %r" % (parser.prog, args)) from None


def _env_expand(args, env):
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in args]


def scripts():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["scripts"]


def test_gateway_containers_run_the_gateway_cli_with_flags_it_has(monkeypatch):
    from host_client.gateway import cli

    p = cli_parser(cli.main, monkeypatch)
    dep = obj("Deployment", "sentinel-gateway")
    spec = dep["spec"]["template"]["spec"]
    for c in spec["containers"] + spec["initContainers"]:
        assert c["command"] == ["sentinel-gateway"] and "sentinel-gateway" in scripts()
        a = parse(p, c["args"])
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        cfg_dir, key = os.path.split(a.config)
        assert cfg_dir in mounts, "the -c file's directory is not mounted"
        vol = [v for v in spec["volumes"] if v["name"] == mounts[cfg_dir]["name"]][0]
        assert vol["configMap"]["name"] == "sentinel-gateway-config"
        assert key in obj("ConfigMap", "sentinel-gateway-config")["data"]
    assert parse(p, spec["initContainers"][0]["args"]).check_config
    assert dep["spec"]["replicas"] == 2


def test_gateway_configmap_loads_and_its_port_secret_and_state_dir_match(tmp_path):
    from host_client.gateway.config import Config

    raw = tomllib.loads(config_text("sentinel-gateway-config", "gateway.toml"))
    secret = obj("Secret", "sentinel-gateway-secrets")
    env = dict.fromkeys(secret["stringData"], "s" * 32)
    cfg = Config.from_dict(raw, env=env)  # every secret_env / token_env the file names is a key of the Secret
    assert {t.secret.source for t in cfg.terminals.values()} | {t.source for t in cfg.ingest_tokens} == {
        "env %s" % k for k in secret["stringData"]
    }
    assert cfg.ingest_tokens, "the shipped Alertmanager receiver sends a bearer token: the gateway must want it"
    dep = obj("Deployment", "sentinel-gateway")
    c = container(dep, "gateway")
    assert [e["secretRef"]["name"] for e in c["envFrom"]] == ["sentinel-gateway-secrets"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["http"] == cfg.port and cfg.host == "0.0.0.0"
    svc = obj("Service", "sentinel-gateway")
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(cfg.port, "http")]
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert obj("PodDisruptionBudget", "sentinel-gateway")["spec"]["selector"] == dep["spec"]["selector"]
    np_ = obj("NetworkPolicy", "sentinel-gateway-ingest")
    assert np_["spec"]["podSelector"] == dep["spec"]["selector"]
    assert np_["spec"]["ingress"][0]["ports"][0]["port"] in ports
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert cfg.state_dir in mounts, "the pending queues must be on a volume"
    # the HTTP paths the kubelet's probes, the probes and Alertmanager use, on a real gateway process (its own
    # HTTP front, whichever server the gateway runs)
    gw, url = start_gateway(tmp_path, "http://127.0.0.1:1", "k", "s" * 32)
    try:
        for probe in ("readinessProbe", "livenessProbe"):
            assert get(url + c[probe]["httpGet"]["path"])[0] == 200 and c[probe]["httpGet"]["port"] in ports
        assert get(url + "/metrics")[0] == 200
        for ingest in ("/api/v1/gpu_event", "/api/v1/alertmanager"):  # what the probe and Alertmanager post to
            code, text = post(url + ingest, "{}")
            assert code not in (404, 405), (ingest, code, text)
    finally:
        stop(gw)
    probe_cfg = tomllib.loads(config_text("sentinel-probe-config", "probe.toml"))
    assert probe_cfg["node"]["gateway"] == "http://%s.%s.svc:%d" % (
        svc["metadata"]["name"],
        svc["metadata"]["namespace"],
        cfg.port,
    )


def test_probe_daemonset_runs_the_probe_cli_with_what_its_config_needs(monkeypatch):
    from host_client import beat
    from host_client.probes import cli
    from host_client.probes import config as pconfig

    p = cli_parser(cli.main, monkeypatch)
    ds = obj("DaemonSet", "sentinel-probe")
    spec = ds["spec"]["template"]["spec"]
    c = container(ds, "probe")
    assert c["command"] == ["sentinel-probe"] and "sentinel-probe" in scripts()
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    a = parse(p, _env_expand(c["args"], {"NODE_NAME": "gpu-worker-08"}))
    assert a.host == "gpu-worker-08"
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    cfg_dir, key = os.path.split(a.config)
    assert vols[mounts[cfg_dir]["name"]]["configMap"]["name"] == "sentinel-probe-config"
    raw = tomllib.loads(config_text("sentinel-probe-config", key))
    cfg = pconfig.build(raw)  # the probe's own loader: unknown keys and bad values are errors
    # the gateway's ingest token: the one key of the gateway's Secret the probe gets, under its [sender] token_env
    tok = env[cfg["sender"]["token_env"]]["valueFrom"]["secretKeyRef"]
    assert (
        tok["name"] == "sentinel-gateway-secrets"
        and tok["key"] in obj("Secret", "sentinel-gateway-secrets")["stringData"]
    )
    assert "envFrom" not in c, "the probe must not get the terminals' secrets"

    def host_path(mount_path):
        return vols[mounts[mount_path]["name"]]["hostPath"]["path"]

    # /dev/kmsg for the kmsg XID source, from the host, and a pod allowed to open it
    assert cfg["xid"]["source"] == "kmsg" and host_path("/dev/kmsg") == "/dev/kmsg"
    assert c["securityContext"]["privileged"] is True
    # NVML through the NVIDIA runtime, without taking a GPU
    assert cfg["gpu"]["source"] == "nvml" and spec["runtimeClassName"] == "nvidia"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert "nvidia.com/gpu" not in str(c.get("resources", {}))
    # the progress socket: in a hostPath directory, the default the training loop's beat() sends to
    sock_dir = os.path.dirname(cfg["progress"]["socket"])
    assert sock_dir in mounts and host_path(sock_dir) == sock_dir
    assert cfg["progress"]["socket"] == beat.DEFAULT_SOCKET
    assert spec["hostPID"] is True
    # NCCL logs: every glob under a read-only host mount
    for pattern in cfg["nccl"]["logs"]:
        assert any(pattern.startswith(m + "/") and mounts[m].get("readOnly") for m in mounts), pattern
    # the status server on the pod's network, on the port the manifest names "metrics"
    host, port = cfg["status"]["listen"].rsplit(":", 1)
    assert host == "0.0.0.0" and {q["name"]: q["containerPort"] for q in c["ports"]}["metrics"] == int(port)


def test_probe_daemonset_http_probes_answer_on_a_real_probe(tmp_path):
    ds = obj("DaemonSet", "sentinel-probe")
    c = container(ds, "probe")
    proc, url = start_probe(tmp_path, "http://127.0.0.1:1")
    try:
        for probe in ("readinessProbe", "livenessProbe"):
            assert get(url + c[probe]["httpGet"]["path"])[0] == 200
    finally:
        stop(proc)


def test_training_pod_example_shares_the_probes_socket():
    from host_client.probes import config as pconfig

    cfg = pconfig.build(tomllib.loads(config_text("sentinel-probe-config", "probe.toml")))
    pod = obj("Pod", "llama-70b-rank0")
    c = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["SENTINEL_PROBE_SOCKET"] == cfg["progress"]["socket"]
    m = [m for m in c["volumeMounts"] if env["SENTINEL_PROBE_SOCKET"].startswith(m["mountPath"] + "/")][0]
    vol = [v for v in pod["spec"]["volumes"] if v["name"] == m["name"]][0]
    ds_vols = obj("DaemonSet", "sentinel-probe")["spec"]["template"]["spec"]["volumes"]
    assert vol["hostPath"]["path"] in {v["hostPath"]["path"] for v in ds_vols if "hostPath" in v}


def test_kubernetes_scrape_config_matches_the_manifests_and_the_rules():
    with open(os.path.join(K8S, "prometheus-scrape.yml")) as f:
        jobs = {j["job_name"]: j for j in yaml.safe_load(f)["scrape_configs"]}
    rules = ""
    for p in glob.glob(os.path.join(ROOT, "deploy", "prometheus", "rules", "*.yml")):
        rules += open(p).read()
    for name in jobs:
        assert 'job="%s"' % name in rules or "|%s" % name in rules or "%s|" % name in rules, name
    keep = {n: [r for r in j["relabel_configs"] if r.get("action") == "keep"][0]["regex"] for n, j in jobs.items()}
    svc = obj("Service", "sentinel-gateway")
    assert keep["sentinel-gateway"] == "%s;%s" % (svc["metadata"]["name"], svc["spec"]["ports"][0]["name"])
    ds = obj("DaemonSet", "sentinel-probe")
    c = container(ds, "probe")
    assert keep["sentinel-probe"] == "%s;%s" % (
        ds["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"],
        c["ports"][0]["name"],
    )
    for name in ("sentinel-probe", "dcgm-exporter"):
        targets = {r.get("target_label") for r in jobs[name]["relabel_configs"]}
        assert {"node_host", "rack"} <= targets


def test_dockerfile_targets_install_extras_that_exist():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    with open(os.path.join(ROOT, "deploy", "container", "Dockerfile")) as f:
        text = f.read()
    extras = set(re.findall(r"'\.\[([a-z]+)\]'", text))
    assert extras == {"gateway", "probes"} and extras <= set(project["optional-dependencies"])
    for target in re.findall(r"^FROM \S+ AS (gateway|probe)$", text, re.M):
        assert "gpu-sentinel-alarm-%s" % target in {
            i["name"] for i in yaml.safe_load(open(os.path.join(K8S, "kustomization.yaml")))["images"]
        }
    for script in re.findall(r'ENTRYPOINT \["([a-z-]+)"\]', text):
        assert script in project["scripts"]


def test_the_init_container_check_passes_with_the_configmap_and_a_filled_secret(tmp_path):
    """What the check-config init container runs, run here: the real CLI on the ConfigMap's file, the Secret's keys
    in the environment (filled), and refused, naming the key, while the Secret is still the empty example."""
    import subprocess

    init = obj("Deployment", "sentinel-gateway")["spec"]["template"]["spec"]["initContainers"][0]
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(config_text("sentinel-gateway-config", "gateway.toml"))
    args = [str(cfg) if a == "/etc/sentinel/gateway.toml" else a for a in init["args"]]
    secret = obj("Secret", "sentinel-gateway-secrets")["stringData"]
    cmd = [sys.executable, "-m", "host_client.gateway.cli"] + args
    base = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    ok = subprocess.run(
        cmd, env=dict(base, **dict.fromkeys(secret, "f" * 64)), capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert ok.returncode == 0 and "configuration OK" in ok.stderr, ok.stderr
    bad = subprocess.run(cmd, env=dict(base, **secret), capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert bad.returncode == 2 and list(secret)[0] in bad.stderr
