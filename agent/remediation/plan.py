"""The remediation plan: a finding plus the live objects -> the patches that co-locate the job.

Called by `agent.remediation.execute` (which applies the plan) and, through the recorded plan, by
whatever shows it to people (`incidents show`, chat). Pure: plain data in (the finding and the
objects as read from the API: job, pods, nodes, pods bound to nodes), plain data out (`Plan` or
`Refusal`). It does not read the cluster, write it, or read a clock.

Rules, for every pod template the plan touches (only the fields below change; everything else is
kept as it is):
- zone pin: `nodeSelector[topology.kubernetes.io/zone] = target` (a map: a merge patch adds the key);
  where the template has required nodeAffinity terms, the zone expression goes into EVERY
  `nodeSelectorTerm` (terms are ORed), replacing any zone expression the term had;
- training kinds only, where the kind's descriptor lets `spec.affinity` change while suspended
  (every Kubeflow kind): a required `podAffinity` term on the zone key selecting the job's own
  pods (its job-name label, `training.kubeflow.org/job-name`), appended to the template's
  existing required terms;
- tolerations: when no schedulable node of the target zone that matches the template's other
  nodeSelector keys and its (zone-pinned) required node affinity accepts the template as it is,
  the tolerations for those nodes' NoSchedule and NoExecute taints (read from the nodes) are
  appended to the template's own;
- the zone-mirroring pod label (the resolved `diagnosis.pod_zone_label` keys) is set to the target
  zone where the template carries it;
- a zone-keyed topologySpreadConstraint is never added; a template that already has a
  `DoNotSchedule` one cannot be co-located, so the plan refuses.
A merge patch replaces arrays whole, so tolerations, nodeSelectorTerms and podAffinity terms are
built from the live object and sent complete.

Kubeflow jobs (every kubeflow.org/v1 kind and the v2beta1 MPIJob) get one merge patch of every
replica template (where the kind's descriptor says they are), applied with the descriptor's
suspend (`runPolicy.suspend`, see `Plan.job_patch`). For the v2beta1 launcher, mpi-operator
re-syncs only nodeSelector and tolerations into its batch Job on resume: the zone pin
(nodeSelector) is what moves it; its podAffinity and labels apply to new launchers. Generic
groups move only what is outside the target zone, each workload as its owner kind's descriptor
says: a Deployment's template is patched (its rollout moves the pods; a ReplicaSet's pods move
through its Deployment), a batch Job (template immutable) is recreated from its live manifest
with the patched template, server-set fields stripped; Jobs already in the target zone are left
alone, except a worker Job that finished (failed, e.g. its workers gave up while blocked, or
completed) or has no live pod left: the gang cannot run without it, so it is recreated too
(pinned to the target zone when its template is not). `Plan.gang` is how many pods the whole job runs once co-located: what
verification waits for.

Refusals (nothing may be written): the finding is not a remediable split, the job is Kueue-managed
(for a group: any Deployment or batch Job the plan writes, or a pod of theirs, carries Kueue's
queue label or annotation, its managed label, or another controller's `managedBy`) or a Kubeflow
job finished, a template spreads across zones, or the target zone lacks room for every pod the plan
(re)creates, judged on the pods as they will be after the patch: zone pin, added podAffinity and
tolerations, mirror labels, and the operator's labels read from the live pods (see
`agent.remediation.room`).
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import yaml

from agent.model.cluster import ZONE_LABEL
from agent.model.finding import REMEDIABLE_VERDICTS, Finding
from agent.model.job import JobRef
from agent.model.scheduling import required_node_affinity_matches
from agent.model.verdict import Verdict
from agent.model.workload import (
    BATCH_JOB,
    GangLabels,
    JobKind,
    OwnerMove,
    TemplateLayout,
    owner_kind,
    workload,
)
from agent.remediation.guard import kueue_reason
from agent.remediation.room import (
    PodNeed,
    QuantityError,
    blocking_taints,
    check_room,
    node_labels,
    node_name,
    pod_spec_requests,
    schedulable,
    tolerates,
)

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
# Labels the batch Job controller adds to a Job's selector and template; a recreated Job gets
# fresh ones from the server.
JOB_CONTROLLER_LABELS = frozenset(
    {"controller-uid", "batch.kubernetes.io/controller-uid", "job-name", "batch.kubernetes.io/job-name"}
)
_SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
                    "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds")  # fmt: skip


class TargetAction(StrEnum):
    SUSPEND_RESUME = "suspend_resume"  # a Kubeflow job: templates + suspend, then resume
    ROLLOUT = "rollout"  # a Deployment: template patch, the rollout replaces the pods
    RECREATE = "recreate"  # a batch Job: delete, then create with the patched template


class TemplateState(StrEnum):
    PLANNED = "planned"
    ORIGINAL = "original"
    OTHER = "other"


@dataclass(frozen=True)
class TemplateChange:
    """The touched fields of one pod template, before (live) and after (planned).

    `before`/`after` hold only touched fields, in a flat form: `labels` (key -> value or None),
    `nodeSelector` (the zone value or None), `nodeSelectorTerms`, `podAffinity` (the required
    terms or None) and `tolerations` (the list or None). None means absent.
    """

    replica: str
    path: tuple[str, ...]
    before: Mapping[str, Any]
    after: Mapping[str, Any]
    absent: tuple[str, ...] = ()  # `nodeSelector`, `affinity`, `podAffinity`: not in the live template

    def fragment(self, *, restore: bool = False) -> dict[str, Any]:
        """The merge patch of the template (None values delete the field). Restoring deletes the
        maps the forward patch created, so the template reads back exactly as it was."""
        if not restore:
            return _template_fragment(self.after, drop_none=False)
        out = _template_fragment(self.before, drop_none=False)
        spec = out.setdefault("spec", {})
        if "nodeSelector" in self.absent and "nodeSelector" in self.before:
            spec["nodeSelector"] = None
        if "affinity" in self.absent:
            spec["affinity"] = None
        elif "podAffinity" in self.absent and "podAffinity" in self.before:
            spec.setdefault("affinity", {})["podAffinity"] = None
        return out

    def nested(self, *, restore: bool = False) -> dict[str, Any]:
        """The template fragment nested at `path` from the object root."""
        out: dict[str, Any] = self.fragment(restore=restore)
        for key in reversed(self.path):
            out = {key: out}
        return out

    def state_of(self, obj: Mapping[str, Any]) -> TemplateState:
        """Whether the live object's template holds the planned or the original values."""
        template: Any = obj
        for key in self.path:
            template = template.get(key) if isinstance(template, Mapping) else None
        current = _touched(template if isinstance(template, Mapping) else {}, self.after)
        if current == _normal(self.after):
            return TemplateState.PLANNED
        if current == _normal(self.before):
            return TemplateState.ORIGINAL
        return TemplateState.OTHER

    def to_dict(self) -> dict[str, Any]:
        return {"replica": self.replica, "path": list(self.path), "before": dict(self.before),
                "after": dict(self.after), "absent": list(self.absent)}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TemplateChange:
        return cls(replica=str(data["replica"]), path=tuple(data["path"]),
                   before=dict(data["before"]), after=dict(data["after"]),
                   absent=tuple(data.get("absent") or ()))  # fmt: skip


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
            _merge_into(out, change.nested(restore=restore))
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
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Target:
        return cls(
            action=TargetAction(data["action"]), api_version=str(data["api_version"]),
            kind=str(data["kind"]), plural=str(data["plural"]), namespace=str(data["namespace"]),
            name=str(data["name"]), uid=data.get("uid"), resource_version=data.get("resource_version"),
            changes=tuple(TemplateChange.from_dict(c) for c in data["changes"]),
            manifest=data.get("manifest"), original=data.get("original"),
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
        _merge_into(patch, workload(self.job.kind).suspension.patch(suspend))
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
    how a worker Job that gave up is found.
    """

    job: Mapping[str, Any] | None
    pods: Sequence[Mapping[str, Any]]
    nodes: Sequence[Mapping[str, Any]]
    bound_pods: Sequence[Mapping[str, Any]]
    workloads: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    finished_pods: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


class _RefusedError(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# small dict helpers


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = obj.get("metadata") or {}
    return found


def _merge_into(base: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """Deep-merge `patch` into `base` (maps merge, everything else replaces); in place."""
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge_into(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch of `target` by `patch` (a new value; inputs untouched)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(copy.deepcopy(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply_merge_patch(out.get(key), value)
    return out


def _template_fragment(values: Mapping[str, Any], *, drop_none: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    labels = values.get("labels")
    if labels:
        shown = {k: v for k, v in labels.items() if v is not None or not drop_none}
        if shown:
            out["metadata"] = {"labels": shown}
    spec: dict[str, Any] = {}
    if "nodeSelector" in values and (values["nodeSelector"] is not None or not drop_none):
        spec["nodeSelector"] = {ZONE_LABEL: values["nodeSelector"]}
    if "tolerations" in values and (values["tolerations"] is not None or not drop_none):
        spec["tolerations"] = copy.deepcopy(values["tolerations"])
    affinity: dict[str, Any] = {}
    if "nodeSelectorTerms" in values and (values["nodeSelectorTerms"] is not None or not drop_none):
        terms = values["nodeSelectorTerms"]
        affinity["nodeAffinity"] = {
            REQUIRED: {"nodeSelectorTerms": copy.deepcopy(terms)} if terms is not None else None
        }
    if "podAffinity" in values and (values["podAffinity"] is not None or not drop_none):
        affinity["podAffinity"] = {REQUIRED: copy.deepcopy(values["podAffinity"])}
    if affinity:
        spec["affinity"] = affinity
    if spec:
        out["spec"] = spec
    return out


def _read(template: Mapping[str, Any]) -> dict[str, Any]:
    """The touchable fields of a template in the flat form of `TemplateChange`."""
    spec = template.get("spec") or {}
    affinity = spec.get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(REQUIRED) or {}
    return {
        "labels": dict(_meta(template).get("labels") or {}),
        "nodeSelector": (spec.get("nodeSelector") or {}).get(ZONE_LABEL),
        "nodeSelectorTerms": required.get("nodeSelectorTerms") or None,
        "podAffinity": (affinity.get("podAffinity") or {}).get(REQUIRED) or None,
        "tolerations": spec.get("tolerations") or None,
    }


def _normal(values: Mapping[str, Any]) -> dict[str, Any]:
    """Absent and empty are the same (an emptied list or map reads back as absent)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key == "labels":
            out[key] = {k: v for k, v in (value or {}).items()}
        else:
            out[key] = value or None
    return out


def _touched(template: Mapping[str, Any], like: Mapping[str, Any]) -> dict[str, Any]:
    live = _read(template)
    out: dict[str, Any] = {}
    for key in like:
        if key == "labels":
            out[key] = {k: live["labels"].get(k) for k in like["labels"]}
        else:
            out[key] = live[key] or None
    return out


# ------------------------------------------------------------------------------------------------
# retargeting one template


def _pin_term(term: Mapping[str, Any], zone: str) -> dict[str, Any]:
    exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") != ZONE_LABEL]
    exprs.append({"key": ZONE_LABEL, "operator": "In", "values": [zone]})
    return {**copy.deepcopy(dict(term)), "matchExpressions": exprs}


def _toleration(taint: Mapping[str, Any]) -> dict[str, Any]:
    value = taint.get("value") or ""
    tol: dict[str, Any] = {"key": taint.get("key"), "operator": "Equal" if value else "Exists"}
    if value:
        tol["value"] = value
    tol["effect"] = taint.get("effect")
    return tol


def _spreads_across_zones(spec: Mapping[str, Any]) -> bool:
    for tsc in spec.get("topologySpreadConstraints") or []:
        if tsc.get("topologyKey") == ZONE_LABEL and (
            tsc.get("whenUnsatisfiable") or "DoNotSchedule"
        ) == "DoNotSchedule":
            return True
    return False


def _retarget(
    template: Mapping[str, Any],
    *,
    replica: str,
    path: tuple[str, ...],
    zone: str,
    zone_nodes: Sequence[Mapping[str, Any]],
    mirror_keys: Sequence[str],
    affinity_to: tuple[str, str] | None,
) -> TemplateChange | None:
    spec = template.get("spec") or {}
    if _spreads_across_zones(spec):
        raise _RefusedError(
            f"{replica}: its topologySpreadConstraint on {ZONE_LABEL} (DoNotSchedule) spreads the "
            "pods across zones; co-locating it would leave them unschedulable"
        )
    live = _read(template)
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    labels = {k: zone for k in mirror_keys if k in live["labels"] and live["labels"][k] != zone}
    if labels:
        before["labels"] = {k: live["labels"][k] for k in labels}
        after["labels"] = labels
    if live["nodeSelector"] != zone:
        before["nodeSelector"] = live["nodeSelector"]
        after["nodeSelector"] = zone
    terms = live["nodeSelectorTerms"]
    if terms:
        pinned = [_pin_term(t, zone) for t in terms]
        if pinned != terms:
            before["nodeSelectorTerms"] = copy.deepcopy(terms)
            after["nodeSelectorTerms"] = pinned
    if affinity_to is not None:
        term = {"labelSelector": {"matchLabels": {affinity_to[0]: affinity_to[1]}},
                "topologyKey": ZONE_LABEL}  # fmt: skip
        existing = list(live["podAffinity"] or [])
        if term not in existing:
            before["podAffinity"] = copy.deepcopy(live["podAffinity"])
            after["podAffinity"] = [*copy.deepcopy(existing), term]
    tolerations = list(live["tolerations"] or [])
    other_selector = {
        k: v for k, v in (spec.get("nodeSelector") or {}).items() if k != ZONE_LABEL
    }
    placement: dict[str, Any] = {"nodeSelector": other_selector}
    terms_after = after.get("nodeSelectorTerms", terms)
    if terms_after is not None:
        placement["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms_after}}}
    candidates = [
        n for n in zone_nodes
        if schedulable(n) and required_node_affinity_matches(placement, node_labels(n), node_name(n))
    ]  # fmt: skip
    if candidates and not any(
        all(tolerates(tolerations, t) for t in blocking_taints(n)) for n in candidates
    ):
        added: list[dict[str, Any]] = []
        for node in candidates:
            for taint in blocking_taints(node):
                if not tolerates(tolerations + added, taint):
                    added.append(_toleration(taint))
        before["tolerations"] = copy.deepcopy(live["tolerations"])
        after["tolerations"] = [*copy.deepcopy(tolerations), *added]
    if not after:
        return None
    absent = tuple(
        name
        for name, missing in (
            ("nodeSelector", "nodeSelector" not in spec),
            ("affinity", "affinity" not in spec),
            ("podAffinity", "podAffinity" not in (spec.get("affinity") or {})),
        )
        if missing
    )
    return TemplateChange(replica=replica, path=path, before=before, after=after, absent=absent)


def _needs(
    name: str,
    template: Mapping[str, Any],
    change: TemplateChange | None,
    count: int,
    *,
    namespace: str,
    relabel: Mapping[str, str],
    pod_labels: Callable[[int], Mapping[str, str]] = lambda _: {},
) -> list[PodNeed]:
    """The pods a template makes, as they will be after the patch: its (patched) nodeSelector,
    tolerations and affinity; labels = what the live pod `i` carries besides the template
    (operator labels), the patched template's labels, then `relabel` (the zone-mirroring keys
    set to the target zone) where the pod carries the key."""
    spec = template.get("spec") or {}
    values = apply_merge_patch(template, change.fragment()) if change is not None else template
    patched = values.get("spec") or {}
    template_labels = _meta(values).get("labels") or {}
    requests = pod_spec_requests(spec)
    selector = dict(patched.get("nodeSelector") or {})
    tolerations = tuple(patched.get("tolerations") or ())
    affinity = dict(patched.get("affinity") or {})
    out: list[PodNeed] = []
    for i in range(count):
        labels = {**pod_labels(i), **template_labels}
        labels.update({k: v for k, v in relabel.items() if k in labels})
        out.append(PodNeed(
            name=f"{name}-{i}" if count > 1 else name, requests=requests, node_selector=selector,
            tolerations=tolerations, namespace=namespace, labels=labels, affinity=affinity,
        ))  # fmt: skip
    return out


def _replica_labels(
    pods: Sequence[Mapping[str, Any]], *, job: str, replica: str, gang: GangLabels
) -> Callable[[int], Mapping[str, str]]:
    """Labels of the Kubeflow pod `i` of `replica` as its operator sets them: the live pod's
    (found by replica type or job role and index labels, or by its name `<job>-<type>-<i>`),
    else the job-name label alone."""
    rtype = replica.lower()
    by_index: dict[str, Mapping[str, str]] = {}
    for pod in pods:
        labels: Mapping[str, str] = _meta(pod).get("labels") or {}
        kind = labels.get(gang.replica_type) or (labels.get(gang.job_role) if gang.job_role else None)
        name = str(_meta(pod).get("name"))
        if kind is not None and kind.lower() == rtype:
            by_index.setdefault(labels.get(gang.replica_index, "0"), labels)
        elif kind is None and name.startswith(f"{job}-{rtype}-"):
            by_index.setdefault(name.rpartition("-")[2], labels)
    return lambda i: by_index.get(str(i)) or {gang.job_name: job}


# ------------------------------------------------------------------------------------------------
# the diff


def _render(values: Mapping[str, Any]) -> list[str]:
    view = _template_fragment(values, drop_none=True)
    if not view:
        return []
    text: str = yaml.safe_dump(view, sort_keys=True, default_flow_style=False)
    return text.splitlines()


def render_diff(targets: Sequence[Target]) -> str:
    """A unified diff per changed template (live -> planned) with a header saying how it moves."""
    chunks: list[str] = []
    for target in targets:
        where = f"{target.kind} {target.namespace}/{target.name}"
        how = {
            TargetAction.SUSPEND_RESUME: "suspend, patch the templates, resume (pods restart together)",
            TargetAction.ROLLOUT: "patch the template (a rollout replaces its pods)",
            TargetAction.RECREATE: "delete and recreate (its template is immutable)",
        }[target.action]
        if target.action is TargetAction.RECREATE and not target.changes:
            how = "delete and recreate as it is (it finished or lost its pods; the gang needs them)"
        chunks.append(f"# {where}: {how}")
        for change in target.changes:
            label = f"{where} {change.replica}"
            chunks.extend(
                difflib.unified_diff(
                    _render(change.before), _render(change.after),
                    fromfile=f"{label} (live)", tofile=f"{label} (planned)", lineterm="",
                )
            )  # fmt: skip
    return "\n".join(chunks)


# ------------------------------------------------------------------------------------------------
# planning


def _zone_of_pods(
    pods: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]
) -> dict[str, str | None]:
    zone_of = {str(_meta(n).get("name")): node_labels(n).get(ZONE_LABEL) for n in nodes}
    out: dict[str, str | None] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        where = (pod.get("spec") or {}).get("nodeName")
        out[str(_meta(pod).get("name"))] = zone_of.get(where) if where else None
    return dict(sorted(out.items()))


def placement(
    pods: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]
) -> dict[str, str | None]:
    """Pod name -> zone of its node (None when unbound) for the live pods."""
    return _zone_of_pods(pods, nodes)


def guard_reason(job: Mapping[str, Any], kind: JobKind) -> str | None:
    """Why a training job of `kind` must not be suspended/resumed by zonemedic, or None: its
    descriptor's Kueue queue label, a `managedBy` naming another controller, a finished
    condition."""
    found = workload(kind)
    meta = _meta(job)
    queue = (meta.get("labels") or {}).get(found.kueue.queue_label)
    if queue:
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


def plan_remediation(
    finding: Finding, live: LiveObjects, *, mirror_keys: Sequence[str] = ()
) -> Plan | Refusal:
    """The plan that co-locates the finding's job in its target zone, or why there is none."""
    ref = finding.job
    if finding.verdict not in REMEDIABLE_VERDICTS:
        return Refusal(ref, f"the job is {finding.verdict.value}, not split across zones "
                            "nor mislabelled")  # fmt: skip
    if not finding.remediable or finding.target_zone is None:
        why = "; ".join(finding.reasons) or "no target zone"
        return Refusal(ref, f"not remediable: {why}")
    zone = finding.target_zone
    try:
        if ref.kind is JobKind.GROUP:
            return _plan_group(finding, live, zone=zone, mirror_keys=mirror_keys)
        return _plan_kubeflow(finding, live, zone=zone, mirror_keys=mirror_keys)
    except _RefusedError as exc:
        return Refusal(ref, str(exc))
    except QuantityError as exc:
        return Refusal(ref, f"cannot read a resource quantity: {exc}")


def _zone_nodes(nodes: Sequence[Mapping[str, Any]], zone: str) -> list[Mapping[str, Any]]:
    return [n for n in nodes if node_labels(n).get(ZONE_LABEL) == zone]


def _room(
    needs: Sequence[PodNeed], live: LiveObjects, *, zone: str, replaced: frozenset[tuple[str, str]]
) -> None:
    reason = check_room(
        needs, zone=zone, zone_label=ZONE_LABEL, nodes=live.nodes, bound_pods=live.bound_pods,
        replaced=replaced,
    )  # fmt: skip
    if reason is not None:
        raise _RefusedError(reason)


def _pod_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = _meta(pod)
    return str(meta.get("namespace")), str(meta.get("name"))


def _plan_kubeflow(
    finding: Finding, live: LiveObjects, *, zone: str, mirror_keys: Sequence[str]
) -> Plan:
    ref = finding.job
    job = live.job
    if job is None:
        raise _RefusedError(f"{ref.kind} {ref.namespace}/{ref.name} was not found")
    guard = guard_reason(job, ref.kind)
    if guard is not None:
        raise _RefusedError(guard)
    kind = workload(ref.kind)
    if kind.templates.layout is not TemplateLayout.REPLICA_SPECS:
        raise _RefusedError(f"zonemedic cannot plan a {ref.kind}: its pod templates are "
                            f"{kind.templates.layout.value}, not replica specs")  # fmt: skip
    api_version = str(job.get("apiVersion") or kind.api_version)
    field_name = kind.templates.field
    specs = kind.templates.container(job) or {}
    if not specs:
        raise _RefusedError(f"the job has no {field_name}")
    zone_nodes = _zone_nodes(live.nodes, zone)
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
        change = _retarget(
            template, replica=str(replica), path=path, zone=zone, zone_nodes=zone_nodes,
            mirror_keys=mirror_keys, affinity_to=affinity,
        )  # fmt: skip
        if change is not None:
            changes.append(change)
        count = int((spec or {}).get("replicas", 1) or 0)
        needs.extend(_needs(
            f"{ref.name}-{str(replica).lower()}", template, change, count,
            namespace=ref.namespace, relabel=relabel,
            pod_labels=_replica_labels(live.pods, job=ref.name, replica=str(replica),
                                       gang=kind.labels),
        ))  # fmt: skip
    replaced = frozenset(_pod_key(p) for p in live.pods)
    _room(needs, live, zone=zone, replaced=replaced)
    meta = _meta(job)
    target = Target(
        action=TargetAction.SUSPEND_RESUME, api_version=api_version, kind=ref.kind.value,
        plural=kind.plural, namespace=ref.namespace, name=ref.name, uid=meta.get("uid"),
        resource_version=meta.get("resourceVersion"), changes=tuple(changes),
    )  # fmt: skip
    if not changes:
        raise _RefusedError(f"every template already pins zone {zone}: a restart would not move it")
    return Plan(
        job=ref,
        target_zone=zone,
        preconditions=Preconditions(
            uid=meta.get("uid"), resource_version=meta.get("resourceVersion"),
            verdict=finding.verdict, placement=placement(live.pods, live.nodes),
        ),
        targets=(target,),
        diff=render_diff((target,)),
        mirror_keys=tuple(mirror_keys),
        pods=len(needs),
        gang=len(needs),
    )


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in _meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            found: Mapping[str, Any] = ref
            return found
    return None


def recreatable_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """A batch Job's manifest as a create body: server-set metadata, status and the
    controller-uid selector and labels stripped (the server sets them anew)."""
    meta = _meta(job)
    new_meta = {k: copy.deepcopy(v) for k, v in meta.items() if k not in _SERVER_METADATA}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in JOB_CONTROLLER_LABELS}
    new_meta["labels"] = labels
    spec = copy.deepcopy(dict(job.get("spec") or {}))
    if not spec.get("manualSelector"):
        spec.pop("selector", None)
    template = spec.get("template") or {}
    tmeta = template.get("metadata") or {}
    if tmeta.get("labels"):
        tmeta["labels"] = {
            k: v for k, v in tmeta["labels"].items() if k not in JOB_CONTROLLER_LABELS
        }
    return {"apiVersion": job.get("apiVersion") or BATCH_JOB.api_version, "kind": BATCH_JOB.kind,
            "metadata": new_meta, "spec": spec}  # fmt: skip


def job_finished(job: Mapping[str, Any]) -> bool:
    """A batch Job whose Complete or Failed condition is True."""
    return BATCH_JOB.conditions.finished_as(job) is not None


def _job_pods_to_create(job: Mapping[str, Any]) -> int:
    """How many pods a batch Job created anew runs at once: parallelism, at most completions."""
    spec = job.get("spec") or {}
    parallelism = int(spec.get("parallelism", 1) or 0)
    completions = spec.get("completions")
    return parallelism if completions is None else min(parallelism, int(completions))


def _restarted_jobs(
    live: LiveObjects,
    by_kind_name: Mapping[tuple[str, str], Mapping[str, Any]],
    live_owners: frozenset[tuple[str, str]],
) -> list[str]:
    """The group's batch Jobs to recreate because they finished or have no live pod left, found
    from the group's finished pods."""
    out: set[str] = set()
    for pod in live.finished_pods:
        owner = _controller(pod)
        if owner is None or owner.get("kind") != BATCH_JOB.kind:
            continue
        name = str(owner.get("name"))
        job = by_kind_name.get((BATCH_JOB.kind, name))
        if job is None or _meta(job).get("uid") != owner.get("uid"):
            continue  # the Job of that pod is gone (or another one took its name)
        if job_finished(job) or (BATCH_JOB.kind, name) not in live_owners:
            out.add(name)
    return sorted(out)


def _moved_owner(
    owner: Mapping[str, Any] | None, by_kind_name: Mapping[tuple[str, str], Mapping[str, Any]]
) -> tuple[str, str] | None:
    """The (kind, name) of the workload that moves a pod whose controller is `owner`: the
    controller itself when it rolls out or is recreated (a Deployment, a batch Job), the
    controller's own controller when it moves through it (a ReplicaSet's Deployment); None when
    no owner kind moves it."""
    kind = owner_kind(str(owner.get("kind"))) if owner is not None else None
    if owner is None or kind is None:
        return None
    if kind.move is not OwnerMove.THROUGH_OWNER:
        return kind.kind, str(owner.get("name"))
    obj = by_kind_name.get((kind.kind, str(owner.get("name"))))
    parent = _controller(obj) if obj is not None else None
    through = owner_kind(kind.through or "")
    if parent is None or through is None or parent.get("kind") != through.kind:
        return None
    return through.kind, str(parent.get("name"))


def _mislabelled(pod: Mapping[str, Any], mirror_keys: Sequence[str], zone: str) -> bool:
    """True when a zone-mirroring label the pod carries names another zone than `zone`."""
    labels = _meta(pod).get("labels") or {}
    return any(k in labels and labels[k] != zone for k in mirror_keys)


def _plan_group(
    finding: Finding, live: LiveObjects, *, zone: str, mirror_keys: Sequence[str]
) -> Plan:
    ref = finding.job
    zones = placement(live.pods, live.nodes)
    by_kind_name = {
        (str(w.get("kind")), str(_meta(w).get("name"))): w for w in live.workloads
    }
    zone_nodes = _zone_nodes(live.nodes, zone)
    relabel = {k: zone for k in mirror_keys}
    moving: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    pods_of: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for pod in live.pods:
        name = str(_meta(pod).get("name"))
        if name not in zones:
            continue  # finished
        top = _moved_owner(_controller(pod), by_kind_name)
        if top is None:
            if zones[name] == zone:
                continue
            raise _RefusedError(
                f"pod {name} is not owned by a Deployment or a batch Job: zonemedic cannot move it"
            )
        pods_of.setdefault(top, []).append(pod)
        if zones[name] != zone or _mislabelled(pod, mirror_keys, zone):
            moving.setdefault(top, []).append(pod)
    restarted = _restarted_jobs(live, by_kind_name, frozenset(pods_of))
    if not moving and not restarted:
        raise _RefusedError(f"every pod is already in zone {zone}, labelled for it")
    targets: list[Target] = []
    needs: list[PodNeed] = []
    replaced: set[tuple[str, str]] = set()
    gang = len(zones)
    for kind, name in sorted({*moving, *((BATCH_JOB.kind, n) for n in restarted)}):
        obj = by_kind_name.get((kind, name))
        if obj is None:
            raise _RefusedError(f"{kind} {ref.namespace}/{name} was not found")
        guard = kueue_reason([obj, *pods_of.get((kind, name), ())])
        if guard is not None:
            raise _RefusedError(f"{guard}; zonemedic does not delete, recreate or patch it")
        template = (obj.get("spec") or {}).get("template") or {}
        path = ("spec", "template")
        change = _retarget(
            template, replica="template", path=path, zone=zone, zone_nodes=zone_nodes,
            mirror_keys=mirror_keys, affinity_to=None,
        )  # fmt: skip
        finished = (kind, name) not in moving
        if change is None and not finished:
            raise _RefusedError(
                f"{kind} {name} already pins zone {zone} but has pods outside it"
            )
        meta = _meta(obj)
        owner = owner_kind(kind)
        assert owner is not None, "a kind `_moved_owner` returned"
        if owner.move is OwnerMove.ROLLOUT:
            count = int((obj.get("spec") or {}).get("replicas", 1) or 0)
            owned = pods_of[(kind, name)]
            action = TargetAction.ROLLOUT
            manifest = original = None
        else:
            owned = moving.get((kind, name), [])
            count = _job_pods_to_create(obj) if finished else len(owned)
            gang += count if finished else 0
            action = TargetAction.RECREATE
            original = recreatable_job(obj)
            manifest = apply_merge_patch(original, change.nested()) if change else original
        needs.extend(_needs(name, template, change, count, namespace=ref.namespace,
                            relabel=relabel))  # fmt: skip
        replaced.update(_pod_key(p) for p in owned)
        targets.append(
            Target(
                action=action, api_version=str(obj.get("apiVersion")), kind=kind,
                plural=owner.plural,
                namespace=ref.namespace, name=name, uid=meta.get("uid"),
                resource_version=meta.get("resourceVersion"),
                changes=(change,) if change is not None else (),
                manifest=manifest, original=original,
            )
        )  # fmt: skip
    _room(needs, live, zone=zone, replaced=frozenset(replaced))
    return Plan(
        job=ref,
        target_zone=zone,
        preconditions=Preconditions(
            uid=None, resource_version=None, verdict=finding.verdict, placement=zones
        ),
        targets=tuple(targets),
        diff=render_diff(targets),
        mirror_keys=tuple(mirror_keys),
        pods=len(needs),
        gang=gang,
    )
