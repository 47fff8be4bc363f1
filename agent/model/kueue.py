"""Kueue's objects as the core sees them: queues, flavors, topologies, Workloads, PodSet requests.

Built by `agent.snapshot.kueue` (from manifests: a dump, or the watch cache's slim objects) and
read by the diagnosis (`agent.diagnosis.kueue`: is the job Kueue's, through which queue, is
Topology Aware Scheduling configured for its flavor, what its PodSets ask for) and the Kueue
remediation planner. A `PodSetTopology` is what one pod template's annotations ask of TAS (the
annotation names are `agent.model.workload.KUEUE`'s). `KueueObjects` holds every Kueue object of
a cluster, keyed by name (namespaced ones by namespace and name). Plain immutable data: no
parsing of manifests, no decision, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agent.model.workload import KUEUE

ZONE_LEVEL = "topology.kubernetes.io/zone"  # the Topology level of zones (nodes' zone label)
# the Topology level of nodes: when it is a Topology's lowest level, Kueue records a topology
# assignment at that level only (its domains name nodes, not zones)
HOSTNAME_LEVEL = "kubernetes.io/hostname"


@dataclass(frozen=True, slots=True)
class PodSetTopology:
    """The Topology Aware Scheduling request of one pod template: the required level, the
    preferred level, the unconstrained flag, the PodSet group name (each None/False unset)."""

    required: str | None = None
    preferred: str | None = None
    unconstrained: bool = False
    group: str | None = None

    @property
    def requested(self) -> bool:
        """True when the template asks TAS for anything (a level, or unconstrained)."""
        return self.required is not None or self.preferred is not None or self.unconstrained


NO_REQUEST = PodSetTopology()


@dataclass(frozen=True, slots=True)
class KueueTopology:
    """A Topology: its levels' node labels, broadest first (e.g. zone, then hostname)."""

    name: str
    levels: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class KueueFlavor:
    """A ResourceFlavor: the Topology it names (`spec.topologyName`, None unset) and the node
    labels it selects."""

    name: str
    topology: str | None = None
    node_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    """One flavor's nominal quota and current reservation of one resource in a ClusterQueue
    (quantities as numbers: `nvidia.com/gpu` counts devices)."""

    flavor: str
    resource: str
    nominal: float
    reserved: float = 0.0

    @property
    def free(self) -> float:
        return self.nominal - self.reserved


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    """A ClusterQueue: its flavors in the order of its resource groups, their quotas."""

    name: str
    flavors: tuple[str, ...] = ()
    quotas: tuple[FlavorQuota, ...] = ()

    def quota(self, flavor: str, resource: str) -> FlavorQuota | None:
        return next((q for q in self.quotas if q.flavor == flavor and q.resource == resource), None)


@dataclass(frozen=True, slots=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str


@dataclass(frozen=True, slots=True)
class DomainAssignment:
    """A topology domain of a PodSet's assignment: the value at each level, and its pod count."""

    values: tuple[str, ...]
    count: int


@dataclass(frozen=True, slots=True)
class PodSetAssignment:
    """What an admission gave one PodSet: resource -> flavor, and its topology assignment
    (levels and domains; empty when not placed by TAS)."""

    name: str
    flavors: Mapping[str, str] = field(default_factory=dict)
    levels: tuple[str, ...] = ()
    domains: tuple[DomainAssignment, ...] = ()

    def values_at(self, level: str) -> frozenset[str]:
        """The values its domains take at the level (empty when the level is not assigned)."""
        if level not in self.levels:
            return frozenset()
        at = self.levels.index(level)
        return frozenset(d.values[at] for d in self.domains if at < len(d.values))


@dataclass(frozen=True, slots=True)
class KueueWorkload:
    """A Workload: its controller (the job: kind and name), queue, `spec.active`, whether it is admitted (the
    `Admitted` condition True), the ClusterQueue and PodSet assignments of its admission, the
    PodSets' names in order, their pod counts (`counts`) and the TAS request of each PodSet's
    template (`requests`, PodSets asking nothing left out): Kueue copies the job's own templates
    into its PodSets when it builds the Workload, before admission injects anything into the
    job's, so these are the job's own requests."""

    namespace: str
    name: str
    queue: str = ""
    active: bool = True
    admitted: bool = False
    cluster_queue: str | None = None
    assignments: tuple[PodSetAssignment, ...] = ()
    pod_sets: tuple[str, ...] = ()
    owner_kind: str | None = None
    owner_name: str | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    requests: Mapping[str, PodSetTopology] = field(default_factory=dict)

    def zones(self, zone_label: str) -> frozenset[str]:
        """The zones its admission's topology assignments place pods in."""
        out: set[str] = set()
        for a in self.assignments:
            out |= a.values_at(zone_label)
        return frozenset(out)


@dataclass(frozen=True)
class KueueObjects:
    """Every Kueue object of a cluster: Topologies, ResourceFlavors and ClusterQueues by name,
    LocalQueues and Workloads by (namespace, name)."""

    topologies: Mapping[str, KueueTopology] = field(default_factory=dict)
    flavors: Mapping[str, KueueFlavor] = field(default_factory=dict)
    cluster_queues: Mapping[str, ClusterQueue] = field(default_factory=dict)
    local_queues: Mapping[tuple[str, str], LocalQueue] = field(default_factory=dict)
    workloads: Mapping[tuple[str, str], KueueWorkload] = field(default_factory=dict)

    @property
    def installed(self) -> bool:
        """True when any Kueue object is known (Kueue runs, or its queues are configured)."""
        return bool(self.topologies or self.flavors or self.cluster_queues or self.local_queues
                    or self.workloads)  # fmt: skip

    def workload_of(self, kind: str, namespace: str, name: str) -> KueueWorkload | None:
        """The Workload whose controller is the job `kind namespace/name` (the newest name
        first when several are: Kueue keeps one per job)."""
        found = [w for (ns, _), w in self.workloads.items()
                 if ns == namespace and w.owner_kind == kind and w.owner_name == name]
        return max(found, key=lambda w: w.name) if found else None


NO_KUEUE = KueueObjects()


class KueueCause(StrEnum):
    """Why Kueue let a job it manages split across zones."""

    TAS_NOT_CONFIGURED = "tas_not_configured"  # no Topology with a zone level on its flavor
    NO_REQUEST = "no_topology_request"  # a PodSet asks TAS for nothing
    WIDER_THAN_ZONE = "wider_than_zone"  # a required level broader than the zone
    PREFERRED_ONLY = "preferred_only"  # only a preferred level: TAS may fall back wider
    UNGROUPED = "ungrouped_pod_sets"  # coordinator and workers in PodSets not grouped


@dataclass(frozen=True, slots=True)
class KueueAdvice:
    """What the diagnosis says of a split Kueue job: why (`cause`), through which LocalQueue,
    ClusterQueue, Workload and flavor, in words (`message`), and the Kueue configuration to add
    as YAML (`proposal`: the Topology and ResourceFlavor when TAS is not configured, else the
    pod-template annotations). `agent_fixable`: the change is the job's own annotations and
    TAS is configured, so zonemedic's Kueue fix can apply it on approval. `zones`: the zones
    where the co-located job's required flows are all allowed and its GPUs fit (where Kueue's
    zone-level placement must land for the fix to hold); `blocked`: why none is, if so."""

    cause: KueueCause
    queue: str
    message: str
    proposal: str
    cluster_queue: str | None = None
    workload: str | None = None
    flavor: str | None = None
    agent_fixable: bool = False
    zones: tuple[str, ...] = ()
    blocked: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": str(self.cause),
            "queue": self.queue,
            "cluster_queue": self.cluster_queue,
            "workload": self.workload,
            "flavor": self.flavor,
            "message": self.message,
            "proposal": self.proposal,
            "agent_fixable": self.agent_fixable,
            "zones": list(self.zones),
            "blocked": self.blocked,
        }


def group_name(job: str) -> str:
    """The `podset-group-name` zonemedic writes for a job: its name (Kueue refuses a number)."""
    return job if not job.isdigit() else f"job-{job}"


def wanted_annotations(
    job: str, pod_sets: Sequence[str], topology: Mapping[str, PodSetTopology], *,
    grouped: bool = True,
) -> dict[str, dict[str, str | None]]:  # fmt: skip
    """Per gang PodSet of the job, the Kueue annotations that keep it in one zone, set (a
    value) or removed (None): the zone as the required level, the group name when there are
    exactly two PodSets (Kueue groups two) unless `grouped` is False (two it cannot group), no
    preferred or unconstrained request (Kueue admits one topology annotation per template)."""
    grouped = grouped and len(pod_sets) == 2
    out: dict[str, dict[str, str | None]] = {}
    for replica in pod_sets:
        now = topology.get(replica, NO_REQUEST)
        wanted: dict[str, str | None] = {KUEUE.topology_annotation: ZONE_LEVEL}
        if grouped:
            wanted[KUEUE.group_annotation] = group_name(job)
        if now.preferred is not None:
            wanted[KUEUE.preferred_annotation] = None
        if now.unconstrained:
            wanted[KUEUE.unconstrained_annotation] = None
        out[replica] = wanted
    return out
