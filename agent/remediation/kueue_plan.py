"""The plan that re-places a Kueue-managed training job through Kueue: its Workload re-queued, its templates annotated.

Who calls it: `agent.remediation.planner.plan_remediation` for a finding whose Kueue advice says
the fix is the job's own annotations (`KueueAdvice.agent_fixable`). Pure: the finding, the live
job and its Workload (as the API returns them) and the cluster's Kueue objects in, a `Plan` out,
or `PlanRefusedError` with the reason; it does not read or write the cluster.

The plan has two targets. The Workload (`TargetAction.REQUEUE`): set `spec.active: false` (Kueue
evicts it and suspends the job, never requeueing it while inactive), then, once the job is
suspended with no pod left and its templates are annotated, deleted so Kueue rebuilds it from the
annotated job (a reactivated Workload keeps its old PodSets). The job (`TargetAction.ANNOTATE`):
every gang pod template's Kueue annotations (`agent.model.kueue`: `podset-required-topology` at
the zone, one `podset-group-name` for two PodSets, no preferred or unconstrained request), their
`before` read from the Workload's PodSet templates (what Kueue restores the job's templates to
when it stops it: the annotations Kueue injected at admission are not the job's own), so the
rollback removes exactly what the plan added. Where they are written:
- a Kubeflow job: one merge patch of its replica specs' templates;
- a JobSet: its replicated jobs' pod templates (`Target.override` field `replicatedJobs`, the
  list patched whole by `agent.remediation.jobset_patch`; allowed while it is suspended);
- a TrainJob: zonemedic's own `runtimePatches` entry (manager `jobset_patch.MANAGER`), beside
  Kueue's own entry; its PodSets are its JobSet's replicated jobs (rank 0 and the other nodes
  are one). A runtime patch cannot remove an annotation the runtime's template sets: a TrainJob
  whose runtime asks for a preferred or unconstrained topology is refused.
Neither the job's `suspend` nor a nodeSelector is ever written: Kueue owns both.

Refused before anything is written: no Workload owned by the job, or one not admitted; Kueue's
TAS not configured for the job's flavor, or a job whose PodSets cannot be grouped (the advice:
more than two, or two of more than one pod each); a TrainJob whose Trainer serves no
`runtimePatches` (Kueue's TrainJob integration needs v2.2+) or whose JobSet does not exist yet; a
JobSet a TrainJob owns (fixed through the TrainJob); no zone where the policies allow every
required flow (`allowed` empty: the finding's zones that fix it); no room for the job in any
such zone's nodes; no room in its ClusterQueue's nominal quota for its GPUs once its own
reservation is released (others hold more than the nominal quota through borrowing, or the
flavor has no GPU quota). Kueue may still make the job wait for quota a pending workload takes
meanwhile: the preview says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from agent.model.cluster import GPU_RESOURCE, TrainingJobObject
from agent.model.descriptor import TemplateLayout
from agent.model.finding import Finding
from agent.model.kueue import KueueObjects, PodSetTopology, wanted_annotations
from agent.model.workload import (
    KUEUE,
    KUEUE_CLUSTER_QUEUE,
    KUEUE_WORKLOAD,
    JobKind,
    workload,
)
from agent.remediation import jobset_patch
from agent.remediation.jobset_plan import owning_trainjob
from agent.remediation.plan import (
    LiveObjects,
    Plan,
    Preconditions,
    Target,
    TargetAction,
    placement,
    render_diff,
)
from agent.remediation.template import PlanRefusedError, TemplateChange, meta_of
from agent.remediation.trainer_release import OverrideField
from agent.snapshot.kueue import parse_workload
from agent.snapshot.manifests import ManifestError, parse_training_job

_CQ = KUEUE_CLUSTER_QUEUE.kind.value


def _pod_set_annotations(wl: Mapping[str, Any]) -> dict[str, Mapping[str, str]]:
    """The Workload's PodSet templates' annotations, by PodSet name (lower case)."""
    out: dict[str, Mapping[str, str]] = {}
    for pod_set in (wl.get("spec") or {}).get("podSets") or []:
        if isinstance(pod_set, Mapping):
            template = pod_set.get("template") or {}
            out[str(pod_set.get("name")).lower()] = meta_of(template).get("annotations") or {}
    return out


def _request(annotations: Mapping[str, str]) -> PodSetTopology:
    """The TAS request of a PodSet template's own annotations (the Workload's copy)."""
    return PodSetTopology(
        required=annotations.get(KUEUE.topology_annotation) or None,
        preferred=annotations.get(KUEUE.preferred_annotation) or None,
        unconstrained=str(annotations.get(KUEUE.unconstrained_annotation, "")).lower() == "true",
        group=annotations.get(KUEUE.group_annotation) or None,
    )


def _cluster_queue_room(
    kueue: KueueObjects, *, cluster_queue: str | None, flavor: str | None, need: int
) -> str | None:
    """Why the ClusterQueue has no room for `need` GPUs of the flavor once the job's own
    reservation (`need`, it is admitted) is released; None when it has."""
    queue = kueue.cluster_queues.get(cluster_queue or "")
    if queue is None or flavor is None or need == 0:
        return None
    quota = queue.quota(flavor, GPU_RESOURCE)
    if quota is None:
        return f"{_CQ} {queue.name} has no {GPU_RESOURCE} quota for flavor {flavor}"
    free = quota.nominal - max(quota.reserved - need, 0.0)
    if free < need:
        return (f"no room in {_CQ} {queue.name}: the job needs {need} {GPU_RESOURCE} of "
                f"flavor {flavor}, {free:g} of its {quota.nominal:g} would be free")  # fmt: skip
    return None


def _layout_refusal(
    finding: Finding, live: LiveObjects, job: Mapping[str, Any]
) -> tuple[Mapping[str, Any], Mapping[str, Any] | None]:  # fmt: skip
    """The object holding the gang's pod templates (the job, or a TrainJob's JobSet) and the
    target's `override` (None for replica specs), or `PlanRefusedError`."""
    ref = finding.job
    kind = workload(ref.kind)
    if kind.templates.layout is TemplateLayout.REPLICA_SPECS:
        return job, None
    if ref.kind is JobKind.JOBSET:
        owner = owning_trainjob(job)
        if owner is not None:
            raise PlanRefusedError(f"the JobSet is owned by TrainJob {ref.namespace}/{owner}, whose "
                                   "controller rewrites its templates: fix the TrainJob")  # fmt: skip
        return job, {"field": jobset_patch.REPLICATED_JOBS, "entries": [],
                     "resume_with_patch": False}  # fmt: skip
    if ref.kind is not JobKind.TRAINJOB:
        raise PlanRefusedError(f"zonemedic does not re-place a {ref.kind} through Kueue")
    trainer = live.trainer
    if trainer is None or trainer.field is not OverrideField.RUNTIME_PATCHES:
        why = trainer.refusal if trainer is not None and trainer.refusal else (
            "the installed Kubeflow Trainer serves no runtimePatches")
        raise PlanRefusedError(f"{why}: Kueue's TrainJob integration and zonemedic's fix through "
                               "it need runtimePatches (Trainer v2.2+)")  # fmt: skip
    if live.materialised is None:
        raise PlanRefusedError(f"the TrainJob's JobSet {ref.namespace}/{ref.name} does not exist yet")
    return live.materialised, {"field": jobset_patch.RUNTIME_PATCHES, "manager": jobset_patch.MANAGER,
                               "resume_with_patch": False}  # fmt: skip


def _group_refusal(wl_obj: Mapping[str, Any], pod_sets: Sequence[str]) -> str | None:
    """Why Kueue cannot group the job's two gang PodSets (each of more than one pod)."""
    if len(pod_sets) != 2:
        return None
    counts = {str(p.get("name")).lower(): int(p.get("count", 1) or 1)
              for p in (wl_obj.get("spec") or {}).get("podSets") or [] if isinstance(p, Mapping)}
    if all(counts.get(r.lower(), 1) > 1 for r in pod_sets):
        return (f"its two PodSets ({', '.join(pod_sets)}) each run more than one pod: "
                f"{KUEUE.group_annotation} groups two PodSets only when one is a single pod")
    return None


def _changes(
    obj: TrainingJobObject, originals: Mapping[str, Mapping[str, str]], *,
    path: tuple[str, ...] | None, runtime_patch: bool,
) -> list[TemplateChange]:  # fmt: skip
    own_requests = {r: _request(originals.get(r.lower(), {})) for r in obj.pod_sets}
    changes = []
    for replica, wanted in wanted_annotations(obj.name, obj.pod_sets, own_requests).items():
        own = originals.get(replica.lower(), {})
        before = {key: own.get(key) for key in wanted}
        if before == wanted:
            continue
        if runtime_patch and any(v is None and before.get(k) is not None for k, v in wanted.items()):
            kept = ", ".join(k for k, v in wanted.items() if v is None and before.get(k) is not None)
            raise PlanRefusedError(
                f"{replica}: the TrainJob's runtime sets {kept}, which a runtime patch cannot "
                "remove (Kueue admits one topology annotation per template): change the runtime")
        changes.append(TemplateChange(replica=replica,
                                      path=(*path, replica, "template") if path else (),
                                      before={"annotations": before},
                                      after={"annotations": dict(wanted)}))  # fmt: skip
    return changes


def plan_kueue(
    finding: Finding, live: LiveObjects, *, workload_obj: Mapping[str, Any] | None,
    kueue: KueueObjects, allowed: Sequence[str], zone: str | None, need: int,
) -> Plan:  # fmt: skip
    """The plan that re-queues the finding's job through Kueue with zone-level annotations
    (see the module docstring), or `PlanRefusedError` with the reason. `allowed`: the zones
    where the co-located job's flows are all allowed; `zone`: the one expected (most of its
    GPUs, room for it), None when none has room; `need`: its GPUs."""
    ref = finding.job
    advice = finding.kueue
    job = live.job
    if job is None:
        raise PlanRefusedError(f"{ref.kind} {ref.namespace}/{ref.name} was not found")
    if advice is None:
        raise PlanRefusedError("the job is not Kueue-managed")
    if not advice.agent_fixable:
        raise PlanRefusedError(f"{advice.message}; zonemedic cannot apply that change itself")
    kind = workload(ref.kind)
    holder, override = _layout_refusal(finding, live, job)
    if workload_obj is None:
        raise PlanRefusedError(f"no Kueue Workload of {ref.kind} {ref.namespace}/{ref.name} found")
    try:
        wl = parse_workload(workload_obj)
        holder_kind = ref.kind if override is None else JobKind.JOBSET
        obj = replace(parse_training_job(holder, holder_kind), name=ref.name)
    except ManifestError as exc:
        raise PlanRefusedError(f"cannot read the job or its Workload: {exc}") from None
    if not wl.admitted:
        raise PlanRefusedError(f"Workload {wl.name} is not admitted: Kueue has not placed the job")
    grouping = _group_refusal(workload_obj, obj.pod_sets)
    if grouping is not None:
        raise PlanRefusedError(f"{grouping}; zonemedic cannot keep them in one zone through Kueue")
    if not allowed:
        raise PlanRefusedError("no zone where the policies allow every required flow of the job: "
                               "fix the policies first")  # fmt: skip
    if zone is None:
        raise PlanRefusedError(f"no zone the policies allow ({', '.join(allowed)}) has room for "
                               "the whole job")  # fmt: skip
    room = _cluster_queue_room(kueue, cluster_queue=wl.cluster_queue or advice.cluster_queue,
                               flavor=advice.flavor, need=need)  # fmt: skip
    if room is not None:
        raise PlanRefusedError(room)
    runtime_patch = override is not None and override["field"] == jobset_patch.RUNTIME_PATCHES
    changes = _changes(obj, _pod_set_annotations(workload_obj),
                       path=kind.templates.path if override is None else None,
                       runtime_patch=runtime_patch)  # fmt: skip
    if not changes:
        raise PlanRefusedError("the job's templates already carry the zone-level request: "
                               "re-queueing would not move it")  # fmt: skip
    if runtime_patch and override is not None:
        override = {**override, "entries": [jobset_patch.runtime_patch_entry(changes)]}
    meta, wl_meta = meta_of(job), meta_of(workload_obj)
    annotate = Target(
        action=TargetAction.ANNOTATE, api_version=str(job.get("apiVersion") or kind.api_version),
        kind=ref.kind.value, plural=kind.plural, namespace=ref.namespace, name=ref.name,
        uid=meta.get("uid"), resource_version=meta.get("resourceVersion"), changes=tuple(changes),
        override=override,
    )  # fmt: skip
    requeue = Target(
        action=TargetAction.REQUEUE, api_version=KUEUE_WORKLOAD.api_version,
        kind=KUEUE_WORKLOAD.kind.value, plural=KUEUE_WORKLOAD.plural, namespace=ref.namespace,
        name=wl.name, uid=wl_meta.get("uid"), resource_version=wl_meta.get("resourceVersion"),
        changes=(),
    )  # fmt: skip
    pods = len(live.pods)
    return Plan(
        job=ref, target_zone=zone,
        preconditions=Preconditions(uid=meta.get("uid"), resource_version=meta.get("resourceVersion"),
                                    verdict=finding.verdict,
                                    placement=placement(live.pods, live.nodes)),
        targets=(requeue, annotate), diff=render_diff((requeue, annotate)),
        pods=pods, gang=pods, zones=tuple(allowed),
    )  # fmt: skip
