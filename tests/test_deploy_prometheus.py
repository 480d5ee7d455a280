"""deploy/prometheus and deploy/alertmanager, checked by the real tools: promtool (Debian's `prometheus` package)
checks the rules and the scrape configuration and runs every rule's unit tests; amtool checks the receiver
snippet and routes every rule's labels; every sentinel_* metric a rule reads is one the code really exports (a
live gateway, probe and emulator are scraped), and every severity is one the gateway maps to a level."""

import glob
import os
import re
import shutil
import subprocess

import deploy_live
import pytest
import yaml
from deploy_live import ROOT

PROM = os.path.join(ROOT, "deploy", "prometheus")
AM_CFG = os.path.join(ROOT, "deploy", "alertmanager", "alertmanager.yml")
RULE_FILES = sorted(glob.glob(os.path.join(PROM, "rules", "*.rules.yml")))
TEST_FILES = sorted(glob.glob(os.path.join(PROM, "tests", "*.test.yml")))
PROMTOOL = shutil.which("promtool")
AMTOOL = shutil.which("amtool")
need_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not installed (tools/install-system-deps.sh installs Debian's prometheus package)",
)
need_amtool = pytest.mark.skipif(AMTOOL is None, reason="amtool not installed (prometheus-alertmanager)")


def rules():
    out = []
    for path in RULE_FILES:
        with open(path) as f:
            for g in yaml.safe_load(f)["groups"]:
                for r in g["rules"]:
                    out.append((os.path.basename(path), r))
    return out


def alerts():
    return [r for _f, r in rules() if "alert" in r]


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
    return p.returncode, p.stdout + p.stderr


def test_there_are_rules_and_unit_tests():
    assert len(RULE_FILES) >= 2 and len(TEST_FILES) == len(RULE_FILES)
    assert len(alerts()) >= 20


@need_promtool
@pytest.mark.parametrize("path", RULE_FILES, ids=os.path.basename)
def test_promtool_check_rules(path):
    rc, out = run([PROMTOOL, "check", "rules", path])
    assert rc == 0, out
    assert "SUCCESS" in out


@need_promtool
@pytest.mark.parametrize("path", TEST_FILES, ids=os.path.basename)
def test_promtool_test_rules(path):
    rc, out = run([PROMTOOL, "test", "rules", os.path.basename(path)], cwd=os.path.dirname(path))
    assert rc == 0, out
    assert "SUCCESS" in out and "FAILED" not in out


@need_promtool
def test_promtool_check_config():
    rc, out = run([PROMTOOL, "check", "config", os.path.join(PROM, "prometheus.yml")])
    assert rc == 0, out


def test_every_rule_has_a_unit_test_that_fires_it():
    """At least one promtool case per alert in which it fires, and one per recording rule; each unit-test file
    loads the rule file of the same name."""
    fired, recorded = set(), set()
    for path in TEST_FILES:
        with open(path) as f:
            t = yaml.safe_load(f)
        stem = os.path.basename(path).replace(".test.yml", "")
        assert t["rule_files"] == ["../rules/%s.rules.yml" % stem]
        for case in t["tests"]:
            for a in case.get("alert_rule_test", []):
                if a.get("exp_alerts"):
                    fired.add(a["alertname"])
            for e in case.get("promql_expr_test", []):
                recorded.update(re.findall(r"[a-z_]+:[a-z_]+:[a-z_]+", e["expr"]))
    names = [r["alert"] for r in alerts()]
    assert len(names) == len(set(names)), "alert names must be unique"
    missing = [n for n in names if n not in fired]
    assert not missing, "alerts without a unit test that fires them: %s" % missing
    records = [r["record"] for _f, r in rules() if "record" in r]
    assert records and not [r for r in records if r not in recorded]


def test_every_alert_has_a_severity_the_gateway_maps_and_a_summary():
    from host_client.gateway.config import Config

    levels = Config().am_levels  # the gateway's defaults: critical -> P0 (2), warning -> P1 (1)
    for r in alerts():
        sev = r["labels"]["severity"]
        if r["labels"].get("sentinel_route") == "deadman":
            assert sev == "none"  # never to a terminal: the receiver routes it to the dead-man service
            continue
        assert sev in ("critical", "warning"), r["alert"]
        assert levels[sev] == {"critical": 2, "warning": 1}[sev]
        assert r["annotations"]["summary"], r["alert"]
        assert "\n" not in r["annotations"]["summary"]


def test_example_gateway_config_maps_the_same_severities():
    from host_client.gateway.config import load_config

    os.environ.setdefault("SENTINEL_SECRET_MACHINE_ROOM", "x" * 32)
    os.environ.setdefault("SENTINEL_SECRET_OFFICE", "y" * 32)
    os.environ.setdefault("SENTINEL_INGEST_TOKEN", "z" * 32)
    cfg = load_config(os.path.join(ROOT, "examples", "gateway.toml"))
    assert cfg.am_levels["critical"] == 2 and cfg.am_levels["warning"] == 1


def _am_config(tmp_path):
    tok = tmp_path / "sentinel-gateway.token"
    tok.write_text("t0ken\n")
    text = open(AM_CFG).read().replace("/etc/alertmanager/sentinel-gateway.token", str(tok))
    p = tmp_path / "alertmanager.yml"
    p.write_text(text)
    return str(p)


@need_amtool
def test_amtool_check_config(tmp_path):
    rc, out = run([AMTOOL, "check-config", _am_config(tmp_path)])
    assert rc == 0 and "SUCCESS" in out, out


def _route(cfg, labels):
    """The receiver(s) amtool says Alertmanager picks for this label set."""
    p = subprocess.run(
        [AMTOOL, "config", "routes", "test", "--config.file=" + cfg] + ["%s=%s" % kv for kv in sorted(labels.items())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    return [r for w in p.stdout.split() for r in w.split(",")]


@need_amtool
def test_every_alert_routes_to_the_receiver_its_path_needs(tmp_path):
    cfg = _am_config(tmp_path)
    # A path alert always takes the pager and the second gateway; one about a terminal also the normal gateway
    # (which routes it around that terminal); one about a gateway never the normal gateway.
    want = {
        ("deadman", None): ["deadman"],
        ("fallback", "terminal"): ["sentinel", "sentinel-fallback", "pager"],
        ("fallback", "gateway"): ["sentinel-fallback", "pager"],
        ("escalation", None): ["pager"],
        (None, None): ["sentinel"],
    }
    for r in alerts():
        lab = r["labels"]
        got = _route(cfg, dict(lab, alertname=r["alert"]))
        assert got == want[(lab.get("sentinel_route"), lab.get("sentinel_about"))], (r["alert"], got)
    assert _route(cfg, {"alertname": "Foo", "severity": "info"}) == ["null"]


def test_the_pager_receiver_is_no_terminal_and_no_gateway():
    with open(AM_CFG) as f:
        am = yaml.safe_load(f)
    (pager,) = [r for r in am["receivers"] if r["name"] == "pager"]
    for w in pager["webhook_configs"]:
        assert "/api/v1/" not in w["url"] and w["send_resolved"] is True


def test_receivers_send_resolved_and_do_not_regroup():
    with open(AM_CFG) as f:
        am = yaml.safe_load(f)
    assert am["route"]["group_by"] == ["..."]
    for rc in am["receivers"]:
        for w in rc.get("webhook_configs", []):
            if rc["name"].startswith("sentinel"):
                assert w["url"].endswith("/api/v1/alertmanager")
                assert w["send_resolved"] is True and w["max_alerts"] <= 1000
                assert "authorization" in w["http_config"]


@pytest.fixture(scope="module")
def live_metric_names(tmp_path_factory):
    return deploy_live.live_metric_names(tmp_path_factory.mktemp("live"))


def _firmware_names():
    """The box's families: the one /metrics schema both shells write (sentinel_core/metrics.py, one family() call
    per family with its TYPE line as a literal; the box runs it under MicroPython)."""
    with open(os.path.join(ROOT, "firmware", "lib", "sentinel_core", "metrics.py")) as f:
        text = f.read()
    names = set(re.findall(r"# TYPE (sentinel_[a-z0-9_]+) (?:counter|gauge)", text))
    assert len(names) >= 15, names  # the schema's families, not an empty match
    return names


def test_every_sentinel_metric_a_rule_reads_is_exported(live_metric_names):
    exported = set().union(*live_metric_names.values()) | _firmware_names()
    used = set()
    for _f, r in rules():
        used.update(re.findall(r"\bsentinel_[a-z0-9_]+", r["expr"]))
    assert used
    assert not sorted(used - exported), "rules read metrics nothing exports: %s" % sorted(used - exported)


def test_every_dcgm_field_a_rule_reads_is_in_the_counters_file():
    with open(os.path.join(ROOT, "deploy", "dcgm-exporter", "sentinel-counters.csv")) as f:
        rows = [ln.split(",") for ln in f if ln.strip() and not ln.startswith("#")]
    fields = {r[0].strip() for r in rows}
    assert all(r[1].strip() in ("gauge", "counter") and len(r) >= 3 for r in rows)
    used = set()
    for _f, r in rules():
        used.update(re.findall(r"\bDCGM_FI_[A-Z0-9_]+", r["expr"]))
    assert used and not sorted(used - fields)


def test_dcgm_fatal_xids_are_the_probes():
    """The same XID is P0 whether the probe reads it from the kernel log or Prometheus from dcgm-exporter."""
    from host_client.probes.xid import classify

    fatal = [r for r in alerts() if r["alert"] == "GPUXidFatal"][0]
    listed = set(map(int, re.search(r'xid=~"([0-9|]+)"', fatal["expr"]).group(1).split("|")))
    assert listed == {x for x in range(1024) if classify(x) == "fatal"}
    warning = [r for r in alerts() if r["alert"] == "GPUXidError"][0]
    assert set(map(int, re.search(r'xid!~"([0-9|]+)"', warning["expr"]).group(1).split("|"))) == listed
