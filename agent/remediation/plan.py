"""The remediation plan as data: what it changes on which object, what it was computed from, its diff.

Who uses it: the planners build it (`agent.remediation.planner.plan_remediation`, through the
family planners `agent.remediation.training_plan` and `agent.remediation.group_plan`); the run
(`agent.remediation.remediator` and its steps) records it as JSON on the incident, reads it back and
applies it; the preview (`agent.remediation.preview_action`) and whatever shows it to people
(`incidents show`, chat) read it. Also what a plan is made from (`LiveObjects`, as read from the
API) and how pods are placed (`placement`). Pure: plain data in, plain data out; it does not
plan, read the cluster, write it, or read a clock.

A `Plan` holds one `Target` per object it changes, each with how it moves (`TargetAction`: a
training job is suspended with its templates patched and resumed, a Deployment's template is
patched for a rollout, a batch Job is deleted and recreated), its identity when planned (uid,
resourceVersion) and its template changes (`agent.remediation.template.TemplateChange`: the
fields before and after, so the restore patch is exact); the `Preconditions` the run re-checks
before its first write; a readable unified diff; and how many pods it (re)creates and the whole
job runs once co-located (`gang`: what verification waits for).
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agent.model.cluster import ZONE_LABEL
from agent.model.handover import Handover
from agent.model.job import JobRef
from agent.model.kueue import NO_KUEUE, KueueObjects
from agent.model.ownership import ObjectOwnership
from agent.model.verdict import Verdict
from agent.model.workload import JobKind, workload
from agent.remediation.room import node_labels
from agent.remediation.template import (
    TemplateChange,
    TemplateState,
    merge_into,
    meta_of,
    rendered,
)
from agent.remediation.trainer_release import TrainerOverrides


class TargetAction(StrEnum):
    SUSPEND_RESUME = "suspend_resume"  # a Kubeflow job: templates + suspend, then resume
    ROLLOUT = "rollout"  # a Deployment: template patch, the rollout replaces the pods
    RECREATE = "recreate"  # a batch Job: delete, then create with the patched template
    # Kueue: the job's Workload deactivated (`spec.active: false`), later deleted to be rebuilt
    REQUEUE = "requeue"
    ANNOTATE = "annotate"  # a Kueue job's templates: Kueue's TAS annotations, while Kueue holds it
    # a TrainJob or a JobSet: suspend, wait for its pods to go, patch (its own runtime patch, or
    # the replicated jobs' templates), resume
    SUSPEND_PATCH_RESUME = "suspend_patch_resume"


@dataclass(frozen=True)
class Target:
    """One object the plan changes, how, and its identity when planned."""

    action: TargetAction
    api_version: str
    kind: str
    plural: str
    namespace: str
    name: str
    uid: str | None
    resource_version: str | None
    changes: tuple[TemplateChange, ...]
    manifest: Mapping[str, Any] | None = None  # RECREATE: the Job to create
    original: Mapping[str, Any] | None = None  # RECREATE: the Job to create on rollback
    # SUSPEND_PATCH_RESUME: where the changes are written (`agent.remediation.jobset_patch`)
    override: Mapping[str, Any] | None = None

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def template_patch(self, *, restore: bool = False) -> dict[str, Any]:
        """Every change of this target as one merge patch from the object root."""
        out: dict[str, Any] = {}
        for change in self.changes:
            merge_into(out, change.nested(restore=restore))
        return out

    def state_of(self, obj: Mapping[str, Any]) -> TemplateState:
        """PLANNED or ORIGINAL when every change reads so on the live object (a target without
        changes, a finished Job recreated as it is, reads PLANNED), else OTHER."""
        states = {c.state_of(obj) for c in self.changes}
        if not states:
            return TemplateState.PLANNED
        return states.pop() if len(states) == 1 else TemplateState.OTHER

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action.value, "api_version": self.api_version, "kind": self.kind,
            "plural": self.plural, "namespace": self.namespace, "name": self.name,
            "uid": self.uid, "resource_version": self.resource_version,
            "changes": [c.to_dict() for c in self.changes],
            "manifest": copy.deepcopy(dict(self.manifest)) if self.manifest is not None else None,
            "original": copy.deepcopy(dict(self.original)) if self.original is not None else None,
            "override": copy.deepcopy(dict(self.override)) if self.override is not None else None,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Target:
        return cls(
            action=TargetAction(data["action"]), api_version=str(data["api_version"]),
            kind=str(data["kind"]), plural=str(data["plural"]), namespace=str(data["namespace"]),
            name=str(data["name"]), uid=data.get("uid"), resource_version=data.get("resource_version"),
            changes=tuple(TemplateChange.from_dict(c) for c in data["changes"]),
            manifest=data.get("manifest"), original=data.get("original"),
            override=data.get("override"),
        )  # fmt: skip


@dataclass(frozen=True)
class Preconditions:
    """What the plan was computed from; the executor aborts when the job no longer matches."""

    uid: str | None
    resource_version: str | None
    verdict: Verdict
    placement: Mapping[str, str | None]  # pod name -> zone

    def to_dict(self) -> dict[str, Any]:
        return {"uid": self.uid, "resource_version": self.resource_version,
                "verdict": self.verdict.value, "placement": dict(self.placement)}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Preconditions:
        return cls(uid=data.get("uid"), resource_version=data.get("resource_version"),
                   verdict=Verdict(data["verdict"]), placement=dict(data["placement"]))  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """Patches that co-locate one job in `target_zone`, their inverse, and a readable diff."""

    job: JobRef
    target_zone: str
    preconditions: Preconditions
    targets: tuple[Target, ...]
    diff: str
    mirror_keys: tuple[str, ...] = ()
    pods: int = 0  # pods the plan (re)creates
    gang: int = 0  # pods the whole job runs once co-located (0: not recorded, see `members`)
    zones: tuple[str, ...] = ()  # a Kueue plan: the zones Kueue may pick (policies allow them)
    owners: tuple[ObjectOwnership, ...] = ()  # who owns each target (read when planned)
    handovers: tuple[Handover, ...] = ()  # each changed target's fix for its source

    @property
    def kueue(self) -> bool:
        """True for a plan that re-places the job through Kueue (a REQUEUE target)."""
        return any(t.action is TargetAction.REQUEUE for t in self.targets)

    @property
    def kubeflow(self) -> bool:
        return self.job.kind is not JobKind.GROUP

    @property
    def members(self) -> int:
        """The pods verification waits for: the gang, else (a plan recorded without it) every
        pod the plan (re)creates for a Kubeflow job, the pods placed at planning for a group."""
        if self.gang:
            return self.gang
        return self.pods if self.kubeflow else len(self.preconditions.placement)

    def job_patch(
        self, *, resource_version: str | None, suspend: bool, restore: bool = False
    ) -> dict[str, Any]:
        """A Kubeflow job's merge patch: optimistic lock, `runPolicy.suspend` and the templates
        (planned, or the originals with `restore`)."""
        (target,) = [t for t in self.targets if t.action is TargetAction.SUSPEND_RESUME]
        patch = target.template_patch(restore=restore)
        merge_into(patch, workload(self.job.kind).suspension.patch(suspend))
        if resource_version is not None:
            patch["metadata"] = {"resourceVersion": resource_version}
        return patch

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": {"kind": self.job.kind.value, "namespace": self.job.namespace,
                    "name": self.job.name},
            "target_zone": self.target_zone,
            "preconditions": self.preconditions.to_dict(),
            "targets": [t.to_dict() for t in self.targets],
            "diff": self.diff,
            "mirror_keys": list(self.mirror_keys),
            "pods": self.pods,
            "gang": self.gang,
            "zones": list(self.zones),
            "owners": [o.to_dict() for o in self.owners],
            "handovers": [h.to_dict() for h in self.handovers],
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        job = data["job"]
        return cls(
            job=JobRef(JobKind(job["kind"]), str(job["namespace"]), str(job["name"])),
            target_zone=str(data["target_zone"]),
            preconditions=Preconditions.from_dict(data["preconditions"]),
            targets=tuple(Target.from_dict(t) for t in data["targets"]),
            diff=str(data["diff"]),
            mirror_keys=tuple(data.get("mirror_keys") or ()),
            pods=int(data.get("pods") or 0),
            gang=int(data.get("gang") or 0),
            zones=tuple(data.get("zones") or ()),
            owners=tuple(ObjectOwnership.from_dict(o) for o in data.get("owners") or ()),
            handovers=tuple(Handover.from_dict(h) for h in data.get("handovers") or ()),
        )


@dataclass(frozen=True)
class Refusal:
    """Why no plan: said to people as is; nothing was or may be written."""

    job: JobRef
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"job": str(self.job), "reason": self.reason}


@dataclass(frozen=True)
class LiveObjects:
    """What the plan reads, as the API returns it (plain dicts).

    `job`: the Kubeflow job object (None for a generic group). `workloads`: for a group, the
    Deployments, ReplicaSets and batch Jobs of its namespace. `pods`: the job's pods. `nodes`:
    every node. `bound_pods`: live pods bound to the target zone's nodes (any namespace), for the
    room check. `finished_pods`: for a group, its members that finished (Succeeded or Failed):
    how a worker Job that gave up is found. `materialised`: a TrainJob's JobSet (its pod
    templates). `trainer`: for a TrainJob, the override field the installed Trainer serves.
    `queued`, `kueue`: for a Kueue job, its Workload and the cluster's Kueue objects.
    """

    job: Mapping[str, Any] | None
    pods: Sequence[Mapping[str, Any]]
    nodes: Sequence[Mapping[str, Any]]
    bound_pods: Sequence[Mapping[str, Any]]
    workloads: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    finished_pods: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    queued: Mapping[str, Any] | None = None  # a Kueue job: its Workload
    kueue: KueueObjects = NO_KUEUE  # a Kueue job: the cluster's Kueue objects (its quota)
    materialised: Mapping[str, Any] | None = None  # a TrainJob's JobSet
    trainer: TrainerOverrides | None = None  # a TrainJob: what the installed Trainer serves


# ------------------------------------------------------------------------------------------------
# the diff


def render_diff(targets: Sequence[Target]) -> str:
    """A unified diff per changed template (live -> planned) with a header saying how it moves."""
    chunks: list[str] = []
    for target in targets:
        where = f"{target.kind} {target.namespace}/{target.name}"
        how = {
            TargetAction.SUSPEND_RESUME: "suspend, patch the templates, resume (pods restart together)",
            TargetAction.ROLLOUT: "patch the template (a rollout replaces its pods)",
            TargetAction.RECREATE: "delete and recreate (its template is immutable)",
            TargetAction.REQUEUE: ("spec.active: false (Kueue evicts it and suspends the job), "
                                   "then deleted once the job is annotated: Kueue rebuilds it and "
                                   "re-queues the job (it may wait for quota)"),
            TargetAction.ANNOTATE: ("annotate the templates for Kueue Topology Aware Scheduling "
                                    "while Kueue holds the job suspended (no suspend, no "
                                    "nodeSelector of zonemedic's)"),
            TargetAction.SUSPEND_PATCH_RESUME: (
                "suspend, wait for its pods to go, patch, resume (pods restart together)"),
        }[target.action]
        if target.action is TargetAction.SUSPEND_PATCH_RESUME and target.override:
            how = _override_how(target.override)
        if target.action is TargetAction.ANNOTATE and target.override:
            how = _annotate_how(target.override)
        if target.action is TargetAction.RECREATE and not target.changes:
            how = "delete and recreate as it is (it finished or lost its pods; the gang needs them)"
        chunks.append(f"# {where}: {how}")
        for change in target.changes:
            label = f"{where} {change.replica}"
            chunks.extend(
                difflib.unified_diff(
                    rendered(change.before), rendered(change.after),
                    fromfile=f"{label} (live)", tofile=f"{label} (planned)", lineterm="",
                )
            )  # fmt: skip
    return "\n".join(chunks)


def _annotate_how(override: Mapping[str, Any]) -> str:
    """Where a Kueue plan annotates a TrainJob or a JobSet, in words."""
    where = (f"set its own {override.get('field')} entry (manager {override['manager']}) with "
             "Kueue's TAS annotations" if override.get("manager")
             else "annotate its replicated jobs' pod templates for Kueue Topology Aware Scheduling")
    return (f"{where} while Kueue holds it suspended, then renew the suspended child Jobs that "
            "keep Kueue's old marks (no suspend, no nodeSelector of zonemedic's)")


def _override_how(override: Mapping[str, Any]) -> str:
    """How a SUSPEND_PATCH_RESUME target is patched, in words, from its `override` record."""
    where = str(override.get("field"))
    if override.get("manager"):
        where = f"its own {where} entry (manager {override['manager']})"
    elif where == "replicatedJobs":
        where = "its replicated jobs' pod templates"
    else:
        where = f"its own {where} entries"
    resume = ("patch and resume in one request" if override.get("resume_with_patch")
              else "patch, then resume")  # fmt: skip
    return f"suspend, wait for its pods to go, set {where}; {resume} (pods restart together)"


# ------------------------------------------------------------------------------------------------
# placement


def _zone_of_pods(
    pods: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]
) -> dict[str, str | None]:
    zone_of = {str(meta_of(n).get("name")): node_labels(n).get(ZONE_LABEL) for n in nodes}
    out: dict[str, str | None] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        where = (pod.get("spec") or {}).get("nodeName")
        out[str(meta_of(pod).get("name"))] = zone_of.get(where) if where else None
    return dict(sorted(out.items()))


def placement(
    pods: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]
) -> dict[str, str | None]:
    """Pod name -> zone of its node (None when unbound) for the live pods."""
    return _zone_of_pods(pods, nodes)
