"""The guards in front of every remediation: may the leader start this approved incident now?

Who calls it: the leader's remediation executor (`agent.runtime.remediation_queue`), for each `approved`
incident before handing it to the remediator. Pure: plain data in (the incident, the job's live
objects from the watch cache, the counts the executor read), a `Clearance` out.

The rules, in order:
1. A job in a protected namespace is never touched: REFUSE (the incident is `refused` with the
   reason: it stays open, nothing written).
2. A Kueue-managed job is never touched (suspending it would fight Kueue's own admission): the
   job, or any of its pods, carries the `kueue.x-k8s.io/queue-name` label or annotation, or a
   pod carries `kueue.x-k8s.io/managed: "true"`, or the job's `spec.runPolicy.managedBy` (Kubeflow)
   or `spec.managedBy` (batch Job) names another controller than the operators of the workload
   table's kinds (`agent.model.workload`): REFUSE, advising Kueue's topology-aware scheduling
   instead.
3. One remediation in flight per job: another incident of the same job is being remediated or
   verified: WAIT.
4. At most `max_per_hour` remediations started in the cluster in the last hour: WAIT until an
   older one leaves the window (0 means the leader never starts one).
Otherwise GO.

What it does not do: read anything, or check the plan itself (room in the target zone, a job that
changed since the plan: the remediator checks those against the live cluster).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agent.model.descriptor import dig
from agent.model.workload import KUEUE, managed_by_paths, own_managers

KUEUE_QUEUE = KUEUE.queue_label
KUEUE_MANAGED = KUEUE.managed_label
# Controllers that own a job when nothing else claims it (`managedBy` unset or one of these):
# the operators of the workload table's kinds.
OWN_CONTROLLERS = own_managers()
_MANAGED_BY = managed_by_paths()  # where the table's kinds name their controller


class ClearanceKind(StrEnum):
    GO = "go"
    WAIT = "wait"  # try again later; the incident stays approved
    REFUSE = "refuse"  # never: the incident is refused with the reason (it stays open)


@dataclass(frozen=True)
class Clearance:
    kind: ClearanceKind
    reason: str = ""


GO = Clearance(ClearanceKind.GO)


@dataclass(frozen=True)
class GuardInput:
    """What the executor knows about one approved incident when it considers starting it."""

    namespace: str
    job: str  # kind/namespace/name, for messages
    objects: Sequence[Mapping[str, Any]]  # the job's own object (when cached) and its live pods
    busy: bool  # another incident of the same job is remediating or verifying
    started_last_hour: int
    # the fix goes through Kueue (its Workload re-queued): Kueue's queue label is expected
    through_kueue: bool = False


def _meta(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    value = meta.get(key) if isinstance(meta, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _managed_by(obj: Mapping[str, Any]) -> str | None:
    """The controller the object names where a kind of the tables would (`spec.runPolicy`,
    then `spec`), None when it names none."""
    for path in _MANAGED_BY:
        value = dig(obj, path)
        if value:
            return str(value)
    return None


def kueue_reason(
    objects: Sequence[Mapping[str, Any]], *, through_kueue: bool = False
) -> str | None:
    """Why these objects are Kueue's (or another controller's) to schedule; None when they are
    not. `through_kueue`: the fix re-queues the job through Kueue itself, so Kueue's own marks
    are expected (another controller's `managedBy`, MultiKueue's, still refuses)."""
    for obj in objects:
        kind = str(obj.get("kind") or "object")
        name = str(_meta_name(obj))
        labels, annotations = _meta(obj, "labels"), _meta(obj, "annotations")
        for source, values in (() if through_kueue else (("label", labels), ("annotation", annotations))):
            if values.get(KUEUE_QUEUE):
                return (f"{kind} {name} is queued by Kueue ({source} {KUEUE_QUEUE}="
                        f"{values[KUEUE_QUEUE]}); use Kueue topology-aware scheduling "
                        f"({KUEUE.topology_annotation}) instead")
        if not through_kueue and str(labels.get(KUEUE_MANAGED, "")).lower() == "true":
            return (f"{kind} {name} is managed by Kueue ({KUEUE_MANAGED}=true); use Kueue "
                    "topology-aware scheduling instead")
        managed_by = _managed_by(obj)
        if managed_by is not None and managed_by not in OWN_CONTROLLERS:
            return f"{kind} {name} is managed by {managed_by}, not by its own controller"
    return None


def _meta_name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name", "?")) if isinstance(meta, Mapping) else "?"


def clear(
    guard: GuardInput, *, protected_namespaces: Collection[str], max_per_hour: int
) -> Clearance:
    """May the leader start remediating this job now (see the module docstring for the rules)?"""
    if guard.namespace in protected_namespaces:
        return Clearance(
            ClearanceKind.REFUSE,
            f"{guard.job} is in the protected namespace {guard.namespace}; zonemedic never "
            "touches it",
        )
    kueue = kueue_reason(guard.objects, through_kueue=guard.through_kueue)
    if kueue is not None:
        return Clearance(ClearanceKind.REFUSE, f"{kueue}; zonemedic does not suspend it")
    if guard.busy:
        return Clearance(ClearanceKind.WAIT,
                         f"another remediation of {guard.job} is in flight")
    if guard.started_last_hour >= max_per_hour:
        return Clearance(
            ClearanceKind.WAIT,
            f"{guard.started_last_hour} remediation(s) started in the last hour; the cap is "
            f"{max_per_hour} (remediation.max_per_hour)",
        )
    return GO
