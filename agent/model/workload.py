"""The workload kinds zonemedic knows, one descriptor each: the only place their names are written.

A `WorkloadKind` describes a kind of training job whose pods form one gang: its API group, the
versions it is served as (in preference order: a cluster serving several is read at the first),
its plural, how its pods name it (`GangLabels`, the operator-name values, the batch Job that owns
its coordinator), its coordinator and port (`Coordinator`), where its pod templates and their pod
counts live (`PodTemplates`), how it suspends and resumes and which template fields may change
while it is suspended (`Suspension`), which conditions say it is suspended or finished, and what
marks it as Kueue's (`KueueMarkers`). `OwnerKind` describes the workloads a configured generic
group is made of (batch Job, ReplicaSet, Deployment): its template, pod count, how it is moved.
`JobKind` names the training kinds, plus `Group` (a configured generic group, no API kind).

Two families are described. Kubeflow training-operator v1 kinds (and mpi-operator's v2beta1
MPIJob) keep a replica-spec map and label their pods `training.kubeflow.org/*`. JobSet
(`jobset.x-k8s.io/v1alpha2`) keeps a list of replicated jobs, each a batch Job template run
`replicas` times; its pods are owned by those Jobs and labelled `jobset.sigs.k8s.io/jobset-name`,
`replicatedjob-name`, `job-index`, `job-global-index`, with the annotation
`batch.kubernetes.io/job-completion-index`. A Kubeflow Trainer v2 TrainJob
(`trainer.kubeflow.org/v1alpha1`) holds no pod template: its controller materialises it as a
JobSet of the same name and namespace with a controller ownerReference to it
(`WorkloadKind.materialised`), and its pods, templates and coordinator are that JobSet's; a pod
of a JobSet a TrainJob owns belongs to the TrainJob. Initializer replicated jobs
(`dataset-initializer`, `model-initializer`) run before training and are outside the gang
(`PodTemplates.outside`).

Adding a kind is one `WorkloadKind` in `WORKLOADS`: the watch lists and watches it, the cache
and the snapshot parser read it, topology finds its gang and coordinator, the planner finds its
templates and suspends it, the re-diagnosis lists it, playbooks may name it, and the RBAC test
checks the ClusterRole grants it. LeaderWorkerSet and KubeRay fit the same types (a template
layout, gang labels, a coordinator rule) when they come.

Read by the sources (what to watch, which job a pod belongs to, the pods a job expects), the
snapshot parser and the runtime's mirror, topology (labels, coordinator, ports), diagnosis and the
guards (Kueue markers, managedBy), the planner and the writer (template paths, suspend), the
re-diagnosis (what to list) and the playbook schema (`job_kinds`). Pure data: the parts a
descriptor is made of, and the readers of a manifest along its paths, are `agent.model.descriptor`'s.
It does not parse manifests into core objects, decide anything, or do I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from agent.model.descriptor import (
    Conditions,
    Coordinator,
    GangLabels,
    KueueMarkers,
    Launcher,
    OwnerKind,
    OwnerMove,
    Path,
    PodCount,
    PodTemplates,
    Suspension,
    TemplateLayout,
)


class JobKind(StrEnum):
    """Kinds of training job a finding can be about (`Group` is a configured generic group)."""

    PYTORCH = "PyTorchJob"
    TF = "TFJob"
    MPI = "MPIJob"
    XGBOOST = "XGBoostJob"
    PADDLE = "PaddleJob"
    JAX = "JAXJob"
    TRAINJOB = "TrainJob"
    JOBSET = "JobSet"
    GROUP = "Group"


KUEUE = KueueMarkers(
    queue_label="kueue.x-k8s.io/queue-name",
    managed_label="kueue.x-k8s.io/managed",
    topology_annotation="kueue.x-k8s.io/podset-required-topology",
    preferred_annotation="kueue.x-k8s.io/podset-preferred-topology",
    unconstrained_annotation="kueue.x-k8s.io/podset-unconstrained-topology",
    group_annotation="kueue.x-k8s.io/podset-group-name",
    workload_annotation="kueue.x-k8s.io/workload",
)


class KueueKindName(StrEnum):
    """The Kueue API kinds the agent reads (and, for Workloads, patches)."""

    WORKLOAD = "Workload"
    CLUSTER_QUEUE = "ClusterQueue"
    LOCAL_QUEUE = "LocalQueue"
    RESOURCE_FLAVOR = "ResourceFlavor"
    TOPOLOGY = "Topology"


@dataclass(frozen=True, slots=True)
class KueueKind:
    """One Kueue API kind: its group, the versions read (preferred first: v1beta1 is served by
    every Kueue release from v0.9 on, deprecated but served since v1beta2 became the storage
    version in v0.16; v1beta2 encodes topology assignments differently, so it is not read), its
    plural and scope."""

    kind: KueueKindName
    group: str
    versions: tuple[str, ...]
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.versions[0]}"


KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_WORKLOAD = KueueKind(KueueKindName.WORKLOAD, KUEUE_GROUP, ("v1beta1",), "workloads", True)
KUEUE_CLUSTER_QUEUE = KueueKind(KueueKindName.CLUSTER_QUEUE, KUEUE_GROUP, ("v1beta1",),
                                "clusterqueues", False)  # fmt: skip
KUEUE_LOCAL_QUEUE = KueueKind(KueueKindName.LOCAL_QUEUE, KUEUE_GROUP, ("v1beta1",), "localqueues",
                              True)  # fmt: skip
KUEUE_RESOURCE_FLAVOR = KueueKind(KueueKindName.RESOURCE_FLAVOR, KUEUE_GROUP, ("v1beta1",),
                                  "resourceflavors", False)  # fmt: skip
# Topology: v1beta1 since Kueue v0.14; v0.13 served it as v1alpha1 only.
KUEUE_TOPOLOGY = KueueKind(KueueKindName.TOPOLOGY, KUEUE_GROUP, ("v1beta1", "v1alpha1"),
                           "topologies", False)  # fmt: skip
KUEUE_KINDS: tuple[KueueKind, ...] = (KUEUE_WORKLOAD, KUEUE_CLUSTER_QUEUE, KUEUE_LOCAL_QUEUE,
                                      KUEUE_RESOURCE_FLAVOR, KUEUE_TOPOLOGY)  # fmt: skip
_KUEUE_BY_NAME: Mapping[str, KueueKind] = {k.kind.value: k for k in KUEUE_KINDS}


def kueue_kind_served(group: str, version: str, kind: str) -> KueueKind | None:
    """The Kueue descriptor of an object of this apiVersion and kind, when it is a version the
    agent reads; else None."""
    found = _KUEUE_BY_NAME.get(kind)
    return found if found is not None and group == found.group and version in found.versions else None


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """One kind of training job: everything the agent needs to watch, read, group, plan, suspend
    and resume it. `launcher_job`: the suffix of the batch Job that owns its coordinator pod
    (`<job>-launcher`), when one does. `operators`: the operator-name label values naming it.
    `materialised`: the kind its controller materialises it as (same name and namespace, a
    controller ownerReference to it), whose object holds its pod templates (read with
    `templates`) and owns its pods; None when its own object does. `pods_owned_by`: the kind
    that owns its pods (controller ownerReference) when not itself (JobSet: batch Jobs)."""

    kind: JobKind
    group: str
    versions: tuple[str, ...]
    plural: str
    labels: GangLabels
    operators: tuple[str, ...]
    coordinator: Coordinator
    templates: PodTemplates
    suspension: Suspension
    conditions: Conditions
    kueue: KueueMarkers = KUEUE
    launcher_job: str | None = None
    materialised: JobKind | None = None
    pods_owned_by: str | None = None

    @property
    def api_versions(self) -> tuple[str, ...]:
        return tuple(f"{self.group}/{v}" for v in self.versions)

    @property
    def api_version(self) -> str:
        """The preferred apiVersion (the first served)."""
        return self.api_versions[0]


# --- the table -----------------------------------------------------------------------------------

KUBEFLOW_GROUP = "kubeflow.org"
# the label domain Kubeflow Pipelines marks the objects of a pipeline run with (not an API group)
PIPELINES_LABEL_PREFIX = f"pipelines.{KUBEFLOW_GROUP}/"
KUBEFLOW_LABELS = GangLabels(
    job_name="training.kubeflow.org/job-name",
    replica_type="training.kubeflow.org/replica-type",
    replica_index="training.kubeflow.org/replica-index",
    job_role="training.kubeflow.org/job-role",
    operator="training.kubeflow.org/operator-name",
    coordinator_role="master",
)
# `runPolicy.managedBy` values naming the Kubeflow operators themselves (mpi-operator serves the
# v2beta1 MPIJob); any other value (Kueue's MultiKueue) means another controller owns suspend.
KUBEFLOW_MANAGERS = frozenset({"kubeflow.org/training-operator", "kubeflow.org/mpi-operator"})
_KUBEFLOW_SUSPENSION = Suspension(
    suspend=("spec", "runPolicy", "suspend"),
    managed_by=("spec", "runPolicy", "managedBy"),
    own_managers=KUBEFLOW_MANAGERS,
)
_KUBEFLOW_CONDITIONS = Conditions(suspended="Suspended", finished=("Succeeded", "Failed"))


def _kubeflow(
    kind: JobKind, plural: str, specs: str, *, operators: tuple[str, ...], coordinator: Coordinator,
    versions: tuple[str, ...] = ("v1",), launcher_job: str | None = None,
) -> WorkloadKind:  # fmt: skip
    return WorkloadKind(
        kind=kind, group=KUBEFLOW_GROUP, versions=versions, plural=plural, labels=KUBEFLOW_LABELS,
        operators=operators, coordinator=coordinator,
        templates=PodTemplates(TemplateLayout.REPLICA_SPECS, ("spec", specs)),
        suspension=_KUBEFLOW_SUSPENSION, conditions=_KUBEFLOW_CONDITIONS, launcher_job=launcher_job,
    )  # fmt: skip


PYTORCH = _kubeflow(JobKind.PYTORCH, "pytorchjobs", "pytorchReplicaSpecs",
                    operators=("pytorchjob-controller",),
                    coordinator=Coordinator(("master",), "pytorchjob-port", 23456))  # fmt: skip
TF = _kubeflow(JobKind.TF, "tfjobs", "tfReplicaSpecs", operators=("tfjob-controller",),
               coordinator=Coordinator(("chief", "master"), "tfjob-port", 2222))  # fmt: skip
# training-operator's kubeflow.org/v1, or mpi-operator's v2beta1 (launcher owned by a batch Job)
MPI = _kubeflow(JobKind.MPI, "mpijobs", "mpiReplicaSpecs", versions=("v1", "v2beta1"),
                operators=("mpijob-controller", "mpi-operator"), launcher_job="-launcher",
                coordinator=Coordinator(("launcher",), "ssh", 22, worker_zero=False))  # fmt: skip
XGBOOST = _kubeflow(JobKind.XGBOOST, "xgboostjobs", "xgbReplicaSpecs",
                    operators=("xgboostjob-controller",),
                    coordinator=Coordinator(("master",), "xgboostjob-port", 9999))  # fmt: skip
PADDLE = _kubeflow(JobKind.PADDLE, "paddlejobs", "paddleReplicaSpecs",
                   operators=("paddlejob-controller",),
                   coordinator=Coordinator(("master",), "master", 36543, first_port=True))  # fmt: skip
JAX = _kubeflow(JobKind.JAX, "jaxjobs", "jaxReplicaSpecs", operators=("jaxjob-controller",),
                coordinator=Coordinator((), "jaxjob-port", 6666, first_port=True))  # fmt: skip

# --- JobSet and Kubeflow Trainer v2 ---

JOBSET_GROUP = "jobset.x-k8s.io"
TRAINER_GROUP = "trainer.kubeflow.org"
JOBSET_LABELS = GangLabels(
    job_name="jobset.sigs.k8s.io/jobset-name",
    replica_type="jobset.sigs.k8s.io/replicatedjob-name",
    replica_index="jobset.sigs.k8s.io/job-index",
    global_index="jobset.sigs.k8s.io/job-global-index",
    completion_index="batch.kubernetes.io/job-completion-index",
)
# The Trainer's initializer steps: replicated jobs named so, or whose Job template carries the
# ancestor-step label with that value; they complete before the trainer nodes start.
TRAINER_ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
INITIALIZERS = frozenset({"dataset-initializer", "model-initializer"})
REPLICATED_JOBS = PodTemplates(
    TemplateLayout.REPLICATED_JOBS, ("spec", "replicatedJobs"), outside=INITIALIZERS, outside_label=TRAINER_ANCESTOR_LABEL,
)  # fmt: skip
# The pod-template fields the JobSet webhook lets change while the JobSet is (or is being)
# suspended (Kueue's mutable scheduling directives); everything else in replicatedJobs is
# immutable, affinity included. A TrainJob's runtime patches land in its JobSet: the same set.
JOBSET_MUTABLE = frozenset({"metadata.labels", "metadata.annotations", "spec.nodeSelector",
                            "spec.tolerations", "spec.schedulingGates"})  # fmt: skip
JOBSET_CONTROLLER = "jobset.sigs.k8s.io/jobset-controller"
TRAINJOB_CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
TRAINER_PORT = 29500  # the Trainer's torch master port (PET_MASTER_PORT) and container port
# MPI (the Trainer's `launcher` replicated job): it dials the nodes' sshd on their `ssh` port.
MPI_LAUNCHER = Launcher("launcher", port_name="ssh", default_port=22)
MASTER_PORT_ENV = ("PET_MASTER_PORT", "MASTER_PORT")
# Kinds a dump of a Trainer cluster holds that the diagnosis does not read (a TrainJob's pods and
# templates are its JobSet's): the snapshot reader skips them without a warning.
TRAINING_RUNTIMES = frozenset({(TRAINER_GROUP, "TrainingRuntime"),
                               (TRAINER_GROUP, "ClusterTrainingRuntime")})  # fmt: skip

JOBSET = WorkloadKind(
    kind=JobKind.JOBSET, group=JOBSET_GROUP, versions=("v1alpha2",), plural="jobsets",
    labels=JOBSET_LABELS, operators=(),
    # spec.coordinator when set, else rank 0 of `node`, else of the first replicated job
    coordinator=Coordinator(("node",), None, TRAINER_PORT, worker_zero=False, first_port=True,
                            port_env=MASTER_PORT_ENV, declared=("spec", "coordinator"),
                            first_replica=True, launcher=MPI_LAUNCHER),
    templates=REPLICATED_JOBS,
    suspension=Suspension(suspend=("spec", "suspend"), managed_by=("spec", "managedBy"),
                          own_managers=frozenset({JOBSET_CONTROLLER}), mutable=JOBSET_MUTABLE),
    conditions=Conditions(suspended="Suspended", finished=("Completed", "Failed")),
    pods_owned_by="Job",
)  # fmt: skip
TRAINJOB = WorkloadKind(
    kind=JobKind.TRAINJOB, group=TRAINER_GROUP, versions=("v1alpha1",), plural="trainjobs",
    labels=JOBSET_LABELS, operators=(),
    # torch: rank 0 is `node` job 0, completion index 0 (PET_MASTER_ADDR=<job>-node-0-0.<job>);
    # MPI: the launcher
    coordinator=Coordinator(("node",), None, TRAINER_PORT, worker_zero=False, first_port=True,
                            port_env=MASTER_PORT_ENV, first_replica=True, launcher=MPI_LAUNCHER),
    templates=REPLICATED_JOBS,  # read on its JobSet (`materialised`)
    suspension=Suspension(suspend=("spec", "suspend"), managed_by=("spec", "managedBy"),
                          own_managers=frozenset({TRAINJOB_CONTROLLER}), mutable=JOBSET_MUTABLE),
    conditions=Conditions(suspended="Suspended", finished=("Complete", "Failed")),
    materialised=JobKind.JOBSET, pods_owned_by="Job",
)  # fmt: skip

# the `manager` of zonemedic's own TrainJob `runtimePatches` entry (a domain-prefixed name)
TRAINJOB_PATCH_MANAGER = "zonemedic.io/remediation"

WORKLOADS: tuple[WorkloadKind, ...] = (PYTORCH, TF, MPI, XGBOOST, PADDLE, JAX, TRAINJOB, JOBSET)

BATCH_JOB = OwnerKind(
    kind="Job", group="batch", version="v1", plural="jobs",
    templates=PodTemplates(TemplateLayout.TEMPLATE, ("spec", "template"), PodCount.PARALLELISM),
    move=OwnerMove.RECREATE,
    conditions=Conditions(suspended="Suspended", finished=("Complete", "Failed")),
    suspension=Suspension(suspend=("spec", "suspend"), managed_by=("spec", "managedBy"),
                          own_managers=frozenset({"kubernetes.io/job-controller"})),
)  # fmt: skip
REPLICA_SET = OwnerKind(
    kind="ReplicaSet", group="apps", version="v1", plural="replicasets",
    templates=PodTemplates(TemplateLayout.TEMPLATE, ("spec", "template")),
    move=OwnerMove.THROUGH_OWNER, through="Deployment",
)  # fmt: skip
DEPLOYMENT = OwnerKind(
    kind="Deployment", group="apps", version="v1", plural="deployments",
    templates=PodTemplates(TemplateLayout.TEMPLATE, ("spec", "template")),
    move=OwnerMove.ROLLOUT,
)  # fmt: skip

OWNERS: tuple[OwnerKind, ...] = (BATCH_JOB, REPLICA_SET, DEPLOYMENT)
# Controllers of a generic group's pods that recreate them after a restart: the owner kinds, and
# StatefulSets (the agent does not move those, but a restart does not lose their pods).
RESTARTABLE_CONTROLLERS = frozenset({*(o.kind for o in OWNERS), "StatefulSet"})

_BY_KIND: Mapping[JobKind, WorkloadKind] = {w.kind: w for w in WORKLOADS}
_BY_NAME: Mapping[str, WorkloadKind] = {w.kind.value: w for w in WORKLOADS}
_OWNERS_BY_NAME: Mapping[str, OwnerKind] = {o.kind: o for o in OWNERS}
_BY_OPERATOR: Mapping[str, WorkloadKind] = {op: w for w in WORKLOADS for op in w.operators}


def workload(kind: JobKind) -> WorkloadKind:
    """The descriptor of a training kind; `KeyError` for `Group` (no API kind)."""
    return _BY_KIND[kind]


def workload_named(kind: str, *, group: str | None = None) -> WorkloadKind | None:
    """The descriptor of the kind named `kind` (and, when given, of API group `group`)."""
    found = _BY_NAME.get(kind)
    return found if found is not None and group in (None, found.group) else None


def workload_served(group: str, version: str, kind: str) -> WorkloadKind | None:
    """The descriptor of an object of this apiVersion and kind, when it is a version the kind
    is served as; else None."""
    found = workload_named(kind, group=group)
    return found if found is not None and version in found.versions else None


def workload_of_operator(name: str) -> WorkloadKind | None:
    """The kind an operator-name label value names."""
    return _BY_OPERATOR.get(name)


def materialising(kind: JobKind) -> WorkloadKind | None:
    """The kind whose objects are materialised as objects of `kind` (JobSet: TrainJob)."""
    return next((w for w in WORKLOADS if w.materialised is kind), None)


def launched_kind() -> WorkloadKind | None:
    """The kind whose coordinator pod is owned by a batch Job (mpi-operator's launcher)."""
    return next((w for w in WORKLOADS if w.launcher_job is not None), None)


def owner_kind(kind: str) -> OwnerKind | None:
    """The descriptor of a generic group's owner kind named `kind`."""
    return _OWNERS_BY_NAME.get(kind)


def own_managers() -> frozenset[str]:
    """Every `managedBy` value that names a kind's own controller (any kind of the tables)."""
    out: set[str] = set()
    for w in WORKLOADS:
        out |= w.suspension.own_managers
    for o in OWNERS:
        if o.suspension is not None:
            out |= o.suspension.own_managers
    return frozenset(out)


def managed_by_paths() -> tuple[Path, ...]:
    """Where objects of the tables name their managing controller, each path once."""
    paths = [w.suspension.managed_by for w in WORKLOADS]
    paths += [o.suspension.managed_by for o in OWNERS if o.suspension is not None]
    return tuple(dict.fromkeys(paths))
