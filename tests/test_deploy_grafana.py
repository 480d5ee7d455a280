"""deploy/grafana: the dashboard reads only metrics a real gateway and a real probe export (scraped live here: the
names change as the code does), every query is valid PromQL (promtool checks it as a rule), the JSON is one
Grafana imports (unique panel ids, a grid position, the datasource variable); the contact point posts to an
endpoint the gateway serves."""

import json
import os
import re
import shutil
import subprocess

import deploy_live
import pytest
import yaml
from deploy_live import ROOT

DASH = os.path.join(ROOT, "deploy", "grafana", "sentinel-dashboard.json")
CONTACT = os.path.join(ROOT, "deploy", "grafana", "provisioning", "sentinel-contact-point.yaml")


def dashboard():
    with open(DASH) as f:
        return json.load(f)


def exprs(d):
    out = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
    out += [v["query"]["query"] for v in d["templating"]["list"] if isinstance(v.get("query"), dict)]
    out += [a["expr"] for a in d["annotations"]["list"]]
    return out


def as_promql(expr):
    """Grafana's variables replaced by what they stand for, so promtool can parse the query."""
    expr = expr.replace("$__rate_interval", "1m").replace("$gateway", ".*").replace("$node", ".*")
    m = re.match(r"label_values\((\w+), \w+\)$", expr)
    return m.group(1) if m else expr


def test_dashboard_structure():
    d = dashboard()
    assert d["uid"] and d["title"] and d["schemaVersion"] >= 36
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    assert {v["name"] for v in d["templating"]["list"]} >= {"datasource", "gateway", "node"}
    for p in d["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert p["targets"] and len({t["refId"] for t in p["targets"]}) == len(p["targets"])
    titles = [p["title"] for p in d["panels"]]
    assert titles.count("Gateway") == 1 and titles.count("Probes") == 1


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    return deploy_live.live_metric_names(tmp_path_factory.mktemp("live"))


def test_every_metric_on_the_dashboard_is_exported(live):
    exported = live["gateway"] | live["probe"]
    used = set()
    for e in exprs(dashboard()):
        for name in re.findall(r"\bsentinel_[a-z0-9_]+", e):
            used.add(re.sub(r"_bucket$", "", name) if name.endswith("_bucket") else name)
    assert len(used) >= 20
    assert not sorted(used - exported), "the dashboard reads metrics nothing exports: %s" % sorted(used - exported)
    # both halves are on it
    assert used & live["gateway"] and used & live["probe"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_every_dashboard_query_is_valid_promql(tmp_path):
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": "dashboard:query_%d" % i, "expr": as_promql(e)} for i, e in enumerate(exprs(dashboard()))
                ],
            }
        ]
    }
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump(rules))
    p = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def test_contact_point_posts_to_the_gateways_grafana_endpoint(tmp_path):
    with open(CONTACT) as f:
        cp = yaml.safe_load(f)
    assert cp["apiVersion"] == 1
    recv = cp["contactPoints"][0]["receivers"][0]
    assert recv["type"] == "webhook" and recv["disableResolveMessage"] is False
    assert recv["settings"]["httpMethod"] == "POST" and recv["settings"]["maxAlerts"] <= 1000
    path = "/" + recv["settings"]["url"].split("/", 3)[3]
    # a real gateway process: Grafana's version "1" body is understood (not 404, not refused as a bad version)
    gw, url = deploy_live.start_gateway(tmp_path, "http://127.0.0.1:1", "k", "s" * 32)
    try:
        code, text = deploy_live.post(url + path, json.dumps({"version": "1", "status": "firing", "alerts": []}))
        assert code == 200, text
    finally:
        deploy_live.stop(gw)
