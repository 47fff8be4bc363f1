"""Kueue Workloads of jobs: building one, matching it to its job, and what admission puts in the job.

Called by the twin's Kueue job reconciler. Follows Kueue v0.14 (jobframework):
- a job's Workload is named `<kind>-<job>-<hash>` (lower-case kind; the hash is the first 5 hex
  digits of SHA-1 over kind, group, job name and uid, newline-separated), carries the label
  `kueue.x-k8s.io/job-uid`, the finalizer `kueue.x-k8s.io/resource-in-use`, a controller
  ownerReference to the job, `spec.queueName` from the job's queue-name label, priority 0 and one
  pod set per pod set of the job with its count, template and `topologyRequest`;
- the topology request is read from the template's annotations: `podset-required-topology`, else
  `podset-preferred-topology`, else `podset-unconstrained-topology`; it also carries the kind's pod
  index label (so it is never empty for the kinds that have one), and `podSetGroupName` only with
  a required or preferred level;
- a Workload matches its job when every pod set has the same count, containers, init containers
  and (unless admitted) tolerations: annotations, a topology request among them, do not count;
- admission gives each pod set a `PodSetInfo`: the flavors' node labels and tolerations, the
  `kueue.x-k8s.io/podset` label, the `kueue.x-k8s.io/workload` annotation and, with a topology
  assignment, the `kueue.x-k8s.io/topology` scheduling gate (plus `podset-unconstrained-topology`
  when the pod set asked for no level). Starting a job merges it into the templates (a key given a
  different value is a conflict); stopping restores the templates to the Workload's.
Pure: JSON in, JSON out (patches are JSON merge patches computed from the change).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.model.descriptor import dig
from agent.twin.kueue_jobs import QueuedKind, queue_name, suspend_patch
from agent.twin.kueue_labels import (
    JOB_UID_LABEL,
    PODSET_GROUP_NAME,
    PODSET_LABEL,
    PREFERRED_TOPOLOGY,
    REQUIRED_TOPOLOGY,
    RESOURCE_IN_USE,
    TOPOLOGY_GATE,
    UNCONSTRAINED_TOPOLOGY,
    WORKLOAD_ANNOTATION,
    WORKLOADS,
)

Obj = dict[str, Any]
_HASH_LENGTH = 5
_MAX_PREFIX = 252 - _HASH_LENGTH


class PodSetInfoConflictError(ValueError):
    """Admission info that contradicts the job's template (a key with another value)."""


def workload_name(kind: QueuedKind, name: str, uid: str) -> str:
    rt = kind.resource
    digest = hashlib.sha1("\n".join((rt.kind, rt.group, name, uid)).encode()).hexdigest()
    return f"{rt.kind.lower()}-{name}"[:_MAX_PREFIX] + "-" + digest[:_HASH_LENGTH]


def _parse_bool(value: str) -> bool:
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{value}": invalid syntax')


def topology_request(
    annotations: Mapping[str, str], pod_index_label: str | None, *,
    sub_group: tuple[str, int] | None = None,
) -> Obj | None:  # fmt: skip
    """The pod set's topologyRequest; `sub_group` is (Job index label, Job count) for a pod set
    of several Jobs."""
    request: Obj = {}
    if REQUIRED_TOPOLOGY in annotations:
        request["required"] = annotations[REQUIRED_TOPOLOGY]
    elif PREFERRED_TOPOLOGY in annotations:
        request["preferred"] = annotations[PREFERRED_TOPOLOGY]
    elif UNCONSTRAINED_TOPOLOGY in annotations:
        request["unconstrained"] = _parse_bool(annotations[UNCONSTRAINED_TOPOLOGY])
    elif pod_index_label is None and sub_group is None:
        return None
    if pod_index_label is not None:
        request["podIndexLabel"] = pod_index_label
    if sub_group is not None:
        request["subGroupIndexLabel"], request["subGroupCount"] = sub_group
    if PODSET_GROUP_NAME in annotations and ("required" in request or "preferred" in request):
        request["podSetGroupName"] = annotations[PODSET_GROUP_NAME]
    return request


def explicit_tas(request: Mapping[str, Any] | None) -> bool:
    """The pod set asks for Topology Aware Scheduling itself (a level, or unconstrained)."""
    return request is not None and any(
        k in request for k in ("required", "preferred", "unconstrained"))


def pod_sets(kind: QueuedKind, job: Mapping[str, Any]) -> list[Obj]:
    """The Workload pod sets of a job, as Kueue derives them."""
    out = []
    for source in kind.pod_sets(job):
        template = copy.deepcopy(dict(source.template))
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        entry: Obj = {"name": source.name, "count": source.count, "template": template}
        sub_group = None
        if source.sub_group_index_label is not None and source.sub_group_count is not None:
            sub_group = (source.sub_group_index_label, source.sub_group_count)
        request = topology_request(annotations, source.pod_index_label, sub_group=sub_group)
        if request is not None:
            entry["topologyRequest"] = request
        out.append(entry)
    return out


def build(kind: QueuedKind, job: Mapping[str, Any]) -> Obj:
    meta = job.get("metadata") or {}
    name, uid = str(meta.get("name")), str(meta.get("uid"))
    rt = kind.resource
    return {
        "apiVersion": WORKLOADS.api_version,
        "kind": WORKLOADS.kind,
        "metadata": {
            "name": workload_name(kind, name, uid),
            "namespace": meta.get("namespace"),
            "labels": {JOB_UID_LABEL: uid},
            "finalizers": [RESOURCE_IN_USE],
            "ownerReferences": [{
                "apiVersion": rt.api_version, "kind": rt.kind, "name": name, "uid": uid,
                "controller": True, "blockOwnerDeletion": True,
            }],
        },
        "spec": {
            "active": True,
            "queueName": queue_name(job),
            "podSets": pod_sets(kind, job),
            "priority": 0,
            "priorityClassSource": "",
        },
    }


def owned_by(workload: Mapping[str, Any], uid: str) -> bool:
    return any(
        r.get("uid") == uid and r.get("controller")
        for r in (workload.get("metadata") or {}).get("ownerReferences") or []
    )


# --- matching a Workload to its job -------------------------------------------------------------


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _same_pod_set(a: Mapping[str, Any], b: Mapping[str, Any], *, ignore_tolerations: bool) -> bool:
    if int(a.get("count", 1)) != int(b.get("count", 1)) or a.get("minCount") != b.get("minCount"):
        return False
    spec_a = (a.get("template") or {}).get("spec") or {}
    spec_b = (b.get("template") or {}).get("spec") or {}
    keys = ["containers", "initContainers"] + ([] if ignore_tolerations else ["tolerations"])
    return all(_list(spec_a.get(k)) == _list(spec_b.get(k)) for k in keys)


def same_pod_sets(
    job_sets: Sequence[Mapping[str, Any]], workload_sets: Sequence[Mapping[str, Any]], *,
    ignore_tolerations: bool,
) -> bool:  # fmt: skip
    return len(job_sets) == len(workload_sets) and all(
        _same_pod_set(a, b, ignore_tolerations=ignore_tolerations)
        for a, b in zip(job_sets, workload_sets, strict=True)
    )


# --- what admission puts into the job's templates ------------------------------------------------


@dataclass
class PodSetInfo:
    name: str
    count: int
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[Obj] = field(default_factory=list)
    gates: list[Obj] = field(default_factory=list)


def info_from_pod_set(pod_set: Mapping[str, Any]) -> PodSetInfo:
    template = pod_set.get("template") or {}
    meta, spec = template.get("metadata") or {}, template.get("spec") or {}
    return PodSetInfo(
        name=str(pod_set.get("name")), count=int(pod_set.get("count", 1)),
        annotations=dict(meta.get("annotations") or {}), labels=dict(meta.get("labels") or {}),
        node_selector=dict(spec.get("nodeSelector") or {}),
        tolerations=copy.deepcopy(_list(spec.get("tolerations"))),
        gates=copy.deepcopy(_list(spec.get("schedulingGates"))),
    )  # fmt: skip


def info_from_admission(
    workload: Mapping[str, Any], flavors: Mapping[str, Mapping[str, Any]]
) -> list[PodSetInfo]:
    """One PodSetInfo per pod set assignment of the Workload's admission, in order."""
    admission = (workload.get("status") or {}).get("admission") or {}
    sets = {str(p.get("name")): p for p in (workload.get("spec") or {}).get("podSets") or []}
    name = str((workload.get("metadata") or {}).get("name"))
    out = []
    for assignment in admission.get("podSetAssignments") or []:
        pod_set = sets.get(str(assignment.get("name"))) or {}
        info = PodSetInfo(name=str(assignment.get("name")),
                          count=int(assignment.get("count", pod_set.get("count", 1))))
        if assignment.get("topologyAssignment") is not None:
            if not explicit_tas(pod_set.get("topologyRequest")):
                info.annotations[UNCONSTRAINED_TOPOLOGY] = "true"
            info.gates.append({"name": TOPOLOGY_GATE})
        seen: set[str] = set()
        for flavor_name in (assignment.get("flavors") or {}).values():
            if flavor_name in seen:
                continue
            seen.add(flavor_name)
            spec = (flavors.get(flavor_name) or {}).get("spec") or {}
            info.node_selector.update(spec.get("nodeLabels") or {})
            info.tolerations.extend(copy.deepcopy(_list(spec.get("tolerations"))))
        info.annotations[WORKLOAD_ANNOTATION] = name
        info.labels[PODSET_LABEL] = info.name
        out.append(info)
    return out


def _merge_map(current: Mapping[str, str], extra: Mapping[str, str], what: str) -> dict[str, str]:
    for key, value in extra.items():
        if key in current and current[key] != value:
            raise PodSetInfoConflictError(
                f"invalid admission check PodSetUpdate: conflict for {what}: conflict for key={key},"
                f" value1={current[key]}, value2={value}"
            )
    return {**current, **extra}


def _child(obj: Obj, key: str) -> Obj:
    """obj[key] as a dict held by obj (made when missing or null)."""
    if not isinstance(obj.get(key), dict):
        obj[key] = {}
    child: Obj = obj[key]
    return child


def merged_template(template: Mapping[str, Any], info: PodSetInfo) -> Obj:
    out = copy.deepcopy(dict(template))
    meta, spec = _child(out, "metadata"), _child(out, "spec")
    meta["annotations"] = _merge_map(meta.get("annotations") or {}, info.annotations, "annotations")
    meta["labels"] = _merge_map(meta.get("labels") or {}, info.labels, "labels")
    spec["nodeSelector"] = _merge_map(spec.get("nodeSelector") or {}, info.node_selector,
                                      "nodeSelector")  # fmt: skip
    for key, extra in (("tolerations", info.tolerations), ("schedulingGates", info.gates)):
        items = _list(spec.get(key))
        items.extend(item for item in extra if item not in items)
        spec[key] = items
    for key, holder in (("annotations", meta), ("labels", meta), ("nodeSelector", spec),
                        ("tolerations", spec), ("schedulingGates", spec)):  # fmt: skip
        if not holder.get(key):
            holder.pop(key, None)
    return out


def restored_template(template: Mapping[str, Any], info: PodSetInfo) -> Obj:
    out = copy.deepcopy(dict(template))
    meta, spec = _child(out, "metadata"), _child(out, "spec")
    for holder, key, value in ((meta, "annotations", info.annotations),
                               (meta, "labels", info.labels),
                               (spec, "nodeSelector", info.node_selector),
                               (spec, "tolerations", info.tolerations),
                               (spec, "schedulingGates", info.gates)):  # fmt: skip
        if value:
            holder[key] = copy.deepcopy(value)
        else:
            holder.pop(key, None)
    return out


def _set(obj: Obj, path: Sequence[str | int], value: Any) -> None:
    node: Any = obj
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value


def merge_diff(original: Any, modified: Any) -> Any:
    """The JSON merge patch turning `original` into `modified` (lists are replaced whole)."""
    if not isinstance(original, Mapping) or not isinstance(modified, Mapping):
        return copy.deepcopy(modified)
    out: Obj = {}
    for key in original:
        if key not in modified:
            out[key] = None
    for key, value in modified.items():
        if key not in original:
            out[key] = copy.deepcopy(value)
        elif original[key] != value:
            if isinstance(original[key], Mapping) and isinstance(value, Mapping):
                out[key] = merge_diff(original[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out


def _templates_changed(
    kind: QueuedKind, job: Mapping[str, Any], infos: Sequence[PodSetInfo], *, restore: bool
) -> Obj:
    changed: Obj = copy.deepcopy(dict(job))
    by_name = {i.name: i for i in infos}
    for source in kind.pod_sets(job):
        info = by_name.get(source.name)
        if info is None:
            continue
        template = dig(job, source.path) or {}
        new = restored_template(template, info) if restore else merged_template(template, info)
        _set(changed, source.path, new)
    return changed


def start_patches(kind: QueuedKind, job: Mapping[str, Any], infos: Sequence[PodSetInfo]) -> list[Obj]:
    """The merge patches, in order, that unsuspend the job with the admission: merged into its
    templates (PodSetInfoConflictError when a template contradicts it), or the kind's own."""
    sources = kind.pod_sets(job)
    if len(sources) != len(infos):
        raise PodSetInfoConflictError(
            f"invalid podset infos: expecting {len(sources)} podset, got {len(infos)}")
    if kind.start is not None:
        return kind.start(job, infos)
    return [start_patch(kind, job, infos)]


def start_patch(kind: QueuedKind, job: Mapping[str, Any], infos: Sequence[PodSetInfo]) -> Obj:
    """Unsuspend the job with the admission merged into its templates (a kind whose templates
    are its own)."""
    sources = kind.pod_sets(job)
    if len(sources) != len(infos):
        raise PodSetInfoConflictError(
            f"invalid podset infos: expecting {len(sources)} podset, got {len(infos)}")
    changed = _templates_changed(kind, job, infos, restore=False)
    patch = merge_diff(dict(job), changed)
    return _with(patch, suspend_patch(kind, False))


def stop_patch(
    kind: QueuedKind, job: Mapping[str, Any], infos: Sequence[PodSetInfo] | None
) -> Obj:
    """Suspend the job and restore its templates to the Workload's (when there is one); a kind
    whose templates are derived stops through `kind.stop` (`Kueue._stop`)."""
    patch: Obj = {}
    if infos:
        patch = merge_diff(dict(job), _templates_changed(kind, job, infos, restore=True))
    return _with(patch, suspend_patch(kind, True))


def _with(patch: Obj, extra: Mapping[str, Any]) -> Obj:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(patch.get(key), dict):
            _with(patch[key], value)
        else:
            patch[key] = copy.deepcopy(value)
    return patch
