"""Small builders for scheduler test tables: nodes and pods as Kubernetes JSON dicts."""

from __future__ import annotations

from typing import Any

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
ZONE = "topology.kubernetes.io/zone"


def node(
    name: str,
    *,
    zone: str = "a",
    cpu: str = "8",
    memory: str = "32Gi",
    gpu: int = 0,
    pods: int = 110,
    taints: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    allocatable: dict[str, Any] = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpu:
        allocatable["nvidia.com/gpu"] = str(gpu)
    all_labels = {"kubernetes.io/hostname": name, ZONE: zone, **(labels or {})}
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": all_labels},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


def pod(
    name: str,
    *,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    cpu: str = "1",
    memory: str = "1Gi",
    gpu: int = 0,
    node_name: str | None = None,
    phase: str = "Running",
    **spec: Any,
) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    body_spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "x", "resources": {"requests": requests}}],
        **spec,
    }
    if node_name:
        body_spec["nodeName"] = node_name
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": body_spec,
        "status": {"phase": phase if node_name else "Pending"},
    }
