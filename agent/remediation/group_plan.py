"""The patch builder for a generic group (Deployments and batch Jobs): one plan per group.

Who calls it: `agent.remediation.planner.plan_remediation` for a finding about a configured
generic group. Pure: the finding and the live objects in, a `Plan` out, or `PlanRefusedError`
with the reason; it does not read or write the cluster.

Generic groups move only what is outside the target zone, each workload as its owner kind's
descriptor says (`agent.model.workload.OwnerKind`): a Deployment's template is patched (its
rollout moves the pods; a ReplicaSet's pods move through its Deployment), a batch Job (template
immutable) is recreated from its live manifest with the patched template, server-set fields
stripped (`recreatable_job`); Jobs already in the target zone are left alone, except a worker Job
that finished (failed, e.g. its workers gave up while blocked, or completed) or has no live pod
left: the gang cannot run without it, so it is recreated too (pinned to the target zone when its
template is not). Refused: a pod no Deployment or batch Job moves outside the zone, any
Deployment or batch Job the plan writes, or a pod of theirs, marked as Kueue's (queue label or
annotation, its managed label, another controller's `managedBy`), a template spreading across
zones, or no room in the zone for every pod the plan (re)creates.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from agent.model.descriptor import OwnerMove
from agent.model.finding import Finding
from agent.model.workload import BATCH_JOB, owner_kind
from agent.remediation.guard import kueue_reason
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
    apply_merge_patch,
    meta_of,
    nodes_in_zone,
    pod_key,
    pod_needs,
    require_room,
    retarget,
)

# Labels the batch Job controller adds to a Job's selector and template; a recreated Job gets
# fresh ones from the server.
JOB_CONTROLLER_LABELS = frozenset(
    {"controller-uid", "batch.kubernetes.io/controller-uid", "job-name", "batch.kubernetes.io/job-name"}
)


_SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
                    "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds")  # fmt: skip


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in meta_of(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            found: Mapping[str, Any] = ref
            return found
    return None


def recreatable_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """A batch Job's manifest as a create body: server-set metadata, status and the
    controller-uid selector and labels stripped (the server sets them anew)."""
    meta = meta_of(job)
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
        if job is None or meta_of(job).get("uid") != owner.get("uid"):
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
    labels = meta_of(pod).get("labels") or {}
    return any(k in labels and labels[k] != zone for k in mirror_keys)


def plan_group(
    finding: Finding, live: LiveObjects, *, zone: str, mirror_keys: Sequence[str]
) -> Plan:
    """The plan that moves a generic group's workloads outside `zone` into it (see the module
    docstring), or `PlanRefusedError` with the reason."""
    ref = finding.job
    zones = placement(live.pods, live.nodes)
    by_kind_name = {
        (str(w.get("kind")), str(meta_of(w).get("name"))): w for w in live.workloads
    }
    zone_nodes = nodes_in_zone(live.nodes, zone)
    relabel = {k: zone for k in mirror_keys}
    moving: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    pods_of: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for pod in live.pods:
        name = str(meta_of(pod).get("name"))
        if name not in zones:
            continue  # finished
        top = _moved_owner(_controller(pod), by_kind_name)
        if top is None:
            if zones[name] == zone:
                continue
            raise PlanRefusedError(
                f"pod {name} is not owned by a Deployment or a batch Job: zonemedic cannot move it"
            )
        pods_of.setdefault(top, []).append(pod)
        if zones[name] != zone or _mislabelled(pod, mirror_keys, zone):
            moving.setdefault(top, []).append(pod)
    restarted = _restarted_jobs(live, by_kind_name, frozenset(pods_of))
    if not moving and not restarted:
        raise PlanRefusedError(f"every pod is already in zone {zone}, labelled for it")
    targets: list[Target] = []
    needs: list[PodNeed] = []
    replaced: set[tuple[str, str]] = set()
    gang = len(zones)
    for kind, name in sorted({*moving, *((BATCH_JOB.kind, n) for n in restarted)}):
        obj = by_kind_name.get((kind, name))
        if obj is None:
            raise PlanRefusedError(f"{kind} {ref.namespace}/{name} was not found")
        guard = kueue_reason([obj, *pods_of.get((kind, name), ())])
        if guard is not None:
            raise PlanRefusedError(f"{guard}; zonemedic does not delete, recreate or patch it")
        template = (obj.get("spec") or {}).get("template") or {}
        path = ("spec", "template")
        change = retarget(
            template, replica="template", path=path, zone=zone, zone_nodes=zone_nodes,
            mirror_keys=mirror_keys, affinity_to=None,
        )  # fmt: skip
        finished = (kind, name) not in moving
        if change is None and not finished:
            raise PlanRefusedError(
                f"{kind} {name} already pins zone {zone} but has pods outside it"
            )
        meta = meta_of(obj)
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
        needs.extend(pod_needs(name, template, change, count, namespace=ref.namespace,
                            relabel=relabel))  # fmt: skip
        replaced.update(pod_key(p) for p in owned)
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
    require_room(needs, zone=zone, nodes=live.nodes, bound_pods=live.bound_pods,
                 replaced=frozenset(replaced))  # fmt: skip
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
