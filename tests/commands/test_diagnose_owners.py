"""`zonemedic diagnose --output json` names who owns the objects a fix would write, from a
kubectl dump of the twin's `gitops` scenario (the lab's coordinator Deployment synced by Argo CD):
the Deployment is the Argo CD application's, found above the coordinator pod's ReplicaSet; a dump
without the workload objects cannot tell, and says null."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from agent.twin import kubeconfig
from agent.twin.cluster import TwinCluster
from agent.twin.resources import lookup
from tests.twin.twin_fixtures import fast

GROUPS = {"groups": [{"name": "llm-pretrain", "namespace": "ml-lab", "selector": {"app": "llm-pretrain"},
                      "coordinator": {"role": "coordinator"}, "workers": {"role": "worker"},
                      "ports": [29500]}]}  # fmt: skip
WITH_WORKLOADS = "nodes,namespaces,pods,deployments,replicasets,jobs,ciliumnetworkpolicies"
WITHOUT = "nodes,namespaces,pods,ciliumnetworkpolicies"


def diagnose(tmp_path: Path, dump: str) -> dict[str, Any]:
    snapshot = tmp_path / "cluster.yaml"
    snapshot.write_text(dump)
    config = tmp_path / "groups.yaml"
    config.write_text(yaml.safe_dump(GROUPS))
    script = Path(sys.executable).parent / "zonemedic"
    done = subprocess.run([str(script), "diagnose", str(snapshot), "--config", str(config),
                           "--output", "json"], capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    (finding,) = json.loads(done.stdout)["findings"]
    return dict(finding)


def test_diagnose_names_the_owners_of_what_the_fix_writes(tmp_path: Path) -> None:
    with TwinCluster(fast("gitops")) as cluster:
        path = kubeconfig.write(tmp_path / "kubeconfig", cluster.serve_api().url)

        def bound() -> bool:
            found = cluster.store.list(lookup("pods"), namespace="ml-lab")[0]
            return sum(1 for p in found if p["status"].get("phase") == "Running") >= 5

        assert cluster.wait_until(bound, timeout=30)
        env = {**os.environ, "KUBECONFIG": str(path), "KUBECACHEDIR": str(tmp_path / "cache")}
        dumps = [subprocess.run(["kubectl", "get", kinds, "-A", "-o", "yaml"], env=env,
                                capture_output=True, text=True, timeout=60, check=True).stdout
                 for kinds in (WITH_WORKLOADS, WITHOUT)]  # fmt: skip
    (tmp_path / "full").mkdir()
    finding = diagnose(tmp_path / "full", dumps[0])
    assert finding["verdict"] == "zone_split_blocked" and finding["remediable"] is True
    owners = {(o["kind"], o["name"]): o["owner"] for o in finding["owners"]}
    coordinator = owners[("Deployment", "rendezvous")]
    assert (coordinator["kind"], coordinator["name"], coordinator["durable"]) == ("argocd", "lab", False)
    assert coordinator["says"].startswith("managed by Argo CD application lab: this live fix lasts "
                                          "until its next sync")
    assert ("Job", "llm-workers") in owners  # the workers' batch Job, the group's other workload
    (tmp_path / "bare").mkdir()
    assert diagnose(tmp_path / "bare", dumps[1])["owners"] is None  # nothing to tell it from
