"""deploy/prometheus: the rules parse, their unit tests pass, the PrometheusRule ships the same groups,
and the Alertmanager route sends zonemedic's alerts to the agent's webhook."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from agent.runtime.http import build_app
from agent.runtime.metrics import AgentMetrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"


def promtool() -> str:
    path = shutil.which("promtool")
    assert path is not None, "promtool is missing: install the Debian package `prometheus`"
    return path


def test_rules_pass_promtool_check() -> None:
    out = subprocess.run([promtool(), "check", "rules", str(RULES)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 7 rules found" in out.stdout


def test_rule_unit_tests_pass() -> None:
    out = subprocess.run([promtool(), "test", "rules", "rules.test.yaml"], cwd=RULES.parent,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_a_broken_rule_fails_the_unit_tests(tmp_path: Path) -> None:
    """The unit tests can fail: a split alert that needs three zones misses the two-zone job."""
    broken = RULES.read_text().replace("zonemedic:job_zones:count > 1", "zonemedic:job_zones:count > 2")
    assert broken != RULES.read_text()
    (tmp_path / "rules.yaml").write_text(broken)
    shutil.copy(RULES.parent / "rules.test.yaml", tmp_path / "rules.test.yaml")
    out = subprocess.run([promtool(), "test", "rules", "rules.test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode != 0
    assert "TrainingJobSplitAcrossZones" in out.stdout + out.stderr


def test_prometheus_rule_resource_ships_the_same_groups() -> None:
    resource = yaml.safe_load((ROOT / "deploy" / "base" / "prometheusrule.yaml").read_text())
    assert resource["kind"] == "PrometheusRule"
    assert resource["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


def test_every_alert_is_routed_to_the_agent_webhook() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    assert {a["alert"] for a in alerts} == {
        "TrainingJobSplitAcrossZones", "TrainingJobGPUUtilizationDrop", "CiliumPolicyDrops",
    }
    route = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alertmanager-route.yaml").read_text())
    [sub] = route["route"]["routes"]
    assert sub["matchers"] == ['zonemedic = "true"']
    assert all(a["labels"]["zonemedic"] == "true" for a in alerts)
    [receiver] = [r for r in route["receivers"] if r["name"] == sub["receiver"]]
    [hook] = receiver["webhook_configs"]
    path = "/" + hook["url"].split("/", 3)[3]
    app = build_app(metrics=AgentMetrics(), readiness=dict)
    assert path in {getattr(route, "path", None) for route in app.routes}
