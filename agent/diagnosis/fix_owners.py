"""Who owns the objects a finding's fix would write, read from what the diagnosis was given.

Called by `zonemedic diagnose` (offline, on a dump) for each finding with a fix (a remediable
verdict). The objects a fix writes are the job's own object for a training job (PyTorchJob,
TrainJob, JobSet, ...) and, for a generic group, the workloads at the top of its pods' controller
chains (a Deployment above its ReplicaSet, a batch Job); each one's owner is what the snapshot's
parse read from it (`agent.model.ownership`: the GitOps markers, a pipeline, field managers,
kubectl's last-applied annotation, a controlling owner). An object the dump does not hold is left
out: the dump cannot tell its owner; None when it holds none of them. Pure: it reads the parsed
state only, never the cluster.
"""

from __future__ import annotations

from agent.diagnosis.diagnose import Diagnosis
from agent.model.cluster import ClusterState, OwnedObject, OwnerRef
from agent.model.finding import REMEDIABLE_VERDICTS, Finding
from agent.model.ownership import ObjectOwnership
from agent.model.workload import JobKind


def fix_owners(finding: Finding, diagnosis: Diagnosis,
               state: ClusterState) -> tuple[ObjectOwnership, ...] | None:  # fmt: skip
    """The owners of the objects `finding`'s fix would write that the state holds (see the
    module docstring); None without a fix or when the state holds none of them."""
    if finding.verdict not in REMEDIABLE_VERDICTS:
        return None
    ref = finding.job
    out: list[ObjectOwnership] = []
    if ref.kind is not JobKind.GROUP:
        obj = state.job_objects.get((ref.kind, ref.namespace, ref.name))
        if obj is not None and obj.ownership is not None:
            out.append(ObjectOwnership(obj.kind.value, obj.namespace, obj.name, obj.ownership))
        return tuple(out) or None
    job = diagnosis.job(ref)
    seen: set[tuple[str, str]] = set()
    for pod in job.pods if job is not None else ():
        top = _top(state, pod.namespace, pod.controller)
        if top is None or top.ownership is None or (top.kind, top.name) in seen:
            continue
        seen.add((top.kind, top.name))
        out.append(ObjectOwnership(top.kind, top.namespace, top.name, top.ownership))
    return tuple(out) or None


def _top(state: ClusterState, namespace: str, ref: OwnerRef | None) -> OwnedObject | None:
    """The last object of a controller chain the state holds (a Deployment above its
    ReplicaSet), from a pod's controlling ownerReference."""
    found: OwnedObject | None = None
    seen = 0
    while ref is not None and seen < 8:  # an owner chain is short; a loop in a dump is not
        obj = state.owned_objects.get((ref.kind, namespace, ref.name))
        if obj is None:
            break
        found, ref, seen = obj, obj.controller, seen + 1
    return found
