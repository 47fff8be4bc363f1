"""The gang a generic group's Pod belongs to, as it is created: the group placed pod by pod.

Who calls it: `agent.admission.decision`, for a Pod subject (a group with `admit_pods: true`,
`agent.admission.subject`). Pure: the Pod, the group's settings and the group's live pods (the
watch cache's) in; what the pod is not placed for, the pod manifests of the gang, its GPUs out.
What it does not do: decide the zone, keep it (the webhook keeps the first pod's zone in the
store for the group's later pods), or read the cluster.

- Passed unchanged (`placed_through`): a pod whose controller is placed at its own creation, so
  its template already carries the pin (or said why not): a batch Job's (a JobSet's pods
  included), a training kind's (its operator's pods), a Deployment's ReplicaSet's (the pod
  carries the Deployment controller's `pod-template-hash` label); a pod created bound to a node
  (`spec.nodeName`: no scheduler places it). A StatefulSet's, a bare
  ReplicaSet's, any other controller's and a bare Pod are placed.
- The gang (`gang_manifests`): the group's live pods (they are the cache's, grouped by
  `agent.topology.jobs.group_jobs` with the pod) and the pod, and, when the group says its size
  (`size`: pods in all, coordinator included), the pods still to come, modelled so the decision
  checks their flows: a coordinator when none is known yet (the group's selector and
  `coordinator` labels), then workers (the selector and `workers` labels); a modelled pod takes
  the pod's spec (service account, ports), with its resources when the pod is a worker like it
  and without when the pod is the coordinator. Without `size` the gang is what is known: the live
  pods and the pod (a lone first pod is still placed and its zone kept: the group is a gang by
  its settings, and its later pods follow).
- Its GPUs (`gang_gpus`): the modelled pods' requests, or the group's `gpus` when that is more
  (a coordinator that comes first cannot say what its workers will ask for).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.admission.documents import json_copy
from agent.admission.subject import MAX_PODS, Subject
from agent.model.cluster import Pod
from agent.model.workload import BATCH_JOB, REPLICA_SET, WORKLOADS
from agent.topology.jobs import group_jobs

TEMPLATE_HASH = "pod-template-hash"  # the Deployment controller's label on its ReplicaSets' pods
_PLACED_OWNERS = frozenset({BATCH_JOB.kind, *(w.kind for w in WORKLOADS)})


def placed_through(pod: Mapping[str, Any]) -> str | None:
    """Why the pod is left as it is (its controller is placed at its own creation, or it is
    created bound to a node), or None."""
    spec = pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    if node:
        return f"it is created bound to node {node} (a zone pin elsewhere would make it fail)"
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    for ref in meta.get("ownerReferences") or []:
        if not isinstance(ref, Mapping) or not ref.get("controller"):
            continue
        kind, name = str(ref.get("kind") or ""), str(ref.get("name") or "")
        if kind in _PLACED_OWNERS:
            return f"its {kind} {name} is placed at its own creation (its pod template carries the pin)"
        if kind == REPLICA_SET.kind and isinstance(labels, Mapping) and TEMPLATE_HASH in labels:
            return (f"its ReplicaSet {name} is a Deployment's, placed at the Deployment's creation "
                    "(its pod template carries the pin)")  # fmt: skip
    return None


def gang_manifests(subject: Subject, planned: Sequence[dict[str, Any]], *,
                   live: Sequence[Pod]) -> list[dict[str, Any]]:  # fmt: skip
    """The pod (`planned`: its one manifest) and the pods of its gang still to come (see the
    module docstring); `live`: the live pods of its namespace."""
    group = subject.group
    if group is None or not planned:
        return list(planned)
    pod = planned[0]
    labels = pod["metadata"]["labels"]
    known = group_jobs(live, [group])
    members = [p for p in known[0].pods if p.name != pod["metadata"]["name"]] if known else []
    missing = (group.size or 0) - len(members) - 1
    if missing <= 0:
        return list(planned)
    if missing > MAX_PODS:
        return []
    worker = _matches(labels, group.workers) and not _matches(labels, group.coordinator)
    coordinator_known = (_matches(labels, group.coordinator)
                         or any(_matches(p.labels, group.coordinator) for p in members))  # fmt: skip
    out = list(planned)
    for i in range(missing):
        role = group.workers if coordinator_known or i > 0 else group.coordinator
        like = json_copy(pod)
        like["metadata"] = {"name": f"{pod['metadata']['name']}-gang-{i}",
                            "namespace": pod["metadata"]["namespace"],
                            "labels": {**group.selector, **role}}  # fmt: skip
        if not (worker and role is group.workers):
            for key in ("containers", "initContainers"):
                for container in like["spec"].get(key) or []:
                    if isinstance(container, dict):
                        container.pop("resources", None)
        out.append(like)
    return out


def gang_gpus(subject: Subject, modelled: int) -> int:
    """The GPUs the gang needs in one zone: the modelled pods', or the group's `gpus` for a
    pod-by-pod group when that is more."""
    if not subject.pod or subject.group is None or subject.group.gpus is None:
        return modelled
    return max(modelled, subject.group.gpus)


def _matches(labels: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in wanted.items())
