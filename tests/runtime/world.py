"""A pipeline world for the runtime tests: the real pipeline, core and store (SQLite), fed through
the cache with a PyTorchJob split across zones behind a zone-boundary policy.

Tests build one with the `world` fixture (tests/runtime/conftest.py) or `World(tmp_path)`, change
what the cache holds with `load`, move `now`, and read incidents back from the store.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.model.incident import IncidentQuery
from agent.model.job import JobRef
from agent.model.workload import JobKind
from agent.playbook.loader import load_playbooks
from agent.runtime.leader import AlwaysLeader
from agent.runtime.metrics import AgentMetrics
from agent.runtime.parts import Parts
from agent.runtime.root import build_pipeline
from agent.settings import PrometheusSettings, Settings
from agent.sources.cache import ClusterCache
from agent.sources.change import Change
from agent.sources.egress import EgressMeter
from agent.sources.kubeapi import KubeApi
from agent.sources.prometheus import PrometheusSource
from agent.sources.resources import RESOURCES
from agent.sources.slim import slimmer
from agent.store.migrate import upgrade_on_start

REPO = Path(__file__).resolve().parents[2]
R = {r.name: r for r in RESOURCES}
JOB = JobRef(JobKind.PYTORCH, "train", "gpt-small")
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def node(name: str, zone: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


def pod(name: str, rtype: str, node_name: str, zone: str) -> dict[str, Any]:
    labels = {
        "training.kubeflow.org/job-name": "gpt-small",
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-type": rtype,
        "training.kubeflow.org/replica-index": name[-1],
        "zone": zone,
    }
    if rtype == "master":
        labels["training.kubeflow.org/job-role"] = "master"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "train", "labels": labels,
                     "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "gpt-small", "controller": True}]},
        "spec": {"nodeName": node_name, "containers": [{"name": "pytorch",
                 "ports": [{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}],
                 "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"},
    }


POLICY = {
    "apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
    "metadata": {"name": "zone-b-only", "namespace": "train"},
    "spec": {"endpointSelector": {"matchLabels": {"zone": "zone-b"}},
             "ingress": [{"fromEndpoints": [{"matchLabels": {"zone": "zone-b"}}]}]},
}
JOB_OBJECT = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
              "metadata": {"name": "gpt-small", "namespace": "train", "uid": "job-uid-1", "labels": {"team": "llm"}},
              "spec": {"pytorchReplicaSpecs": {}}, "status": {"conditions": []}}


def split_pods() -> list[dict[str, Any]]:
    return [pod("gpt-small-master-0", "master", "gpu-b1", "zone-b")] + [
        pod(f"gpt-small-worker-{i}", "worker", "gpu-a1", "zone-a") for i in range(3)
    ]


class World:
    def __init__(self, tmp_path: Path, *, prometheus: bool | str = False) -> None:
        settings = Settings(cluster_name="prod", data_dir=str(tmp_path), playbooks_dir=str(REPO / "playbooks"))
        url = prometheus if isinstance(prometheus, str) else "http://127.0.0.1:9"
        settings = replace(
            settings,
            database=replace(settings.database, url=f"sqlite:///{tmp_path / 'zm.db'}"),
            diagnosis=replace(settings.diagnosis, pod_zone_label="zone"),
            # no API server here (the cache is fed directly): the plan preview reads one
            remediation=replace(settings.remediation, preview=False),
            prometheus=PrometheusSettings(url=url, retries=0) if prometheus else settings.prometheus,
        )
        self.store = upgrade_on_start(settings)
        self.cache = ClusterCache()
        self.now = NOW
        source = PrometheusSource(settings.prometheus) if prometheus else None
        self.metrics = AgentMetrics()
        parts = Parts(
            settings=settings,
            playbooks=load_playbooks(REPO / "playbooks"),
            metrics=self.metrics,
            cache=self.cache,
            api=KubeApi(None),
            prometheus=source,
            is_leader=lambda: self.leading,
            egress=EgressMeter(source, settings.egress) if source is not None else None,
        )
        self.leading = AlwaysLeader().is_leader()
        self.pipeline = build_pipeline(parts, self.store, now=lambda: self.now)
        self.load("nodes", [node("gpu-a1", "zone-a"), node("gpu-b1", "zone-b")])
        self.load("namespaces", [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "train"}}])
        self.load("ciliumnetworkpolicies.v2.cilium.io", [POLICY])
        self.load("pytorchjobs.v1.kubeflow.org", [JOB_OBJECT])
        self.load("pods", split_pods())

    def load(self, resource: str, items: list[dict[str, Any]]) -> Change:
        r = R[resource]
        return self.cache.replace(r, [slimmer(r)(copy.deepcopy(o)) for o in items])

    def incidents(self, **query: Any) -> list[Any]:
        return self.store.list_incidents(IncidentQuery(cluster="prod", **query)).incidents
