"""deploy/: the kustomize overlays render, the shipped config is valid, RBAC grants only what is needed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.settings import Settings, build

ROOT = Path(__file__).resolve().parents[1]
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def render(overlay: str) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(ROOT / "deploy" / overlay)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@needs_kubectl
@pytest.mark.parametrize("overlay", ["base", "overlays/dev", "overlays/production"])
def test_overlay_renders_with_the_agent_and_its_config(overlay: str) -> None:
    docs = render(overlay)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Deployment", "zonemedic") in kinds
    assert ("ClusterRole", "zonemedic") in kinds
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    settings = build(Settings, yaml.safe_load(config["data"]["config.yaml"]))
    assert settings.http.port == 8080
    assert settings.leader_election.namespace == "zonemedic"
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["metadata"]["namespace"] == settings.leader_election.namespace


@needs_kubectl
def test_cluster_role_writes_only_training_jobs_and_events() -> None:
    role = next(d for d in render("base") if d["kind"] == "ClusterRole")
    write_verbs = {"create", "update", "patch", "delete", "deletecollection"}
    writes = {
        (group, resource)
        for rule in role["rules"]
        if write_verbs & set(rule["verbs"])
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert writes == {
        ("", "events"),
        *{("kubeflow.org", r) for r in
          ["pytorchjobs", "tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs"]},
    }
    readable = {r for rule in role["rules"] for r in rule["resources"]}
    assert "secrets" not in readable
    assert all("*" not in rule["verbs"] and "*" not in rule["resources"] for rule in role["rules"])
