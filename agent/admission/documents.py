"""The plain JSON documents the admission decision builds and reads: copies, paths, and the nodes
and GPU use as the remediation planner reads them.

Who calls it: `agent.admission.decision` and `agent.admission.pod_gang`. Pure helpers over JSON
values (what the API server sent and the watch cache's parsed nodes); no decision is made here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from agent.model.cluster import GPU_RESOURCE


def without_owners(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object planned as itself: a TrainJob's JobSet is placed as a JobSet at its creation."""
    out = dict(obj)
    meta = dict(obj.get("metadata") or {})
    meta.pop("ownerReferences", None)
    out["metadata"] = meta
    return out


def json_copy(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a JSON object (as the API server sent it: JSON values only)."""
    out: dict[str, Any] = orjson.loads(orjson.dumps(obj))
    return out


def at_path(obj: Any, path: Sequence[str | int]) -> dict[str, Any]:
    node = obj
    for step in path:
        node = node[step]
    assert isinstance(node, dict)
    return node


def node_dict(node: Any) -> dict[str, Any]:
    """A parsed node as the planner reads nodes (labels, taints, cordon, GPU allocatable)."""
    spec: dict[str, Any] = {}
    if node.taints:
        spec["taints"] = [{"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})}
                          for t in node.taints]  # fmt: skip
    if node.unschedulable:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": dict(node.labels)}, "spec": spec,
            "status": {"allocatable": {GPU_RESOURCE: str(node.gpu_allocatable)}}}  # fmt: skip


def usage_pod(node: str, gpus: int) -> dict[str, Any]:
    """What the pods bound to `node` use, as one pod (the cache counts GPUs per node)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "", "name": f"in-use-on-{node}"},
            "spec": {"nodeName": node,
                     "containers": [{"name": "x", "resources": {"requests": {GPU_RESOURCE: str(gpus)}}}]},
            "status": {"phase": "Running"}}  # fmt: skip
