"""The twin's Kueue integration of Kubeflow Trainer v2's TrainJob: its row of the integrated kinds.

Built by `kueue.Kueue` when the scenario's Kueue manages `trainer.kubeflow.org/trainjob` (Trainer
v2.2+: Kueue writes its admission through `runtimePatches`). Follows Kueue's TrainJob integration:
- the mutating webhook (on create) appends Kueue's own, empty `runtimePatches` entry (manager
  `kueue.x-k8s.io/manager`) to every TrainJob, and suspends one that carries the queue-name label
  (the suspend itself is the shared `kueue_webhook.suspend_on_create`; `mutate` here adds the
  entry);
- the pod sets are those of the JobSet the runtime builds for the TrainJob (the runtime's
  template with every `runtimePatches` entry merged in order, `trainjob_build`): one per
  replicated job, the initializers' included, so a TrainJob's trainer nodes (rank 0 and the
  others) are one pod set, and an MPI TrainJob's launcher is a second;
- starting writes the admission (per pod set: the labels, annotations, node selector,
  tolerations and scheduling gates Kueue gives it) into Kueue's entry's replicated jobs while the
  TrainJob is still suspended (the Trainer's webhook lets runtime patches change only then), then
  unsuspends it: two writes, as upstream's update and then its resume;
- stopping suspends the TrainJob and, once no replicated job of it is active, empties Kueue's
  entry's replicated jobs (what was given at admission taken back); a TrainJob whose entry is
  missing cannot be started (upstream: "kueue runtime patch not found").
Reads the store (the TrainJob's runtime) to derive the pod sets; writes nothing itself.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from agent.twin import trainjob_build as build
from agent.twin.apierror import ApiError
from agent.twin.crds import TrainerRelease
from agent.twin.kueue_jobs import (
    TRAINJOB_FRAMEWORK,
    PodSetSource,
    QueuedKind,
    jobset_pod_sets,
)
from agent.twin.resources import lookup
from agent.twin.store import Store

Obj = dict[str, Any]
In = Mapping[str, Any]
KUEUE_MANAGER = "kueue.x-k8s.io/manager"  # Kueue's own runtime-patch entry
TRAINJOBS = lookup("trainjobs")
TRAINING_RUNTIMES = lookup("trainingruntimes")
CLUSTER_TRAINING_RUNTIMES = lookup("clustertrainingruntimes")


class KueueEntryMissingError(ValueError):
    """The TrainJob has no runtime-patch entry of Kueue's: its admission cannot be written."""


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = obj.get("spec") or {}
    return found


def _patches(trainjob: Mapping[str, Any]) -> list[Obj]:
    return [copy.deepcopy(dict(p)) for p in _spec(trainjob).get("runtimePatches") or []
            if isinstance(p, Mapping)]  # fmt: skip


def empty_entry() -> Obj:
    return {"manager": KUEUE_MANAGER,
            "trainingRuntimeSpec": {"template": {"spec": {}}}}  # fmt: skip


def mutate(old: Obj | None, new: Obj) -> None:
    """Kueue's TrainJob defaulter: its own runtime-patch entry appended on create."""
    if old is not None:
        return
    spec = new.setdefault("spec", {})
    patches = spec.get("runtimePatches") if isinstance(spec.get("runtimePatches"), list) else []
    if not any(isinstance(p, Mapping) and p.get("manager") == KUEUE_MANAGER for p in patches):
        spec["runtimePatches"] = [*patches, empty_entry()]


def _rjob_patch(info: Any) -> Obj:
    """One replicated job's admission as a runtime patch (a PodSetInfo of `kueue_workloads`)."""
    meta: Obj = {k: dict(v) for k, v in (("annotations", info.annotations),
                                        ("labels", info.labels)) if v}  # fmt: skip
    spec: Obj = {}
    if info.node_selector:
        spec["nodeSelector"] = dict(info.node_selector)
    if info.tolerations:
        spec["tolerations"] = copy.deepcopy(info.tolerations)
    if info.gates:
        spec["schedulingGates"] = copy.deepcopy(info.gates)
    template: Obj = {}
    if meta:
        template["metadata"] = meta
    if spec:
        template["spec"] = spec
    return {"name": info.name, "template": {"spec": {"template": template}}}


def _with_entry(trainjob: Mapping[str, Any], rjobs: list[Obj] | None) -> list[Obj]:
    """The TrainJob's runtime patches with Kueue's entry's replicated jobs set to `rjobs`."""
    patches = _patches(trainjob)
    for entry in patches:
        if entry.get("manager") == KUEUE_MANAGER:
            template = entry.setdefault("trainingRuntimeSpec", {}).setdefault("template", {})
            body = template.setdefault("spec", {})
            if rjobs:
                body["replicatedJobs"] = rjobs
            else:
                body.pop("replicatedJobs", None)
            return patches
    raise KueueEntryMissingError("kueue runtime patch not found")


def start(trainjob: In, infos: Sequence[Any]) -> list[Obj]:
    """The admission into Kueue's entry (still suspended), then the resume."""
    patches = _with_entry(trainjob, [_rjob_patch(i) for i in infos])
    return [{"spec": {"runtimePatches": patches}}, {"spec": {"suspend": False}}]


def stop(trainjob: In, infos: Sequence[Any] | None) -> list[Obj]:
    """Suspend; with `infos` (no replicated job active any more), Kueue's entry emptied."""
    if infos is None:
        return [{"spec": {"suspend": True}}]
    try:
        patches = _with_entry(trainjob, None)
    except KueueEntryMissingError:
        return []
    if patches == _patches(trainjob):
        return []
    return [{"spec": {"runtimePatches": patches}}]


def _active(trainjob: In) -> bool:
    return any(int((s or {}).get("active") or 0)
               for s in (trainjob.get("status") or {}).get("jobsStatus") or [])  # fmt: skip


def _finished(trainjob: In) -> tuple[str, bool, bool]:
    for condition in (trainjob.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return str(condition.get("message") or ""), condition.get("type") == "Complete", True
    return "", True, False


def trainjob_kind(store: Store, release: TrainerRelease) -> QueuedKind:
    """The TrainJob row: its pod sets read from the JobSet its runtime builds (none while the
    runtime is missing or cannot be built)."""

    def runtime(trainjob: In) -> Obj | None:
        kind, name = build.runtime_ref(trainjob)
        try:
            if kind == "TrainingRuntime":
                namespace = str((trainjob.get("metadata") or {}).get("namespace") or "default")
                return store.get(TRAINING_RUNTIMES, name, namespace=namespace)
            if kind == "ClusterTrainingRuntime":
                return store.get(CLUSTER_TRAINING_RUNTIMES, name)
        except ApiError:
            return None
        return None

    def pod_sets(trainjob: In) -> list[PodSetSource]:
        found = runtime(trainjob)
        if found is None:
            return []
        try:
            jobset = build.build(trainjob, found, release).jobset
        except build.BuildError:
            return []
        return [PodSetSource(name=s.name, count=s.count, template=s.template, path=(),
                             field=f"job[{s.name}]", pod_index_label=s.pod_index_label,
                             sub_group_index_label=s.sub_group_index_label,
                             sub_group_count=s.sub_group_count)
                for s in jobset_pod_sets(jobset)]  # fmt: skip

    return QueuedKind(
        framework=TRAINJOB_FRAMEWORK, resource=TRAINJOBS, webhook="trainjob.kb.io",
        suspend_path=("spec", "suspend"), pod_sets=pod_sets, is_active=_active,
        finished=_finished, start=start, stop=stop,
    )  # fmt: skip
