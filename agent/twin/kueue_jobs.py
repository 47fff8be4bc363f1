"""The job kinds the twin's Kueue integrates: a suspendable job with pod sets, one row per kind.

Called by the Kueue webhook (which kinds to suspend on create, where their pod templates are for
validation), the job reconciler and the Workload builder. A `QueuedKind` says where the kind keeps
`suspend`, how its pod sets are derived (Kueue's `PodSets()`: name, count, the template and where
it lives in the job, the pod index label Topology Aware Scheduling ranks pods by), whether the job
still has active pods and whether it finished. Rows follow Kueue v0.14's integrations:
- Kubeflow v1 jobs (PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob): `spec.runPolicy.suspend`;
  one pod set per replica type present, in the kind's order, named in lower case (`master`,
  `worker`, `ps`, ...); active while a replica status counts active pods; finished on
  Succeeded/Failed;
- mpi-operator's MPIJob (kubeflow.org/v2beta1): the same with `launcher` and `worker`;
- batch/v1 Job: `spec.suspend`; one pod set `main` of min(parallelism, completions) pods;
- JobSet (jobset.x-k8s.io/v1alpha2): `spec.suspend`; one pod set per replicated job, named as it
  is, of replicas x min(parallelism, completions) pods, its pods ranked by the Job completion
  index within their Job's index (`jobset.sigs.k8s.io/job-index`, `replicas` Jobs); active while
  a replicated job counts active Jobs; finished on Completed/Failed.
A kind whose pod templates are derived (TrainJob: those of the JobSet its runtime builds, started
through Kueue's own `runtimePatches` entry, `agent.twin.kueue_trainjob`) is one more row with its
own `pod_sets` and `start`/`stop` (the admission cannot go into those templates in place);
`KINDS` is the table of the kinds that need nothing but the job. Pure: JSON in, rows out.
It does not decide when to suspend or admit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.model.descriptor import dig
from agent.twin.kueue_labels import QUEUE_LABEL
from agent.twin.operator_kinds import KINDS as TRAINING_KINDS
from agent.twin.operator_kinds import TrainingKind
from agent.twin.resources import ResourceType, lookup

Obj = Mapping[str, Any]
Path = tuple[str | int, ...]
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True)
class PodSetSource:
    """One pod set of a job: its name, pod count, template and the template's place in the job."""

    name: str
    count: int
    template: Mapping[str, Any]
    path: Path  # keys from the job's root to the pod template
    field: str  # the template's field path as validation errors print it
    pod_index_label: str | None
    # A pod set made of several Jobs (a JobSet's replicated job): the label of the Job's index
    # (jobset.sigs.k8s.io/job-index) and how many Jobs there are.
    sub_group_index_label: str | None = None
    sub_group_count: int | None = None


@dataclass(frozen=True)
class QueuedKind:
    framework: str  # Kueue's integration name, e.g. kubeflow.org/pytorchjob
    resource: ResourceType
    webhook: str  # the webhooks' base name: m<webhook> mutates, v<webhook> validates
    suspend_path: tuple[str, ...]
    pod_sets: Callable[[Obj], list[PodSetSource]]
    is_active: Callable[[Obj], bool]
    finished: Callable[[Obj], tuple[str, bool, bool]]  # (message, succeeded, finished)
    # A kind whose pod templates are derived (TrainJob: its runtime's JobSet) cannot take the
    # admission in `pod_sets`' templates: it says how to start (the merge patches, in order, that
    # write the infos given and unsuspend) and how to stop (infos None: the suspend; else, once
    # nothing of it is active, the patches undoing its own injection). None: merged into the
    # templates in place.
    start: Callable[[Obj, Sequence[Any]], list[dict[str, Any]]] | None = None
    stop: Callable[[Obj, Sequence[Any] | None], list[dict[str, Any]]] | None = None
    # Kueue's webhook of the kind checks `podset-group-name` groups (JobSet, mpi-operator's
    # MPIJob; not the Kubeflow v1 kinds nor TrainJob)
    validates_groups: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return self.resource.key


def is_suspended(kind: QueuedKind, job: Obj) -> bool:
    return bool(dig(job, kind.suspend_path))


def suspend_patch(kind: QueuedKind, suspend: bool) -> dict[str, Any]:
    body: dict[str, Any] = {}
    node = body
    for step in kind.suspend_path[:-1]:
        node = node.setdefault(step, {})
    node[kind.suspend_path[-1]] = suspend
    return body


def queue_name(job: Obj) -> str:
    return str(((job.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL) or "")


def _true_condition_message(job: Obj, kinds: tuple[str, ...], failed: str) -> tuple[str, bool, bool]:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in kinds and condition.get("status") == "True":
            return str(condition.get("message") or ""), condition.get("type") != failed, True
    return "", True, False


# --- Kubeflow v1 jobs and mpi-operator's MPIJob -------------------------------------------------


def _replica_pod_sets(kind: TrainingKind) -> Callable[[Obj], list[PodSetSource]]:
    def pod_sets(job: Obj) -> list[PodSetSource]:
        raw = (job.get("spec") or {}).get(kind.specs_field) or {}
        out = []
        for canonical in kind.replica_types:
            key = next((k for k in raw if str(k).lower() == canonical.lower()), None)
            if key is None or not isinstance(raw[key], Mapping):
                continue
            spec = raw[key]
            out.append(PodSetSource(
                name=str(key).lower(), count=int(spec.get("replicas", 1)),
                template=spec.get("template") or {}, path=("spec", kind.specs_field, key, "template"),
                field=f"spec.{kind.specs_field}[{key}].template", pod_index_label=REPLICA_INDEX_LABEL,
            ))  # fmt: skip
        return out

    return pod_sets


def _replicas_active(job: Obj) -> bool:
    statuses = (job.get("status") or {}).get("replicaStatuses") or {}
    return any(int((s or {}).get("active") or 0) for s in statuses.values())


def _training_finished(job: Obj) -> tuple[str, bool, bool]:
    return _true_condition_message(job, ("Succeeded", "Failed"), "Failed")


def _training(kind: TrainingKind) -> QueuedKind:
    return QueuedKind(
        framework=f"kubeflow.org/{kind.kind.lower()}",
        resource=lookup(kind.plural, group="kubeflow.org", version=kind.version),
        webhook=f"{kind.kind.lower()}.kb.io",
        suspend_path=("spec", "runPolicy", "suspend"),
        pod_sets=_replica_pod_sets(kind),
        is_active=_replicas_active,
        finished=_training_finished,
        validates_groups=kind.version == "v2beta1",  # mpi-operator's MPIJob
    )


# --- batch/v1 Job -------------------------------------------------------------------------------


def _batch_pod_sets(job: Obj) -> list[PodSetSource]:
    spec = job.get("spec") or {}
    count = int(spec.get("parallelism", 1))
    if spec.get("completions") is not None:
        count = min(count, int(spec["completions"]))
    return [PodSetSource(name="main", count=count, template=spec.get("template") or {},
                         path=("spec", "template"), field="spec.template",
                         pod_index_label=COMPLETION_INDEX_LABEL)]  # fmt: skip


def _batch_active(job: Obj) -> bool:
    return bool(int((job.get("status") or {}).get("active") or 0))


def _batch_finished(job: Obj) -> tuple[str, bool, bool]:
    return _true_condition_message(job, ("Complete", "Failed"), "Failed")


BATCH_JOB = QueuedKind(
    framework="batch/job",
    resource=lookup("jobs", group="batch"),
    webhook="job.kb.io",
    suspend_path=("spec", "suspend"),
    pod_sets=_batch_pod_sets,
    is_active=_batch_active,
    finished=_batch_finished,
)

# --- JobSet ------------------------------------------------------------------------------------

JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"


def jobset_pod_sets(jobset: Obj) -> list[PodSetSource]:
    """One pod set per replicated job (Kueue's JobSet `PodSets()`)."""
    out = []
    for index, rjob in enumerate((jobset.get("spec") or {}).get("replicatedJobs") or []):
        if not isinstance(rjob, Mapping):
            continue
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        per_job = int(job_spec.get("parallelism", 1) or 1)
        if job_spec.get("completions") is not None:
            per_job = min(per_job, int(job_spec["completions"]))
        replicas = int(rjob.get("replicas", 1) or 1)
        name = str(rjob.get("name"))
        out.append(PodSetSource(
            name=name, count=replicas * per_job, template=job_spec.get("template") or {},
            path=("spec", "replicatedJobs", index, "template", "spec", "template"),
            field=f"spec.replicatedJobs[{index}].template.spec.template",
            pod_index_label=COMPLETION_INDEX_LABEL, sub_group_index_label=JOB_INDEX_LABEL,
            sub_group_count=replicas,
        ))  # fmt: skip
    return out


def _jobset_active(jobset: Obj) -> bool:
    return any(int((s or {}).get("active") or 0)
               for s in (jobset.get("status") or {}).get("replicatedJobsStatus") or [])  # fmt: skip


def _jobset_finished(jobset: Obj) -> tuple[str, bool, bool]:
    return _true_condition_message(jobset, ("Completed", "Failed"), "Failed")


JOBSET = QueuedKind(
    framework="jobset.x-k8s.io/jobset",
    resource=lookup("jobsets", group="jobset.x-k8s.io"),
    webhook="jobset.kb.io",
    suspend_path=("spec", "suspend"),
    pod_sets=jobset_pod_sets,
    is_active=_jobset_active,
    finished=_jobset_finished,
    validates_groups=True,
)

_KUBEFLOW_INTEGRATED = ("pytorchjobs", "tfjobs", "xgboostjobs", "paddlejobs", "jaxjobs")
KINDS: tuple[QueuedKind, ...] = (
    *(_training(TRAINING_KINDS[("v1", plural)]) for plural in _KUBEFLOW_INTEGRATED),
    _training(TRAINING_KINDS[("v2beta1", "mpijobs")]),
    BATCH_JOB,
    JOBSET,
)
TRAINJOB_FRAMEWORK = "trainer.kubeflow.org/trainjob"  # its row needs the store (kueue_trainjob)
FRAMEWORKS = (*(k.framework for k in KINDS), TRAINJOB_FRAMEWORK)


def by_resource(rt: ResourceType) -> QueuedKind | None:
    return next((k for k in KINDS if k.key == rt.key), None)


TRAINJOB_OWNER = ("trainer.kubeflow.org/v1alpha1", "TrainJob")


def by_owner(api_version: str, kind: str) -> bool:
    """Whether an ownerReference names an integrated kind (the TrainJob's row included)."""
    return (api_version, kind) == TRAINJOB_OWNER or any(
        k.resource.api_version == api_version and k.resource.kind == kind for k in KINDS)


def has_queued_owner(job: Obj) -> bool:
    """A job controlled by another integrated kind (an MPIJob's launcher Job, a JobSet's Jobs):
    Kueue manages the top-level job only."""
    for ref in (job.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and by_owner(str(ref.get("apiVersion")), str(ref.get("kind"))):
            return True
    return False
