"""The scheduler tables' nodes and pods: `tests.support.objects` sized in CPU, memory and GPUs."""

from __future__ import annotations

from typing import Any

from tests.support import objects

GPU_TAINT = objects.GPU_TAINT
ZONE = objects.ZONE


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
    """A node sized for the scheduler's tables (untainted unless `taints` says so)."""
    return objects.node(name, zone, cpu=cpu, memory=memory, pods=pods, gpus=gpu, taints=taints or [],
                        cordoned=unschedulable, capacity=True, kind=False, **(labels or {}))


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
    """A pod requesting `cpu`, `memory` and `gpu`; extra keywords are spec fields."""
    return objects.pod(
        name, ns=namespace, labels=labels, node_name=node_name, spec=spec, kind=False,
        containers=[objects.container(image="x", cpu=cpu, memory=memory, gpus=gpu, limits=False)],
        phase=phase if node_name else "Pending",
    )
