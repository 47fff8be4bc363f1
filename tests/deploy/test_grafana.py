"""deploy/grafana: the dashboard loads, every panel queries the datasource variable, every query
parses (promtool checks it as a recording rule) and every zonemedic metric it uses is exported."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.runtime.metrics import AgentMetrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "zonemedic.json"
# Grafana's own variables, replaced by what Grafana would put there before Prometheus sees a query.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "6h", "$__interval": "1m",
                     "$namespace": ".*"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def queries() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]


def expand(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in re.sub(r'"\$1"', "", expr), f"unknown Grafana variable in {expr!r}"
    return expr


def check_rules(tmp_path: Path, exprs: list[str]) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is missing: install the Debian package `prometheus`"
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)
    ]}]}
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    return subprocess.run([promtool, "check", "rules", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_datasource_is_a_variable() -> None:
    board = dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_the_panels_cover_what_an_operator_watches() -> None:
    text = " ".join(queries())
    for metric in ("zonemedic:job_gpu_utilization:avg", "zonemedic:job_zones:count",
                   "kube_pod_info", "hubble_drop_total", "zonemedic_incidents",
                   "zonemedic_detection_latency_seconds_bucket", "zonemedic_job_egress_usd_per_day",
                   "zonemedic_job_cross_zone_bytes_per_second", "zonemedic:cross_zone_bytes:rate5m",
                   "zonemedic_packet_drop_events_total"):
        assert metric in text, metric
    ids = [p["id"] for p in dashboard()["panels"]]
    assert len(ids) == len(set(ids))


def test_every_query_parses(tmp_path: Path) -> None:
    out = check_rules(tmp_path, [expand(e) for e in queries()])
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_broken_query_is_caught(tmp_path: Path) -> None:
    out = check_rules(tmp_path, ["sum(rate(zonemedic_findings_total[5m])"])
    assert out.returncode != 0


def test_every_zonemedic_metric_is_exported() -> None:
    exported = AgentMetrics().exposition().decode()
    names = set(re.findall(r"^# TYPE (\S+) ", exported, re.M))
    used = {m for e in queries() for m in re.findall(r"\b(zonemedic_[a-z_]+)", e)}
    assert used
    for metric in sorted(used):
        base = re.sub(r"_(bucket|sum|count|total)$", "", metric)
        assert metric in names or base in names, f"{metric} is not exported by the agent"


@pytest.mark.parametrize("recorded", ["zonemedic:job_gpu_utilization:avg", "zonemedic:job_zones:count",
                                      "zonemedic:cross_zone_bytes:rate5m"])
def test_recorded_series_the_dashboard_reads_are_shipped(recorded: str) -> None:
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules.yaml").read_text())
    assert recorded in {r.get("record") for g in rules["groups"] for r in g["rules"]}
