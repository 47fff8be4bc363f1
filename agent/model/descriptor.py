"""The shapes a workload descriptor is made of, and the readers of a manifest along their paths.

A kind's descriptor (`agent.model.workload.WorkloadKind`, and `OwnerKind` for the workloads of a
configured generic group) is built from these parts: where its pod templates and their counts
live (`PodTemplates`, read into `PodTemplate`s), the labels its operator puts on pods
(`GangLabels`), how its coordinator is found and reached (`Coordinator`, `Launcher`), how it
suspends and resumes (`Suspension`), which conditions say it is suspended or finished
(`Conditions`), and what marks it as Kueue's (`KueueMarkers`). The readers (`dig`, `nest`,
`env_port`, `count_of`) walk plain manifest dicts along a descriptor's paths.

Used by `agent.model.workload`, which holds the table of kinds (the only place their names are
written), and by every layer that reads a descriptor's parts. Pure: data and readers of plain
dicts. It names no kind, decides nothing, and does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

Path = tuple[str, ...]

# --- what a descriptor says ----------------------------------------------------------------------


class TemplateLayout(StrEnum):
    """How a kind keeps its pod templates under `PodTemplates.path`."""

    REPLICA_SPECS = "replica_specs"  # a map replica type -> {replicas, template} (Kubeflow v1)
    # a list of {name, replicas, template: a batch Job template whose spec.template is the pod
    # template}; pods: replicas x the Job's parallelism, at most its completions (JobSet)
    REPLICATED_JOBS = "replicated_jobs"
    TEMPLATE = "template"  # one pod template; its count beside it in the same spec (apps, batch)


class PodCount(StrEnum):
    """Where the pod count of a `TEMPLATE` layout is read (in the spec holding the template)."""

    REPLICAS = "replicas"  # `replicas`, default 1
    PARALLELISM = "parallelism"  # batch Job: `parallelism` (default 1), at most `completions`


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """One pod template of an object: its replica (type or replicated-job name; `template` for a
    single one), the keys from the object's root to it, the template, and how many pods run from
    it (None when the count is not a non-negative integer); `in_gang` False for a replica that
    runs outside the gang (an initializer)."""

    replica: str
    path: tuple[str | int, ...]
    template: Mapping[str, Any]
    count: int | None
    in_gang: bool = True


@dataclass(frozen=True, slots=True)
class PodTemplates:
    """Where a kind's pod templates live (`path` from the object's root to the replica-spec map,
    the replicated-job list, or the one template) and where their pod counts are. `outside`:
    replicas (replicated-job names) that run outside the gang, before it (initializers): not
    counted in `expected_pods`; a replicated job is one of them by its name or by the value of
    its Job template's label `outside_label`."""

    layout: TemplateLayout
    path: Path
    count: PodCount = PodCount.REPLICAS
    outside: frozenset[str] = frozenset()
    outside_label: str | None = None

    @property
    def field(self) -> str:
        """The spec field holding the templates (`pytorchReplicaSpecs`, `replicatedJobs`)."""
        return self.path[-1]

    def container(self, obj: Mapping[str, Any]) -> Any:
        """What the object holds at `path` (None when absent)."""
        return dig(obj, self.path)

    def templates(self, obj: Mapping[str, Any]) -> list[PodTemplate]:
        """The object's pod templates, in the object's order (entries that are not mappings are
        skipped)."""
        found = self.container(obj)
        if self.layout is TemplateLayout.TEMPLATE:
            if not isinstance(found, Mapping):
                return []
            spec = dig(obj, self.path[:-1])
            return [PodTemplate("template", self.path, found, self._single_count(spec))]
        if self.layout is TemplateLayout.REPLICA_SPECS:
            if not isinstance(found, Mapping):
                return []
            return [
                PodTemplate(str(replica), (*self.path, str(replica), "template"),
                            _mapping(rspec.get("template")), count_of(rspec.get("replicas"), 1))
                for replica, rspec in found.items() if isinstance(rspec, Mapping)
            ]  # fmt: skip
        if not isinstance(found, Sequence) or isinstance(found, str):
            return []
        out = []
        for index, rjob in enumerate(found):
            if not isinstance(rjob, Mapping):
                continue
            job_template = _mapping(rjob.get("template"))
            job_spec = _mapping(job_template.get("spec"))
            replicas, per_job = count_of(rjob.get("replicas"), 1), _parallel(job_spec)
            count = replicas * per_job if replicas is not None and per_job is not None else None
            labels = _mapping(_mapping(job_template.get("metadata")).get("labels"))
            step = labels.get(self.outside_label) if self.outside_label else None
            names = {str(rjob.get("name")), *((str(step),) if step is not None else ())}
            out.append(PodTemplate(str(rjob.get("name") or index),
                                   (*self.path, index, "template", "spec", "template"),
                                   _mapping(job_spec.get("template")), count,
                                   in_gang=not names & self.outside))  # fmt: skip
        return out

    def gang_templates(self, obj: Mapping[str, Any]) -> list[PodTemplate]:
        """The object's pod templates whose pods form the gang (`outside` ones left out)."""
        return [t for t in self.templates(obj) if t.in_gang]

    def expected_pods(self, obj: Mapping[str, Any]) -> int | None:
        """Pods of the gang the object runs once all are up: the sum of its gang templates'
        counts; None when it has no gang template or a count is unreadable."""
        templates = self.gang_templates(obj)
        if not templates or any(t.count is None for t in templates):
            return None
        return sum(t.count or 0 for t in templates)

    def _single_count(self, spec: Any) -> int | None:
        spec = _mapping(spec)
        if self.count is PodCount.PARALLELISM:
            return _parallel(spec)
        return count_of(spec.get("replicas"), 1)


@dataclass(frozen=True, slots=True)
class GangLabels:
    """The pod labels a kind's operator sets: the job's name, the replica type and index, the
    role (`coordinator_role` marks the coordinator), the operator's name. JobSet pods: the
    replicated job is the replica type, the Job's index within it the replica index,
    `global_index` its index among all the JobSet's Jobs, and the pod's index within its
    (Indexed) Job is the annotation `completion_index`."""

    job_name: str
    replica_type: str
    replica_index: str
    job_role: str | None = None
    operator: str | None = None
    coordinator_role: str | None = None
    global_index: str | None = None
    completion_index: str | None = None  # a pod annotation, not a label


@dataclass(frozen=True, slots=True)
class Launcher:
    """A replica type whose pods launch the ranks instead of holding one (MPI): when the job has
    it and another replica type, its pod is the coordinator; it dials every rank on the ranks'
    container port named `port_name`, else `default_port`; it holds no GPU rank."""

    replica_type: str
    port_name: str = "ssh"
    default_port: int = 22


@dataclass(frozen=True, slots=True)
class Coordinator:
    """How a job's coordinator is found and reached: the pod whose role label says so, else the
    launcher (`launcher`, when the job has it beside another replica type), else the pod the
    object names at `declared` (JobSet `spec.coordinator{replicatedJob, jobIndex, podIndex}`),
    else the first pod of the first replica type of `replica_types` present (lower case), else
    (when `first_replica`) of its first replica in the object's order, else (when `worker_zero`)
    the worker of index 0. "First pod" of a replica type with `GangLabels.completion_index` is
    rank 0: replica index 0 and completion index 0. Its port: the literal value of the first env
    var named in `port_env` that the containers of its replicated job's pod template set (in the
    object's order: torch's `PET_MASTER_PORT`, `MASTER_PORT`), else the container port named
    `port_name`, else (when `first_port`) its first container port, else `default_port` (the
    Trainer sets PET_MASTER_PORT=29500 and declares 29500 as the trainer container's port)."""

    replica_types: tuple[str, ...]
    port_name: str | None
    default_port: int
    worker_zero: bool = True
    first_port: bool = False
    port_env: tuple[str, ...] = ()
    declared: Path | None = None
    first_replica: bool = False
    launcher: Launcher | None = None


@dataclass(frozen=True, slots=True)
class Suspension:
    """How a kind suspends and resumes: the boolean at `suspend`, the controller named at
    `managed_by` (values in `own_managers`, or none, mean the kind's own operator), and the
    pod-template fields (dotted, from the template's root) that may change while suspended
    (None: every field; the operator creates pods from the template as it is on resume)."""

    suspend: Path
    managed_by: Path
    own_managers: frozenset[str]
    mutable: frozenset[str] | None = None

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        return bool(dig(obj, self.suspend))

    def manager(self, obj: Mapping[str, Any]) -> str | None:
        """The controller the object names at `managed_by`, None when unset."""
        value = dig(obj, self.managed_by)
        return str(value) if value else None

    def patch(self, suspend: bool) -> dict[str, Any]:
        """The merge patch that sets `suspend`."""
        return nest(self.suspend, suspend)

    def may_change(self, field: str) -> bool:
        """True when the template field (`spec.affinity`) may change while suspended."""
        return self.mutable is None or field in self.mutable


@dataclass(frozen=True, slots=True)
class Conditions:
    """The status condition types that say an object is suspended, and that it finished (any of
    `finished` True; `failed` is the one that means it failed)."""

    suspended: str | None
    finished: tuple[str, ...]
    failed: str = "Failed"

    def finished_as(self, obj: Mapping[str, Any]) -> str | None:
        """The finished condition that is True on the object, else None."""
        for condition in _list(dig(obj, ("status", "conditions"))):
            if (isinstance(condition, Mapping) and condition.get("type") in self.finished
                    and condition.get("status") == "True"):  # fmt: skip
                return str(condition["type"])
        return None


@dataclass(frozen=True, slots=True)
class KueueMarkers:
    """What says Kueue manages an object: its queue label (or annotation), the label Kueue sets
    on the pods it manages, and the pod-template annotations of Topology Aware Scheduling: the
    required level (`topology_annotation`), the preferred one, the unconstrained flag, and the
    PodSet group name (two PodSets of one workload placed in one domain, Kueue v0.13+); and the
    annotation naming the admitted Workload that Kueue writes on the Jobs it admits."""

    queue_label: str
    managed_label: str
    topology_annotation: str
    preferred_annotation: str
    unconstrained_annotation: str
    group_annotation: str
    workload_annotation: str


NO_CONDITIONS = Conditions(suspended=None, finished=())


class OwnerMove(StrEnum):
    """How a generic group's workload is moved to another zone."""

    ROLLOUT = "rollout"  # patch the template: the rollout replaces the pods (Deployment)
    RECREATE = "recreate"  # the template is immutable: delete, create it patched (batch Job)
    THROUGH_OWNER = "through_owner"  # counted and moved through its controller (a ReplicaSet)


@dataclass(frozen=True, slots=True)
class OwnerKind:
    """A workload kind a generic group's pods are owned by. `through`: the controller kind it is
    counted and moved through (a ReplicaSet's Deployment) when it has one. `suspension`: where
    it says it is managed by another controller (batch Job `spec.managedBy`), if it can."""

    kind: str
    group: str
    version: str
    plural: str
    templates: PodTemplates
    move: OwnerMove
    conditions: Conditions = NO_CONDITIONS
    suspension: Suspension | None = None
    through: str | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


# --- reading along a path ------------------------------------------------------------------------


def dig(obj: Any, path: Sequence[str | int]) -> Any:
    """The value at `path` (mapping keys, list indexes); None where the path breaks."""
    node = obj
    for step in path:
        if type(step) is str:
            node = node.get(step) if type(node) is dict or isinstance(node, Mapping) else None
        elif isinstance(step, int):
            node = node[step] if isinstance(node, list) and 0 <= step < len(node) else None
        else:
            node = node.get(step) if isinstance(node, Mapping) else None
    return node


def nest(path: Path, value: Any) -> dict[str, Any]:
    """`{path[0]: {path[1]: ... value}}`: a merge patch setting one field."""
    out: dict[str, Any] = {path[-1]: value}
    for step in reversed(path[:-1]):
        out = {step: out}
    return out


def env_port(template: Mapping[str, Any], names: Sequence[str]) -> int | None:
    """The port a pod template's containers set in the first env var named in `names` (a
    literal value of digits, 1-65535), None when none does."""
    for container in _list(_mapping(template.get("spec")).get("containers")):
        for item in _list(_mapping(container).get("env")):
            env = _mapping(item)
            value = env.get("value")
            if (env.get("name") in names and isinstance(value, str) and value.isascii()
                    and value.isdigit() and 0 < int(value) < 65536):  # fmt: skip
                return int(value)
    return None


def count_of(value: object, default: int) -> int | None:
    """A replica-like count (absent: `default`); None when it is not a non-negative integer."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _parallel(spec: Mapping[str, Any]) -> int | None:
    """A batch Job spec's running pods: `parallelism` (default 1), at most `completions`."""
    parallelism = count_of(spec.get("parallelism"), 1)
    if "completions" not in spec:
        return parallelism
    completions = count_of(spec.get("completions"), 0)
    if parallelism is None or completions is None:
        return None
    return min(parallelism, completions)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
