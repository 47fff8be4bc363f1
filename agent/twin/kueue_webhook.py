"""Kueue's admission webhooks and its CRDs' defaults and rules, as hooks on the twin's store.

Registered by `kueue.Kueue` when a scenario runs Kueue (v0.14):
- the jobs' mutating webhook (`m<kind>.kb.io`, on create): a job of an integrated kind carrying
  the `kueue.x-k8s.io/queue-name` label, and not controlled by another integrated job, is created
  suspended. `managedBy` is left alone: Kueue sets it only for MultiKueue, which the twin does not
  run;
- the jobs' validating webhook (`v<kind>.kb.io`, create and update): at most one of the
  required/preferred/unconstrained topology annotations per pod template, level values that are
  label names, an unconstrained value that is a boolean, a `podset-group-name` that is not a
  number; for a JobSet and an MPIJob, `podset-group-name` groups of exactly two pod sets, one a
  single pod, asking for the same level; and the queue-name label cannot change while the job
  runs. A refusal is what the API
  server answers for a webhook's denial: 403 `admission webhook "vpytorchjob.kb.io" denied the
  request: <field errors>`;
- the Workload webhook (`vworkload.kb.io`): its pod sets cannot change while it holds quota;
- the CRDs' defaults (Workload `spec.active: true`, pod set `name: main` and `count: 1`,
  ClusterQueue `queueingStrategy: BestEffortFIFO`) and the Topology rule that `spec.levels`
  never changes (422, as the CRD's validation rule answers).
It holds no state and does not admit or schedule anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent.twin.apierror import ApiError, invalid
from agent.twin.kueue_jobs import (
    PodSetSource,
    QueuedKind,
    has_queued_owner,
    is_suspended,
    queue_name,
)
from agent.twin.kueue_labels import (
    CLUSTER_QUEUES,
    PODSET_GROUP_NAME,
    PREFERRED_TOPOLOGY,
    QUEUE_LABEL,
    QUOTA_RESERVED,
    REQUIRED_TOPOLOGY,
    TOPOLOGIES,
    UNCONSTRAINED_TOPOLOGY,
    WORKLOADS,
)
from agent.twin.status_conditions import is_true
from agent.twin.store import Store

Obj = dict[str, Any]
_LABEL_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_NAME_PART_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_TOPOLOGY_KEYS = (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY, UNCONSTRAINED_TOPOLOGY)


def denied(webhook: str, errors: list[str]) -> ApiError:
    """The API server's answer when a validating webhook refuses a request."""
    detail = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
    return ApiError(403, "Forbidden", f'admission webhook "{webhook}" denied the request: {detail}')


def _label_name_errors(value: str, where: str) -> list[str]:
    if len(value.rpartition("/")[2]) <= 63 and _LABEL_NAME.match(value):
        return []
    return [f'{where}: Invalid value: "{value}": {_NAME_PART_MESSAGE}']


def tas_annotation_errors(annotations: Mapping[str, str], field: str) -> list[str]:
    """Kueue's checks of one pod template's Topology Aware Scheduling annotations."""
    path = f"{field}.metadata.annotations"
    errors: list[str] = []
    if sum(1 for k in _TOPOLOGY_KEYS if k in annotations) > 1:
        keys = ", ".join(f'"{k}"' for k in _TOPOLOGY_KEYS)
        errors.append(f"{path}: Invalid value: must not contain more than one topology "
                      f"annotation: [{keys}]")  # fmt: skip
    for key in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY):
        if key in annotations:
            errors += _label_name_errors(str(annotations[key]), f"{path}[{key}]")
    if PODSET_GROUP_NAME in annotations and str(annotations[PODSET_GROUP_NAME]).isdigit():
        errors.append(f'{path}[{PODSET_GROUP_NAME}]: Invalid value: '
                      f'"{annotations[PODSET_GROUP_NAME]}": must not be a number')  # fmt: skip
    if UNCONSTRAINED_TOPOLOGY in annotations and str(annotations[UNCONSTRAINED_TOPOLOGY]) not in (
        "1", "t", "T", "true", "TRUE", "True", "0", "f", "F", "false", "FALSE", "False"
    ):
        errors.append(f'{path}[{UNCONSTRAINED_TOPOLOGY}]: Invalid value: '
                      f'"{annotations[UNCONSTRAINED_TOPOLOGY]}": must be a boolean value')
    return errors


def group_errors(sources: Sequence[PodSetSource]) -> list[str]:
    """Kueue's checks of the `podset-group-name` groups of a job's pod sets (those asking for a
    required or preferred level): exactly two pod sets per group, one of them a single pod, both
    asking for the same level the same way."""
    groups: dict[str, list[tuple[PodSetSource, Mapping[str, str]]]] = {}
    for source in sources:
        annotations = (source.template.get("metadata") or {}).get("annotations") or {}
        if PODSET_GROUP_NAME in annotations and (REQUIRED_TOPOLOGY in annotations
                                                 or PREFERRED_TOPOLOGY in annotations):  # fmt: skip
            groups.setdefault(str(annotations[PODSET_GROUP_NAME]), []).append((source, annotations))
    errors: list[str] = []
    for group, members in groups.items():
        paths = [f"{s.field}.metadata.annotations" for s, _ in members]
        if len(members) != 2:
            errors += [f'{p}[{PODSET_GROUP_NAME}]: Invalid value: "{group}": can only define '
                       f"groups of exactly 2 pod sets, got: {len(members)} pod set(s)"
                       for p in paths]  # fmt: skip
            continue
        (one, first), (two, second) = members
        if one.count != 1 and two.count != 1:
            message = ("can only define groups where at least one pod set has only 1 replica, "
                       f"got: {one.count} replica(s) and {two.count} replica(s) in the group")
            errors += [f'{p}[{PODSET_GROUP_NAME}]: Invalid value: "{group}": {message}' for p in paths]
        if any(first.get(k) != second.get(k) for k in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY)):
            errors += [f"{a}: Invalid value: must specify '{REQUIRED_TOPOLOGY}' or "
                       f"'{PREFERRED_TOPOLOGY}' topology consistent with '{b}' in group '{group}'"
                       for a, b in (paths, paths[::-1])]  # fmt: skip
    return errors


def suspend_on_create(kind: QueuedKind) -> Callable[[Obj | None, Obj], None]:
    def mutate(old: Obj | None, new: Obj) -> None:
        if old is not None or not queue_name(new) or has_queued_owner(new):
            return
        if not is_suspended(kind, new):
            node = new
            for step in kind.suspend_path[:-1]:
                if not isinstance(node.get(step), dict):
                    node[step] = {}
                node = node[step]
            node[kind.suspend_path[-1]] = True

    return mutate


def validate_job(kind: QueuedKind) -> Callable[[Obj | None, Obj], None]:
    webhook = f"v{kind.webhook}"

    def validate(old: Obj | None, new: Obj) -> None:
        if old is not None and old.get("spec") == new.get("spec") and (
            old.get("metadata") or {}).get("labels") == (new.get("metadata") or {}).get("labels"):
            return  # fmt: skip
        errors: list[str] = []
        sources = kind.pod_sets(new)
        for source in sources:
            annotations = (source.template.get("metadata") or {}).get("annotations") or {}
            errors += tas_annotation_errors(annotations, source.field)
        if kind.validates_groups:
            errors += group_errors(sources)
        if old is not None and not is_suspended(kind, new) and queue_name(old) != queue_name(new):
            errors.append(f'metadata.labels[{QUEUE_LABEL}]: Invalid value: '
                          f'"{queue_name(new)}": field is immutable')  # fmt: skip
        if errors:
            raise denied(webhook, errors)

    return validate


def workload_defaults(_old: Obj | None, new: Obj) -> None:
    spec = new.setdefault("spec", {})
    if spec.get("active") is None:
        spec["active"] = True
    for pod_set in spec.get("podSets") or []:
        if isinstance(pod_set, dict):
            pod_set.setdefault("name", "main")
            pod_set.setdefault("count", 1)


def validate_workload(old: Obj | None, new: Obj) -> None:
    if old is None:
        return
    reserved = is_true((old.get("status") or {}).get("conditions") or [], QUOTA_RESERVED)
    if reserved and (old.get("spec") or {}).get("podSets") != (new.get("spec") or {}).get(
        "podSets"
    ):
        raise denied("vworkload.kb.io",
                     ["spec.podSets: Invalid value: []v1beta1.PodSet{...}: field is immutable"])


def cluster_queue_defaults(_old: Obj | None, new: Obj) -> None:
    spec = new.setdefault("spec", {})
    spec.setdefault("queueingStrategy", "BestEffortFIFO")
    spec.setdefault("stopPolicy", "None")


def topology_levels_immutable(old: Obj | None, new: Obj) -> None:
    if old is None:
        return
    if (old.get("spec") or {}).get("levels") != (new.get("spec") or {}).get("levels"):
        name = str((new.get("metadata") or {}).get("name"))
        raise invalid(TOPOLOGIES, name, "spec.levels", 'Invalid value: "array": field is immutable')


def register(store: Store, kinds: tuple[QueuedKind, ...]) -> None:
    store.add_mutation(WORKLOADS, workload_defaults)
    store.add_admission(WORKLOADS, validate_workload)
    store.add_mutation(CLUSTER_QUEUES, cluster_queue_defaults)
    store.add_admission(TOPOLOGIES, topology_levels_immutable)
    for kind in kinds:
        store.add_mutation(kind.resource, suspend_on_create(kind))
        store.add_admission(kind.resource, validate_job(kind))
