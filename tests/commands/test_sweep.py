"""`zonemedic sweep --once` as a process against the twin: JSON summary, incidents recorded once,
table output, and a clear error when the cluster cannot be reached."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from agent.twin import cluster as twin_cluster
from agent.twin import kubeconfig
from tests.twin import twin_fixtures as fixtures

REPO = Path(__file__).resolve().parents[2]


def sweep(config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZONEMEDIC_")}
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "sweep", "--once", "--config", str(config), *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


@pytest.fixture
def config(tmp_path: Path) -> Iterator[Path]:
    cluster = twin_cluster.TwinCluster(fixtures.fast("seed-blocked")).start()
    try:
        api = cluster.serve_api()
        kube = kubeconfig.write(tmp_path / "kubeconfig", api.url)
        assert cluster.wait_until(lambda: len([p for p in cluster.store.list(twin_cluster.lookup("pods"), namespace="ml")[0] if p["spec"].get("nodeName")]) == 5, timeout=30)
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump({
            "cluster_name": "twin",
            "data_dir": str(tmp_path),
            "kubernetes": {"kubeconfig": str(kube)},
            "database": {"url": f"sqlite:///{tmp_path / 'zm.db'}"},
            "playbooks_dir": str(REPO / "playbooks"),
        }))
        yield path
    finally:
        cluster.stop()


def test_sweep_once_json_records_the_incident_once(config: Path) -> None:
    first = sweep(config, "--output", "json")
    assert first.returncode == 0, first.stderr
    summary: dict[str, Any] = orjson.loads(first.stdout)
    (finding,) = [f for f in summary["findings"] if f["job"]["name"] == "llm-finetune"]
    assert finding["verdict"] == "zone_split_blocked"
    assert finding["target_zone"] == "us-east-1a"
    assert summary["incidents_opened"] == 1
    assert summary["metrics"] == "not configured"
    assert summary["digests"] == 1  # daily-digest.yaml
    again = orjson.loads(sweep(config, "--output", "json", "--no-digest").stdout)
    assert again["incidents_opened"] == 0  # re-detection, not a new incident
    assert "digests" not in again
    table = sweep(config)
    assert table.returncode == 0
    assert "llm-finetune" in table.stdout and "zone_split_blocked" in table.stdout


def test_sweep_needs_once_and_a_reachable_cluster(tmp_path: Path) -> None:
    kube = kubeconfig.write(tmp_path / "kubeconfig", "http://127.0.0.1:9")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"kubernetes": {"kubeconfig": str(kube)}, "data_dir": str(tmp_path)}))
    no_once = subprocess.run([sys.executable, "-m", "agent.cli", "sweep", "--config", str(path)], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert no_once.returncode == 2 and "--once" in no_once.stderr
    down = sweep(path, "--sync-timeout", "1")
    assert down.returncode == 1
    assert "Traceback" not in down.stderr


@pytest.mark.parametrize(
    ("scenario", "running", "kind", "name", "verdict", "coordinator"),
    [
        ("trainjob-mpi", 5, "TrainJob", "mpi-pretrain", "zone_split_blocked", "mpi-pretrain-launcher-0-0-"),
        ("jobset", 4, "JobSet", "pytorch-ddp", "zone_split_degraded", "pytorch-ddp-workers-0-0-"),
    ],
)
def test_a_sweep_records_trainjobs_and_jobsets_and_incidents_lists_them(
    tmp_path: Path, scenario: str, running: int, kind: str, name: str, verdict: str, coordinator: str,
) -> None:
    cluster = twin_cluster.TwinCluster(fixtures.fast(scenario)).start()
    try:
        kube = kubeconfig.write(tmp_path / "kubeconfig", cluster.serve_api().url)
        assert cluster.wait_until(lambda: sum(
            1 for p in cluster.store.list(twin_cluster.lookup("pods"), namespace="ml")[0]
            if p["spec"].get("nodeName") and p["status"].get("phase") == "Running") >= running, timeout=30)
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump({
            "cluster_name": "twin", "data_dir": str(tmp_path), "kubernetes": {"kubeconfig": str(kube)},
            "database": {"url": f"sqlite:///{tmp_path / 'zm.db'}"}, "playbooks_dir": str(REPO / "playbooks"),
        }))
        done = sweep(config, "--output", "json", "--no-digest")
    finally:
        cluster.stop()
    assert done.returncode == 0, done.stderr
    (finding,) = orjson.loads(done.stdout)["findings"]
    assert finding["job"] == {"kind": kind, "namespace": "ml", "name": name}
    assert finding["verdict"] == verdict and finding["coordinator"]["pod"].startswith(coordinator)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZONEMEDIC_")}
    listed = subprocess.run(
        [sys.executable, "-m", "agent.cli", "incidents", "list", "--config", str(config),
         "--job", f"ml/{name}", "--output", "json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr
    (incident,) = orjson.loads(listed.stdout)["incidents"]
    assert (incident["kind"], incident["name"], incident["verdict"]) == (kind, name, verdict)
