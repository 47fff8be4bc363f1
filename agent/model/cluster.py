"""Cluster objects as the core sees them: nodes, namespaces, pods, owner objects and training jobs.

Built by `agent.snapshot` (from manifests) and later by the watch cache; read by `agent.topology` and
`agent.diagnosis`. Plain immutable data only: no parsing of manifests, no evaluation, no I/O.
Label mappings are never copied by the core and must not be mutated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from agent.model.kueue import NO_KUEUE, KueueObjects, PodSetTopology
from agent.model.network import Protocol
from agent.model.ownership import Ownership
from agent.model.workload import JobKind

ZONE_LABEL = "topology.kubernetes.io/zone"
GPU_RESOURCE = "nvidia.com/gpu"

_NO_LABELS: Mapping[str, str] = {}


class PodPhase(StrEnum):
    """The pod lifecycle phase (`status.phase`)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


FINISHED_PHASES = frozenset({PodPhase.SUCCEEDED, PodPhase.FAILED})


@dataclass(frozen=True, slots=True)
class ContainerPort:
    """One declared container port; `name` is None when the port is unnamed."""

    port: int
    name: str | None = None
    protocol: Protocol = Protocol.TCP


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """An ownerReference of an object (`controller` marks the managing owner)."""

    kind: str
    name: str
    api_version: str = ""
    controller: bool = False


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True, slots=True)
class Node:
    """A node: labels (zone among them), allocatable GPUs, cordon state and taints."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_allocatable: int = 0
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()

    @property
    def zone(self) -> str | None:
        return self.labels.get(ZONE_LABEL)


@dataclass(frozen=True, slots=True)
class Namespace:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def controller_of(owners: Sequence[OwnerRef]) -> OwnerRef | None:
    """The owner reference marked `controller: true`, if any (at most one per object)."""
    return next((owner for owner in owners if owner.controller), None)


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod: identity (namespace, labels, service account), placement, phase, GPUs and ports."""

    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    node_name: str | None = None
    phase: PodPhase = PodPhase.PENDING
    gpu_request: int = 0
    ports: tuple[ContainerPort, ...] = ()
    service_account: str = "default"
    owners: tuple[OwnerRef, ...] = ()

    @property
    def live(self) -> bool:
        """True unless the pod has finished (Succeeded or Failed)."""
        return self.phase not in FINISHED_PHASES

    @property
    def controller(self) -> OwnerRef | None:
        return controller_of(self.owners)

    def named_ports(self) -> dict[tuple[str, Protocol], int]:
        """(container port name, protocol) -> number, for the named ports of this pod."""
        return {(p.name, p.protocol): p.port for p in self.ports if p.name}


@dataclass(frozen=True, slots=True)
class OwnedObject:
    """A workload object that only matters for ownership chains (batch Job, ReplicaSet, Deployment)."""

    kind: str
    namespace: str
    name: str
    owners: tuple[OwnerRef, ...] = ()
    ownership: Ownership | None = None  # who re-applies it (`agent.model.ownership`), if read

    @property
    def controller(self) -> OwnerRef | None:
        return controller_of(self.owners)


@dataclass(frozen=True, slots=True)
class DeclaredCoordinator:
    """The coordinator an object names (JobSet `spec.coordinator`): replicated job, the Job's
    index in it, the pod's completion index in that Job."""

    replica: str
    job_index: int = 0
    pod_index: int = 0


@dataclass(frozen=True, slots=True)
class TrainingJobObject:
    """The job object of a training job, as far as diagnosis needs it.

    `suspend` and `managed_by` are read where the kind's descriptor says (`spec.runPolicy`,
    `spec`); `managed_by` is None when unset; `finished` is true once a finished condition is
    True. `owners`: its ownerReferences (a TrainJob's JobSet is controlled by the TrainJob).
    For a kind with replicated jobs: `gang` the replicated jobs whose pods form the gang, in
    the object's order, `outside` those that do not (initializers), `coordinator` the one the
    object names, if any, `ports` the port each gang replicated job's template sets in its
    kind's port env var (torch `PET_MASTER_PORT`, `MASTER_PORT`), where it does. `topology`:
    the Topology Aware Scheduling request each gang pod template carries (its Kueue PodSet),
    by replica (replica type, or replicated job name), templates that ask nothing left out;
    `pod_sets` every gang pod template's replica, in the object's order (Kueue makes one PodSet
    of each; empty for a kind whose templates live on the object it is materialised as);
    `pod_counts` how many pods each of them runs (Kueue's PodSet count), where it is known.
    """

    kind: JobKind
    namespace: str
    name: str
    api_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    suspend: bool = False
    managed_by: str | None = None
    finished: bool = False
    owners: tuple[OwnerRef, ...] = ()
    gang: tuple[str, ...] = ()
    outside: frozenset[str] = frozenset()
    coordinator: DeclaredCoordinator | None = None
    ports: Mapping[str, int] = field(default_factory=dict)
    topology: Mapping[str, PodSetTopology] = field(default_factory=dict)
    pod_sets: tuple[str, ...] = ()
    pod_counts: Mapping[str, int] = field(default_factory=dict)
    ownership: Ownership | None = None  # who re-applies it (`agent.model.ownership`), if read

    @property
    def controller(self) -> OwnerRef | None:
        return controller_of(self.owners)


@dataclass(frozen=True)
class ClusterState:
    """Everything topology needs to know about a cluster at one moment (no policies).

    `job_objects` is keyed by (kind, namespace, name); `owned_objects` by (kind, namespace, name)
    with kinds like `Job` (batch), `ReplicaSet`, `Deployment`; `kueue` every Kueue object
    (empty when Kueue is not installed).
    """

    nodes: Mapping[str, Node] = field(default_factory=dict)
    namespaces: Mapping[str, Namespace] = field(default_factory=dict)
    pods: tuple[Pod, ...] = ()
    job_objects: Mapping[tuple[JobKind, str, str], TrainingJobObject] = field(default_factory=dict)
    owned_objects: Mapping[tuple[str, str, str], OwnedObject] = field(default_factory=dict)
    kueue: KueueObjects = NO_KUEUE

    def zones(self) -> list[str]:
        """Every zone named by a node label, sorted."""
        return sorted({z for n in self.nodes.values() if (z := n.zone) is not None})
