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
from tests.support import objects

REPO = Path(__file__).resolve().parents[2]
R = {r.name: r for r in RESOURCES}
JOB = JobRef(JobKind.PYTORCH, "train", "gpt-small")
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def gpt_pod(name: str, rtype: str, node_name: str, zone: str) -> dict[str, Any]:
    """A pod of the world's PyTorchJob `gpt-small` (index: the name's last digit), labelled
    `zone=<zone>`."""
    return objects.job_pod(
        "PyTorchJob", "gpt-small", rtype, int(name[-1]), name=name, ns="train", node_name=node_name,
        extra={"zone": zone}, coordinator=rtype == "master",
        containers=[objects.container(name="pytorch", gpus=1, request_gpus=True,
                                     ports=[("pytorchjob-port", 23456, "TCP")])],
    )


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
    return [gpt_pod("gpt-small-master-0", "master", "gpu-b1", "zone-b")] + [
        gpt_pod(f"gpt-small-worker-{i}", "worker", "gpu-a1", "zone-a") for i in range(3)
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
        self.parts = parts = Parts(
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
        self.load("nodes", [objects.node(n, z, gpus=8, cpu=None, hostname=False, taints=[]) for n, z in (("gpu-a1", "zone-a"), ("gpu-b1", "zone-b"))])
        self.load("namespaces", [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "train"}}])
        self.load("ciliumnetworkpolicies.v2.cilium.io", [POLICY])
        self.load("pytorchjobs.v1.kubeflow.org", [JOB_OBJECT])
        self.load("pods", split_pods())

    def load(self, resource: str, items: list[dict[str, Any]]) -> Change:
        r = R[resource]
        return self.cache.replace(r, [slimmer(r)(copy.deepcopy(o)) for o in items])

    def incidents(self, **query: Any) -> list[Any]:
        return self.store.list_incidents(IncidentQuery(cluster="prod", **query)).incidents
