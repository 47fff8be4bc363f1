"""The planner's co-location fix rehearsed on a parsed cluster: the pods as the fix would leave them.

Called by `zonemedic whatif --move NS/NAME --zone Z` (`agent.commands.whatif`). From the raw
objects of a dump or of the live cluster (`live_objects`: the job, its pods, the nodes, the pods
bound to the zone's nodes, a group's workloads, a TrainJob's JobSet, a Kueue job's Workload) the
real planner (`agent.remediation.planner.plan_remediation`) plans the move to `Z` for the job's
finding as if `Z` were its target; its refusal is the answer (`RehearsalError`). The plan is then
applied to the parsed cluster (`rehearse`), pod by pod, as the pods its templates re-create would
be:
- each pod takes the `TemplateChange` of its template (by replica type or replicated job, or, for
  a generic group, by the object owning it): its labels as the patch sets them (the zone-mirroring
  label among them), and a zone-mirroring label the template does not carry (a mutating webhook
  writes it from the node) and the node topology label Kubernetes copies onto pods set to `Z`;
- each pod is bound to the first node of `Z` (by name) that its scheduling after the patch admits:
  `nodeSelector` (the zone pin), the required node affinity terms, its tolerations (those the plan
  adds included) against the node's NoSchedule/NoExecute taints, and GPUs left on the node after
  the pods already bound there (other jobs' and those placed before). A pod that fits nowhere is a
  `RehearsalError`.
What it does not do: run the scheduler's scoring, pod (anti-)affinity between pods, or CPU and
memory fitting beyond the planner's own room check; nor write anything. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from agent.errors import InputError
from agent.model.cluster import ZONE_LABEL, ClusterState, Pod
from agent.model.descriptor import TemplateLayout
from agent.model.finding import REMEDIABLE_VERDICTS, Finding
from agent.model.job import Job
from agent.model.kueue import KueueObjects
from agent.model.scheduling import required_node_affinity_matches
from agent.model.verdict import Verdict
from agent.model.workload import JobKind, workload
from agent.remediation.plan import LiveObjects, Plan, Refusal, Target
from agent.remediation.planner import plan_remediation
from agent.remediation.room import blocking_taints, node_labels, node_name, schedulable, tolerates
from agent.remediation.template import REQUIRED, TemplateChange
from agent.remediation.trainer_release import OverrideField, TrainerOverrides

Obj = Mapping[str, Any]
_OWNERS = ("Deployment", "ReplicaSet", "Job")
REPLICATED_JOB = workload(JobKind.JOBSET).labels.replica_type  # the replicated job of a pod


class RehearsalError(InputError):
    """The planner's fix cannot be rehearsed: the planner refuses, or a pod fits on no node of
    the zone after the patches (the message says which and why)."""


def _meta(obj: Obj) -> Obj:
    found: Obj = obj.get("metadata") or {}
    return found


def _ident(obj: Obj) -> tuple[str, str, str]:
    meta = _meta(obj)
    return (str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))


def _gpus(pod: Obj) -> int:
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or ():
        res = container.get("resources") or {}
        value = (res.get("limits") or {}).get("nvidia.com/gpu") or (res.get("requests") or {}).get(
            "nvidia.com/gpu")  # fmt: skip
        try:
            total += int(str(value)) if value is not None else 0
        except ValueError:
            continue
    return total


def live_objects(items: Sequence[Obj], job: Job, *, zone: str, kueue: KueueObjects) -> LiveObjects:
    """What the planner reads for `job`, taken from the dump's (or live listing's) objects."""
    ref = job.ref
    by_id = {_ident(o): o for o in items}
    names = {p.name for p in job.pods}
    pods = [o for o in items if o.get("kind") == "Pod" and _meta(o).get("namespace") == ref.namespace
            and _meta(o).get("name") in names and not _meta(o).get("deletionTimestamp")]  # fmt: skip
    nodes = [o for o in items if o.get("kind") == "Node"]
    in_zone = {node_name(n) for n in nodes if node_labels(n).get(ZONE_LABEL) == zone}
    bound = [o for o in items if o.get("kind") == "Pod"
             and (o.get("spec") or {}).get("nodeName") in in_zone]  # fmt: skip
    job_obj = None if ref.kind is JobKind.GROUP else by_id.get((ref.kind.value, ref.namespace, ref.name))
    workloads = ([o for o in items if o.get("kind") in _OWNERS
                  and _meta(o).get("namespace") == ref.namespace]
                 if ref.kind is JobKind.GROUP else [])  # fmt: skip
    materialised = trainer = None
    if ref.kind is not JobKind.GROUP and workload(ref.kind).templates.layout is TemplateLayout.REPLICATED_JOBS:
        materialised = by_id.get((JobKind.JOBSET.value, ref.namespace, ref.name))
    if ref.kind is JobKind.TRAINJOB:
        trainer = TrainerOverrides(OverrideField.RUNTIME_PATCHES, resume_with_patch=True)
    queued = next((o for o in items if o.get("kind") == "Workload"
                   and _meta(o).get("namespace") == ref.namespace
                   and any(r.get("kind") == ref.kind.value and r.get("name") == ref.name
                           for r in _meta(o).get("ownerReferences") or ())), None)  # fmt: skip
    return LiveObjects(job=job_obj, pods=pods, nodes=nodes, bound_pods=bound, workloads=workloads,
                       materialised=materialised, trainer=trainer, queued=queued, kueue=kueue)  # fmt: skip


def plan_move(finding: Finding, live: LiveObjects, *, zone: str,
              mirror_keys: Sequence[str]) -> Plan:  # fmt: skip
    """The planner's plan that co-locates the finding's job in `zone`, as if `zone` were its
    target; `RehearsalError` with the planner's reason when it refuses."""
    verdict = finding.verdict if finding.verdict in REMEDIABLE_VERDICTS else Verdict.ZONE_SPLIT_DEGRADED
    kueue = finding.kueue
    if kueue is not None:
        kueue = dataclasses.replace(kueue, zones=(zone,), blocked=None)
    target = dataclasses.replace(finding, verdict=verdict, remediable=True, target_zone=zone,
                                 kueue=kueue)  # fmt: skip
    planned = plan_remediation(target, live, mirror_keys=mirror_keys)
    if isinstance(planned, Refusal):
        raise RehearsalError(f"--move: the planner's fix would not run: {planned.reason}")
    return planned


def _change_of(pod: Pod, job: Job, plan: Plan, owners: Mapping[tuple[str, str], str]
               ) -> tuple[Target | None, TemplateChange | None]:  # fmt: skip
    """The target and template change the pod's template gets (None: not changed)."""
    for target in plan.targets:
        for change in target.changes:
            if _owns(target, change, pod, job, owners):
                return target, change
    return None, None


def _owns(target: Target, change: TemplateChange, pod: Pod, job: Job,
          owners: Mapping[tuple[str, str], str]) -> bool:  # fmt: skip
    if job.ref.kind is JobKind.GROUP:
        for ref in pod.owners:
            kind, name = ref.kind, ref.name
            if kind == "ReplicaSet":
                kind, name = "Deployment", owners.get((pod.namespace, name), "")
            if (kind, name) == (target.kind, target.name):
                return True
        return False
    replica = change.replica.lower()
    return replica in {(job.replica_types.get(pod.name) or "").lower(),
                       (pod.labels.get(REPLICATED_JOB) or "").lower()}  # fmt: skip


def _template(target: Target | None, change: TemplateChange | None, live: LiveObjects) -> Obj | None:
    """The live pod template the change patches (None when it is not at `change.path` of the
    job or of a group's workload)."""
    if target is None or change is None or not change.path:
        return None
    objects = [live.job] if target.kind == (live.job or {}).get("kind") else [
        o for o in live.workloads if _ident(o)[0] == target.kind and _ident(o)[2] == target.name]
    found: Any = objects[0] if objects and objects[0] is not None else None
    for key in change.path:
        found = found.get(key) if isinstance(found, Mapping) else None
    return found if isinstance(found, Mapping) else None


def _spec_after(raw: Obj, change: TemplateChange | None, template: Obj | None) -> dict[str, Any]:
    """The pod's scheduling fields once re-created from its patched template (the live template
    when known, else the pod's own spec, which its template made)."""
    spec = dict((template if template is not None else raw).get("spec") or {})
    after = change.after if change is not None else {}
    selector = dict(spec.get("nodeSelector") or {})
    if "nodeSelector" in after:
        if after["nodeSelector"] is None:
            selector.pop(ZONE_LABEL, None)
        else:
            selector[ZONE_LABEL] = after["nodeSelector"]
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(REQUIRED) or {}).get(
        "nodeSelectorTerms")  # fmt: skip
    terms = after.get("nodeSelectorTerms", terms)
    out: dict[str, Any] = {"nodeSelector": selector,
                           "tolerations": after.get("tolerations", spec.get("tolerations")) or []}
    if terms:
        out["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}
    return out


def rehearse(state: ClusterState, job: Job, plan: Plan, *, live: LiveObjects,
             items: Sequence[Obj], mirror_keys: Sequence[str]) -> ClusterState:  # fmt: skip
    """`state` with the job's pods as the plan's re-created pods would be (module docstring)."""
    zone = plan.target_zone
    raw_pods = {(str(_meta(o).get("namespace")), str(_meta(o).get("name"))): o
                for o in items if o.get("kind") == "Pod"}  # fmt: skip
    owners = {(str(_meta(o).get("namespace")), str(_meta(o).get("name"))):
              next((str(r.get("name")) for r in _meta(o).get("ownerReferences") or ()
                    if r.get("kind") == "Deployment"), "")
              for o in items if o.get("kind") == "ReplicaSet"}  # fmt: skip
    nodes = sorted((o for o in items if o.get("kind") == "Node"
                    and node_labels(o).get(ZONE_LABEL) == zone and schedulable(o)),
                   key=node_name)  # fmt: skip
    members = {(p.namespace, p.name) for p in job.pods}
    free = {}
    for node in nodes:
        alloc = ((node.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu")
        free[node_name(node)] = int(str(alloc)) if alloc is not None and str(alloc).isdigit() else 0
    for key, raw in raw_pods.items():
        where = (raw.get("spec") or {}).get("nodeName")
        if key not in members and where in free:
            free[where] -= _gpus(raw)
    moved: dict[tuple[str, str], Pod] = {}
    for pod in sorted(job.pods, key=lambda p: p.name):
        raw = raw_pods.get((pod.namespace, pod.name), {})
        target, change = _change_of(pod, job, plan, owners)
        labels = dict(pod.labels)
        for label, value in ((change.after.get("labels") if change else None) or {}).items():
            if value is None:
                labels.pop(label, None)
            else:
                labels[label] = value
        for mirror in (*mirror_keys, ZONE_LABEL):
            if mirror in labels:
                labels[mirror] = zone
        spec = _spec_after(raw, change, _template(target, change, live))
        need = _gpus(raw) if raw else pod.gpu_request
        fits = [n for n in nodes
                if required_node_affinity_matches(spec, node_labels(n), node_name(n))
                and all(tolerates(spec["tolerations"], t) for t in blocking_taints(n))
                and free[node_name(n)] >= need]  # fmt: skip
        if not fits:
            raise RehearsalError(f"--move: pod {pod.namespace}/{pod.name} fits on no node of zone "
                                 f"{zone} after the planner's patches (node selector, affinity, "
                                 f"tolerations, {need} GPU(s))")  # fmt: skip
        chosen = node_name(fits[0])
        free[chosen] -= need
        moved[(pod.namespace, pod.name)] = dataclasses.replace(pod, labels=labels, node_name=chosen)
    pods = tuple(moved.get((p.namespace, p.name), p) for p in state.pods)
    return dataclasses.replace(state, pods=pods)
