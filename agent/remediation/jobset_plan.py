"""The patch builder for a JobSet-family job (a Kubeflow Trainer v2 TrainJob, or a JobSet of its own).

Who calls it: `agent.remediation.planner.plan_remediation` for a finding about a TrainJob or a
JobSet. Pure: the finding and the live objects (the job; for a TrainJob also its JobSet and what
the installed Trainer serves, `agent.remediation.trainer_release`) in, a `Plan` out, or
`PlanRefusedError` with the reason; it does not read or write the cluster.

The pod templates are the JobSet's replicated jobs (a TrainJob's JobSet is the one its controller
built from the runtime and the TrainJob's overrides). Each replicated job of the gang (the
initializers run before it and are left alone) is retargeted as `agent.remediation.template`
says, with the JobSet's rules: affinity cannot change on an existing JobSet, so the zone pin is
the `topology.kubernetes.io/zone` nodeSelector, the tolerations of the zone's node taints are
added where no node of the zone accepts the template (the GPU taint, for a CPU-only MPI
launcher), and the zone-mirroring label is set where the template carries it; a template whose
required node affinity names a zone is refused (its affinity cannot change). A replicated job
whose live pods are all in the zone and which no schedulable node outside the zone accepts is left
as it is (an MPI TrainJob whose launcher alone is elsewhere moves the launcher alone).
Where the changes go (`Target.override`, built into patches by `agent.remediation.jobset_patch`):
- TrainJob, Trainer v2.2+: zonemedic's own `runtimePatches` entry (manager
  `jobset_patch.MANAGER`); on v2.3 the patch and the resume are one request;
- TrainJob, Trainer v2.1: zonemedic's own `podTemplateOverrides` entries;
- JobSet: the replicated jobs' pod templates (a resume in the same request).
Each moves by SUSPEND_PATCH_RESUME: suspend, wait until no pod of the job is left, patch, resume.
Refused: a Trainer too old (v2.0) or absent, a job Kueue-managed or managed by another
controller, finished, a JobSet a TrainJob owns (its controller rewrites the templates: the fix
goes through the TrainJob), a TrainJob whose JobSet does not exist yet, a template spreading
across zones, nothing to change, or no room in the zone for every pod of the gang.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent.model.cluster import ZONE_LABEL
from agent.model.descriptor import PodTemplate
from agent.model.finding import Finding
from agent.model.scheduling import required_node_affinity_matches
from agent.model.workload import TRAINJOB, JobKind, workload
from agent.remediation import jobset_patch
from agent.remediation.plan import (
    LiveObjects,
    Plan,
    Preconditions,
    Target,
    TargetAction,
    placement,
    render_diff,
)
from agent.remediation.room import (
    PodNeed,
    blocking_taints,
    node_labels,
    node_name,
    parse_quantity,
    pod_spec_requests,
    schedulable,
    tolerates,
)
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
from agent.remediation.trainer_release import OverrideField, TrainerOverrides
from agent.remediation.training_plan import guard_reason

OWNER_KIND = TRAINJOB.kind.value


def owning_trainjob(jobset: Mapping[str, Any]) -> str | None:
    """The TrainJob that owns the JobSet (its controller ownerReference), if one does."""
    for ref in meta_of(jobset).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == OWNER_KIND:
            return str(ref.get("name"))
    return None


def _accepts(node: Mapping[str, Any], template: Mapping[str, Any]) -> bool:
    """The node could take a pod of the template: schedulable, selector and required affinity
    matched, taints tolerated, and every resource it requests allocatable there at all."""
    spec = template.get("spec") or {}
    if not schedulable(node):
        return False
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    if any(amount > 0 and parse_quantity(allocatable.get(resource, "0")) <= 0
           for resource, amount in pod_spec_requests(spec).items()):  # fmt: skip
        return False
    if not required_node_affinity_matches(dict(spec), dict(node_labels(node)), node_name(node)):
        return False
    return all(tolerates(spec.get("tolerations") or [], t) for t in blocking_taints(node))


def _settled(template: PodTemplate, pods: Sequence[Mapping[str, Any]], zone_of: Mapping[str, str | None],
             *, zone: str, nodes: Sequence[Mapping[str, Any]], replica_label: str) -> bool:  # fmt: skip
    """The replicated job's live pods are all bound in `zone` and no schedulable node outside
    the zone accepts its template: a restart cannot move it elsewhere."""
    mine = [p for p in pods if (meta_of(p).get("labels") or {}).get(replica_label) == template.replica]
    if not mine or any(zone_of.get(str(meta_of(p).get("name"))) != zone for p in mine):
        return False
    return not any(node_labels(n).get(ZONE_LABEL) != zone and _accepts(n, template.template)
                   for n in nodes)  # fmt: skip


def _jobset_change(change: TemplateChange, replica: str) -> TemplateChange:
    """The change without what a JobSet refuses: a zone in required node affinity terms cannot be
    changed (refused); terms without one need nothing (the nodeSelector pins the zone)."""
    if "nodeSelectorTerms" not in change.after:
        return change
    for term in change.before.get("nodeSelectorTerms") or []:
        if any(e.get("key") == ZONE_LABEL for e in term.get("matchExpressions") or []):
            raise PlanRefusedError(
                f"{replica}: its required node affinity names a zone, and affinity cannot change "
                "on an existing JobSet")  # fmt: skip
    drop = "nodeSelectorTerms"
    return TemplateChange(
        replica=change.replica, path=(),
        before={k: v for k, v in change.before.items() if k != drop},
        after={k: v for k, v in change.after.items() if k != drop},
        absent=tuple(a for a in change.absent if a != "affinity"),
    )  # fmt: skip


def _labels_of(pods: Sequence[Mapping[str, Any]], replica: str, *, replica_label: str,
               job_label: str, job: str) -> Mapping[str, str]:  # fmt: skip
    for pod in pods:
        labels: Mapping[str, str] = meta_of(pod).get("labels") or {}
        if labels.get(replica_label) == replica:
            return labels
    return {job_label: job}


def _constant(labels: Mapping[str, str]) -> Callable[[int], Mapping[str, str]]:
    return lambda _index: labels


def _override(ref_kind: JobKind, trainer: TrainerOverrides | None,
              changes: Sequence[TemplateChange]) -> dict[str, Any]:  # fmt: skip
    if ref_kind is JobKind.JOBSET:
        return {"field": jobset_patch.REPLICATED_JOBS, "entries": [], "resume_with_patch": True}
    assert trainer is not None
    if trainer.field is OverrideField.RUNTIME_PATCHES:
        return {"field": jobset_patch.RUNTIME_PATCHES, "manager": jobset_patch.MANAGER,
                "entries": [jobset_patch.runtime_patch_entry(changes)],
                "resume_with_patch": trainer.resume_with_patch}  # fmt: skip
    return {"field": jobset_patch.POD_TEMPLATE_OVERRIDES,
            "entries": jobset_patch.pod_template_overrides(changes), "resume_with_patch": False}


def plan_jobset(finding: Finding, live: LiveObjects, *, zone: str, mirror_keys: Sequence[str],
                explain: bool = True) -> Plan:  # fmt: skip
    """The plan that co-locates a TrainJob or a JobSet in `zone` (see the module docstring), or
    `PlanRefusedError` with the reason."""
    ref = finding.job
    job = live.job
    if job is None:
        raise PlanRefusedError(f"{ref.kind} {ref.namespace}/{ref.name} was not found")
    if ref.kind is JobKind.TRAINJOB:
        trainer = live.trainer
        if trainer is None or trainer.field is OverrideField.NONE:
            raise PlanRefusedError(trainer.refusal if trainer is not None
                                   else "what the installed Kubeflow Trainer serves is unknown")  # fmt: skip
    else:
        trainer = None
        owner = owning_trainjob(job)
        if owner is not None:
            raise PlanRefusedError(f"the JobSet is owned by TrainJob {ref.namespace}/{owner}, whose "
                                   "controller rewrites its templates: fix the TrainJob")  # fmt: skip
    guard = guard_reason(job, ref.kind)
    if guard is not None:
        raise PlanRefusedError(guard)
    jobset = live.materialised if ref.kind is JobKind.TRAINJOB else job
    if jobset is None:
        raise PlanRefusedError(f"the TrainJob's JobSet {ref.namespace}/{ref.name} does not exist yet")
    if ref.kind is JobKind.TRAINJOB:
        guard = guard_reason(jobset, JobKind.JOBSET)
        if guard is not None:
            raise PlanRefusedError(f"its JobSet: {guard}")
    kind = workload(ref.kind)
    labels = kind.labels
    templates = kind.templates.gang_templates(jobset)
    if not templates:
        raise PlanRefusedError("the JobSet has no replicated job of the gang")
    zone_nodes = nodes_in_zone(live.nodes, zone)
    zone_of = placement(live.pods, live.nodes)
    relabel = {k: zone for k in mirror_keys}
    changes: list[TemplateChange] = []
    needs: list[PodNeed] = []
    for template in templates:
        if template.count is None:
            raise PlanRefusedError(f"{template.replica}: its pod count cannot be read")
        change = None
        if not _settled(template, live.pods, zone_of, zone=zone, nodes=live.nodes,
                        replica_label=labels.replica_type):  # fmt: skip
            found = retarget(
                template.template, replica=template.replica, path=(), zone=zone,
                zone_nodes=zone_nodes, mirror_keys=mirror_keys, affinity_to=None,
            )  # fmt: skip
            change = _jobset_change(found, template.replica) if found is not None else None
        if change is not None:
            changes.append(change)
        found_labels = _labels_of(live.pods, template.replica, replica_label=labels.replica_type,
                                  job_label=labels.job_name, job=ref.name)  # fmt: skip
        needs.extend(pod_needs(
            f"{ref.name}-{template.replica}", template.template, change, template.count,
            namespace=ref.namespace, relabel=relabel, pod_labels=_constant(found_labels),
        ))  # fmt: skip
    if not changes:
        raise PlanRefusedError(f"every replicated job already pins zone {zone}: a restart would not move it")
    replaced = frozenset(pod_key(p) for p in live.pods)
    require_room(needs, zone=zone, nodes=live.nodes, bound_pods=live.bound_pods, replaced=replaced)
    meta = meta_of(job)
    target = Target(
        action=TargetAction.SUSPEND_PATCH_RESUME, api_version=str(job.get("apiVersion") or kind.api_version),
        kind=ref.kind.value, plural=kind.plural, namespace=ref.namespace, name=ref.name,
        uid=meta.get("uid"), resource_version=meta.get("resourceVersion"), changes=tuple(changes),
        override=_override(ref.kind, trainer, changes),
    )  # fmt: skip
    return Plan(
        job=ref,
        target_zone=zone,
        preconditions=Preconditions(
            uid=meta.get("uid"), resource_version=meta.get("resourceVersion"),
            verdict=finding.verdict, placement=zone_of,
        ),
        targets=(target,),
        diff=render_diff((target,)) if explain else "",
        mirror_keys=tuple(mirror_keys),
        pods=len(needs),
        gang=len(needs),
    )
