"""The patches of a TrainJob's or a JobSet's remediation, built from its recorded plan and the live object.

Who calls it: the steps (`agent.remediation.jobset_steps`) before each write, and the planner
(`agent.remediation.jobset_plan`), which records what it needs in the target's `override`.
Pure: the plan's `Target` and the object as the API returns it in, merge patches and states
out; it does not send them (`agent.remediation.writer` does) or read the cluster.

Where the changes go (`Target.override["field"]`), each a list a merge patch replaces whole, so
every patch is built from the live list (and sent with its resourceVersion):
- `runtimePatches` (TrainJob, Trainer v2.2+): zonemedic's own entry, keyed by its `manager`
  (`MANAGER`), appended after the other managers' entries, which are sent back unchanged; the
  restore sends the list without it;
- `podTemplateOverrides` (TrainJob, Trainer v2.1, no manager field): zonemedic's entries
  (one per replicated job it changes) appended; the restore removes exactly those entries;
- `replicatedJobs` (a JobSet): each changed replicated job's pod template merge-patched with
  its change (`TemplateChange.fragment`), the restore with the original values.
The JobSet merges the pod-template labels and nodeSelector into its existing child Jobs on
resume and unions their tolerations, so a restore cannot take back a nodeSelector key the
original template did not have, nor an added toleration: `stale_children` names the child Jobs
that keep one, which the rollback recreates. Nor can it take back an annotation: a Kueue JobSet's
(or TrainJob's) suspended child Jobs keep the marks of Kueue's last admission (the Workload's
name, an injected `podset-unconstrained-topology`), which beside a new required level make
Kueue's Job webhook refuse the resume merge: `kueue_marked_children` names them, and the Kueue
fix renews them (`agent.remediation.kueue_steps`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from agent.model.cluster import ZONE_LABEL
from agent.model.workload import JOBSET, KUEUE, TRAINJOB_PATCH_MANAGER
from agent.remediation.plan import Target
from agent.remediation.template import TemplateChange, TemplateState, apply_merge_patch

MANAGER = TRAINJOB_PATCH_MANAGER  # zonemedic's runtime-patch entry (a domain-prefixed name)
RUNTIME_PATCHES = "runtimePatches"
POD_TEMPLATE_OVERRIDES = "podTemplateOverrides"
REPLICATED_JOBS = "replicatedJobs"
REPLICATED_JOB_LABEL = JOBSET.labels.replica_type
# the pod-template annotations Kueue reads or writes: a child Job keeping one its replicated
# job's template no longer has (or has with another value) is stale for Kueue
KUEUE_MARKS = (KUEUE.topology_annotation, KUEUE.preferred_annotation,
               KUEUE.unconstrained_annotation, KUEUE.group_annotation, KUEUE.workload_annotation)


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = obj.get("spec") or {}
    return found


def _list(obj: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    return [copy.deepcopy(dict(e)) for e in _spec(obj).get(key) or [] if isinstance(e, Mapping)]


def _override(target: Target) -> Mapping[str, Any]:
    assert target.override is not None, "a SUSPEND_PATCH_RESUME target records its override"
    return target.override


def field_of(target: Target) -> str:
    return str(_override(target)["field"])


def entries_of(target: Target) -> list[dict[str, Any]]:
    return [copy.deepcopy(dict(e)) for e in _override(target).get("entries") or []]


def pod_template(jobset: Mapping[str, Any], replica: str) -> Mapping[str, Any]:
    """The pod template of the JobSet's replicated job `replica` (empty when it has none)."""
    for rjob in _spec(jobset).get(REPLICATED_JOBS) or []:
        if isinstance(rjob, Mapping) and rjob.get("name") == replica:
            found: Mapping[str, Any] = ((rjob.get("template") or {}).get("spec") or {}).get(
                "template") or {}
            return found
    return {}


def _without_time(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "time"}


# --- building what zonemedic writes ---------------------------------------------------------


def runtime_patch_entry(changes: Sequence[TemplateChange]) -> dict[str, Any]:
    """zonemedic's `runtimePatches` entry carrying `changes` (one per replicated job)."""
    rjobs = [{"name": c.replica, "template": {"spec": {"template": c.fragment()}}} for c in changes]
    return {"manager": MANAGER,
            "trainingRuntimeSpec": {"template": {"spec": {REPLICATED_JOBS: rjobs}}}}  # fmt: skip


def pod_template_overrides(changes: Sequence[TemplateChange]) -> list[dict[str, Any]]:
    """zonemedic's `podTemplateOverrides` entries carrying `changes` (one per replicated job)."""
    out = []
    for change in changes:
        fragment = change.fragment()
        entry: dict[str, Any] = {"targetJobs": [{"name": change.replica}]}
        if fragment.get("metadata"):
            entry["metadata"] = fragment["metadata"]
        if fragment.get("spec"):
            entry["spec"] = fragment["spec"]
        out.append(entry)
    return out


def _with_suspend(spec: dict[str, Any], suspend: bool | None) -> dict[str, Any]:
    if suspend is not None:
        spec["suspend"] = suspend
    return {"spec": spec}


def forward_patch(target: Target, obj: Mapping[str, Any], *, suspend: bool | None) -> dict[str, Any]:
    """The merge patch writing the plan's changes into the live object `obj` (and `suspend`,
    when not None)."""
    kind = field_of(target)
    if kind == RUNTIME_PATCHES:
        others = [e for e in _list(obj, kind) if e.get("manager") != MANAGER]
        return _with_suspend({kind: [*others, *entries_of(target)]}, suspend)
    if kind == POD_TEMPLATE_OVERRIDES:
        live = _list(obj, kind)
        return _with_suspend({kind: [*live, *(e for e in entries_of(target) if e not in live)]},
                             suspend)  # fmt: skip
    return _with_suspend({REPLICATED_JOBS: _patched_rjobs(target, obj, restore=False)}, suspend)


def restore_patch(target: Target, obj: Mapping[str, Any], *, suspend: bool | None) -> dict[str, Any]:
    """The merge patch taking the plan's changes back out of the live object `obj`."""
    kind = field_of(target)
    if kind == RUNTIME_PATCHES:
        return _with_suspend({kind: [e for e in _list(obj, kind) if e.get("manager") != MANAGER]},
                             suspend)  # fmt: skip
    if kind == POD_TEMPLATE_OVERRIDES:
        ours = entries_of(target)
        return _with_suspend({kind: [e for e in _list(obj, kind) if e not in ours]}, suspend)
    return _with_suspend({REPLICATED_JOBS: _patched_rjobs(target, obj, restore=True)}, suspend)


def _patched_rjobs(target: Target, obj: Mapping[str, Any], *, restore: bool) -> list[dict[str, Any]]:
    by_replica = {c.replica: c for c in target.changes}
    out = _list(obj, REPLICATED_JOBS)
    for rjob in out:
        change = by_replica.get(str(rjob.get("name")))
        if change is None:
            continue
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        job_spec["template"] = apply_merge_patch(job_spec.get("template") or {},
                                                 change.fragment(restore=restore))  # fmt: skip
    return out


# --- reading back what is live --------------------------------------------------------------


def override_state(target: Target, obj: Mapping[str, Any]) -> TemplateState:
    """Whether the live object holds zonemedic's changes (PLANNED), none of them (ORIGINAL), or
    something else (OTHER): its own entries for a TrainJob, the templates for a JobSet."""
    kind = field_of(target)
    if kind == RUNTIME_PATCHES:
        ours = [e for e in _list(obj, kind) if e.get("manager") == MANAGER]
        if not ours:
            return TemplateState.ORIGINAL
        planned = entries_of(target)
        return (TemplateState.PLANNED if [_without_time(e) for e in ours] == planned
                else TemplateState.OTHER)  # fmt: skip
    if kind == POD_TEMPLATE_OVERRIDES:
        live = _list(obj, kind)
        present = [e in live for e in entries_of(target)]
        if present and all(present):
            return TemplateState.PLANNED
        return TemplateState.ORIGINAL if not any(present) else TemplateState.OTHER
    return templates_state(target, obj)


def templates_state(target: Target, jobset: Mapping[str, Any]) -> TemplateState:
    """Whether the JobSet's pod templates hold the planned values, the original ones, or other."""
    states = {c.state_of(pod_template(jobset, c.replica)) for c in target.changes}
    if not states:
        return TemplateState.PLANNED
    return states.pop() if len(states) == 1 else TemplateState.OTHER


def _added_tolerations(change: TemplateChange) -> list[Any]:
    before = change.before.get("tolerations") or []
    return [t for t in change.after.get("tolerations") or [] if t not in before]


def stale(change: TemplateChange, job_template: Mapping[str, Any]) -> bool:
    """Whether a child Job's pod template keeps what the JobSet's resume merge cannot take back:
    the planned zone nodeSelector where the original template had none, or a toleration the plan
    added."""
    spec = job_template.get("spec") or {}
    if ("nodeSelector" in change.after and change.before.get("nodeSelector") is None
            and (spec.get("nodeSelector") or {}).get(ZONE_LABEL) == change.after["nodeSelector"]):
        return True
    live = spec.get("tolerations") or []
    return any(t in live for t in _added_tolerations(change))


def stale_children(target: Target, jobs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The child Jobs (of the replicated jobs the plan changed) that keep a planned value once
    the templates are restored: they must be recreated. Jobs being deleted are left out."""
    by_replica = {c.replica: c for c in target.changes}
    out = []
    for job in jobs:
        meta = job.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        change = by_replica.get(str((meta.get("labels") or {}).get(REPLICATED_JOB_LABEL)))
        if change is not None and stale(change, (job.get("spec") or {}).get("template") or {}):
            out.append(job)
    return out


def active_jobs(jobset: Mapping[str, Any] | None) -> int:
    """Replicated jobs of the JobSet with active Jobs (what the Trainer's webhook checks)."""
    if jobset is None:
        return 0
    return sum(1 for s in (jobset.get("status") or {}).get("replicatedJobsStatus") or []
               if int(s.get("active", 0) or 0) > 0)  # fmt: skip


def kueue_marked_children(jobset: Mapping[str, Any],
                          jobs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:  # fmt: skip
    """The child Jobs whose pod template keeps a Kueue annotation (`KUEUE_MARKS`) that their
    replicated job's template in `jobset` does not have with that value. Jobs being deleted are
    left out."""
    out = []
    for job in jobs:
        meta = job.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        replica = str((meta.get("labels") or {}).get(REPLICATED_JOB_LABEL))
        wanted = (pod_template(jobset, replica).get("metadata") or {}).get("annotations") or {}
        kept = ((((job.get("spec") or {}).get("template") or {}).get("metadata") or {})
                .get("annotations") or {})  # fmt: skip
        if any(key in kept and kept[key] != wanted.get(key) for key in KUEUE_MARKS):
            out.append(job)
    return out
