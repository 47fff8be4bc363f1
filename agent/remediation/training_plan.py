"""The patch builder for a training job (a Kubeflow kind, through its descriptor): one plan per job.

Who calls it: `agent.remediation.planner.plan_remediation` for a finding about a training-kind
job; the run's steps (`agent.remediation.recheck`) call `guard_reason` again before the first
write. Pure: the finding and the live objects in, a `Plan` out, or `PlanRefusedError` with the
reason; it does not read or write the cluster.

Kubeflow jobs (every kubeflow.org/v1 kind and the v2beta1 MPIJob) get one merge patch of every
replica template (where the kind's descriptor says they are, `agent.model.workload`), applied
with the descriptor's suspend (`runPolicy.suspend`, see `Plan.job_patch`). For the v2beta1
launcher, mpi-operator re-syncs only nodeSelector and tolerations into its batch Job on resume:
the zone pin (nodeSelector) is what moves it; its podAffinity and labels apply to new launchers.
Refused: a job Kueue-managed (its descriptor's queue label, another controller's `managedBy`) or
finished, a kind whose templates are not replica specs, a template spreading across zones, every
template already pinned to the zone, or no room in it for every pod, judged on the pods as they
will be after the patch with the operator's labels read from the live pods.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent.model.descriptor import GangLabels, TemplateLayout
from agent.model.finding import Finding
from agent.model.workload import JobKind, workload
from agent.remediation.plan import (
    LiveObjects,
    Plan,
    Preconditions,
    Target,
    TargetAction,
    placement,
    render_diff,
)
from agent.remediation.room import PodNeed
from agent.remediation.template import (
    PlanRefusedError,
    TemplateChange,
    meta_of,
    nodes_in_zone,
    pod_key,
    pod_needs,
    require_room,
    retarget,
)


def guard_reason(job: Mapping[str, Any], kind: JobKind, *, through_kueue: bool = False) -> str | None:
    """Why a training job of `kind` must not be suspended/resumed by zonemedic, or None: its
    descriptor's Kueue queue label (unless `through_kueue`: the fix re-queues it through Kueue),
    a `managedBy` naming another controller, a finished condition."""
    found = workload(kind)
    meta = meta_of(job)
    queue = (meta.get("labels") or {}).get(found.kueue.queue_label)
    if queue and not through_kueue:
        return (f"Kueue-managed (queue {queue}): zonemedic does not toggle suspend; use Kueue "
                f"Topology Aware Scheduling ({found.kueue.topology_annotation})")  # fmt: skip
    managed_by = found.suspension.manager(job)
    if managed_by and managed_by not in found.suspension.own_managers:
        return (f"managed by {managed_by}: zonemedic does not toggle suspend; use Kueue Topology "
                f"Aware Scheduling ({found.kueue.topology_annotation})")  # fmt: skip
    finished = found.conditions.finished_as(job)
    if finished is not None:
        return f"the job has {finished.lower()}: a finished job cannot be resumed"
    return None


def plan_training(
    finding: Finding, live: LiveObjects, *, zone: str, mirror_keys: Sequence[str], explain: bool = True
) -> Plan:
    """The plan that co-locates a training job in `zone` (see the module docstring), or
    `PlanRefusedError` with the reason."""
    ref = finding.job
    job = live.job
    if job is None:
        raise PlanRefusedError(f"{ref.kind} {ref.namespace}/{ref.name} was not found")
    guard = guard_reason(job, ref.kind)
    if guard is not None:
        raise PlanRefusedError(guard)
    kind = workload(ref.kind)
    if kind.templates.layout is not TemplateLayout.REPLICA_SPECS:
        raise PlanRefusedError(f"zonemedic cannot plan a {ref.kind}: its pod templates are "
                            f"{kind.templates.layout.value}, not replica specs")  # fmt: skip
    api_version = str(job.get("apiVersion") or kind.api_version)
    field_name = kind.templates.field
    specs = kind.templates.container(job) or {}
    if not specs:
        raise PlanRefusedError(f"the job has no {field_name}")
    zone_nodes = nodes_in_zone(live.nodes, zone)
    relabel = {k: zone for k in mirror_keys}
    # the job's own pods attract each other on the zone key, where the kind lets the affinity
    # change while suspended
    affinity = ((kind.labels.job_name, ref.name) if kind.suspension.may_change("spec.affinity")
                else None)  # fmt: skip
    changes: list[TemplateChange] = []
    needs: list[PodNeed] = []
    for replica, spec in specs.items():
        template = (spec or {}).get("template") or {}
        path = (*kind.templates.path, str(replica), "template")
        change = retarget(
            template, replica=str(replica), path=path, zone=zone, zone_nodes=zone_nodes,
            mirror_keys=mirror_keys, affinity_to=affinity,
        )  # fmt: skip
        if change is not None:
            changes.append(change)
        count = int((spec or {}).get("replicas", 1) or 0)
        needs.extend(pod_needs(
            f"{ref.name}-{str(replica).lower()}", template, change, count,
            namespace=ref.namespace, relabel=relabel,
            pod_labels=_replica_labels(live.pods, job=ref.name, replica=str(replica),
                                       gang=kind.labels),
        ))  # fmt: skip
    replaced = frozenset(pod_key(p) for p in live.pods)
    require_room(needs, zone=zone, nodes=live.nodes, bound_pods=live.bound_pods,
                 replaced=replaced)  # fmt: skip
    meta = meta_of(job)
    target = Target(
        action=TargetAction.SUSPEND_RESUME, api_version=api_version, kind=ref.kind.value,
        plural=kind.plural, namespace=ref.namespace, name=ref.name, uid=meta.get("uid"),
        resource_version=meta.get("resourceVersion"), changes=tuple(changes),
    )  # fmt: skip
    if not changes:
        raise PlanRefusedError(f"every template already pins zone {zone}: a restart would not move it")
    return Plan(
        job=ref,
        target_zone=zone,
        preconditions=Preconditions(
            uid=meta.get("uid"), resource_version=meta.get("resourceVersion"),
            verdict=finding.verdict, placement=placement(live.pods, live.nodes),
        ),
        targets=(target,),
        diff=render_diff((target,)) if explain else "",
        mirror_keys=tuple(mirror_keys),
        pods=len(needs),
        gang=len(needs),
    )


def _replica_labels(
    pods: Sequence[Mapping[str, Any]], *, job: str, replica: str, gang: GangLabels
) -> Callable[[int], Mapping[str, str]]:
    """Labels of the Kubeflow pod `i` of `replica` as its operator sets them: the live pod's
    (found by replica type or job role and index labels, or by its name `<job>-<type>-<i>`),
    else the job-name label alone."""
    rtype = replica.lower()
    by_index: dict[str, Mapping[str, str]] = {}
    for pod in pods:
        labels: Mapping[str, str] = meta_of(pod).get("labels") or {}
        kind = labels.get(gang.replica_type) or (labels.get(gang.job_role) if gang.job_role else None)
        name = str(meta_of(pod).get("name"))
        if kind is not None and kind.lower() == rtype:
            by_index.setdefault(labels.get(gang.replica_index, "0"), labels)
        elif kind is None and name.startswith(f"{job}-{rtype}-"):
            by_index.setdefault(name.rpartition("-")[2], labels)
    return lambda i: by_index.get(str(i)) or {gang.job_name: job}
