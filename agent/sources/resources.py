"""The resources the agent watches (a table: adding a kind is one row) and their discovery.

Called by `agent.sources.kube` to decide which list+watch loops to start: core kinds always; Cilium
policies, training-job kinds, batch/apps owners, Kueue's kinds only when the server serves them (discovered
through `/apis/{group}/{version}`). The training-job and owner rows are those of the workload table
(`agent.model.workload`): one row per version a kind is served as, preferred versions first; a kind
is watched at one version only, the first the server serves (kubeflow.org/v2beta1 `mpijobs`,
mpi-operator's, only when kubeflow.org/v1 does not serve `mpijobs`); Kueue's rows are the
Kueue table's (`KUEUE_KINDS`), one version each the same way (a v0.13 Topology at v1alpha1). One ConfigMap is watched by name,
`kube-system/cilium-config` (its `labels` key is Cilium's identity label filter): a row may fix its
namespace and a field selector, and a `best_effort` row whose list is forbidden or not found counts
as synced and empty (an agent without the RBAC for it still runs, with Cilium's default filter).
Cilium's PacketDrop Events (`PACKET_DROP_EVENTS`) are not in the table: they feed the drop event
reader, not the cache, and only when `kubernetes.packet_drop_events`. Pure table + `select_served`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from agent.model.descriptor import OwnerKind
from agent.model.workload import KUEUE_KINDS, OWNERS, WORKLOADS, JobKind, KueueKind, WorkloadKind


class Role(StrEnum):
    """What the cache does with objects of a resource."""

    POD = "pod"
    NODE = "node"
    NAMESPACE = "namespace"
    POLICY = "policy"
    JOB = "job"  # training job objects (a kind of the workload table)
    OWNER = "owner"  # a generic group's owner kinds (batch Jobs, ...): ownership chains only
    DATAPLANE = "dataplane"  # the cilium-config ConfigMap: how identities are built
    EVENT = "event"  # core/v1 Events read as hints (Cilium's PacketDrop), never cached
    KUEUE = "kueue"  # Kueue's queues, flavors, topologies and Workloads (a kind of KUEUE_KINDS)


@dataclass(frozen=True)
class Resource:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    role: Role
    optional: bool = True
    namespace: str | None = None  # watch one namespace only (namespace filters do not apply)
    field_selector: str | None = None
    best_effort: bool = False  # a 403/404 list counts as synced and empty
    workload: WorkloadKind | None = None  # a JOB row: its kind's descriptor
    owner: OwnerKind | None = None  # an OWNER row: its kind's descriptor
    kueue: KueueKind | None = None  # a KUEUE row: its kind's descriptor

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __post_init__(self) -> None:
        if (self.role is Role.JOB) != (self.workload is not None):
            raise ValueError(f"resource {self.plural}: a JOB row, and only one, names its workload")
        if (self.role is Role.OWNER) != (self.owner is not None):
            raise ValueError(f"resource {self.plural}: an OWNER row, and only one, names its owner")
        if (self.role is Role.KUEUE) != (self.kueue is not None):
            raise ValueError(f"resource {self.plural}: a KUEUE row, and only one, names its kind")

    @property
    def job_kind(self) -> JobKind | None:
        """The training kind of a JOB row (None for any other row)."""
        return self.workload.kind if self.workload is not None else None

    @property
    def name(self) -> str:
        """A unique name: `pods`, `mpijobs.v2beta1.kubeflow.org`, `configmaps.cilium-config`."""
        base = self.plural if not self.group else resource_name(self.group, self.version, self.plural)
        return base if self.role is not Role.DATAPLANE else f"{base}.cilium-config"

    def list_path(self) -> str:
        base = "/api/v1" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespace is not None:
            base = f"{base}/namespaces/{self.namespace}"
        return f"{base}/{self.plural}"

    def query(self) -> list[tuple[str, str]]:
        """Query parameters every list and watch of this resource carries."""
        return [("fieldSelector", self.field_selector)] if self.field_selector else []


def resource_name(group: str, version: str, plural: str) -> str:
    """The unique name of a resource of an API group (see `Resource.name`)."""
    return f"{plural}.{version}.{group}"


def _workload_rows() -> tuple[Resource, ...]:
    """A JOB row per version of each workload kind: every kind's first version, then the
    second ones, ... (so `group_versions` discovers preferred versions first)."""
    depth = max(len(w.versions) for w in WORKLOADS)
    return tuple(
        Resource(w.kind.value, w.group, w.versions[i], w.plural, True, Role.JOB, workload=w)
        for i in range(depth) for w in WORKLOADS if i < len(w.versions)
    )  # fmt: skip


def _kueue_rows() -> tuple[Resource, ...]:
    """A KUEUE row per version of each Kueue kind, preferred versions first."""
    depth = max(len(k.versions) for k in KUEUE_KINDS)
    return tuple(
        Resource(k.kind.value, k.group, k.versions[i], k.plural, k.namespaced, Role.KUEUE, kueue=k)
        for i in range(depth) for k in KUEUE_KINDS if i < len(k.versions)
    )  # fmt: skip


RESOURCES: tuple[Resource, ...] = (
    Resource("Pod", "", "v1", "pods", True, Role.POD, optional=False),
    Resource("Node", "", "v1", "nodes", False, Role.NODE, optional=False),
    Resource("Namespace", "", "v1", "namespaces", False, Role.NAMESPACE, optional=False),
    Resource(
        "ConfigMap",
        "",
        "v1",
        "configmaps",
        True,
        Role.DATAPLANE,
        namespace="kube-system",
        field_selector="metadata.name=cilium-config",
        best_effort=True,
    ),
    Resource("NetworkPolicy", "networking.k8s.io", "v1", "networkpolicies", True, Role.POLICY),
    Resource("CiliumNetworkPolicy", "cilium.io", "v2", "ciliumnetworkpolicies", True, Role.POLICY),
    Resource(
        "CiliumClusterwideNetworkPolicy",
        "cilium.io",
        "v2",
        "ciliumclusterwidenetworkpolicies",
        False,
        Role.POLICY,
    ),
    *_workload_rows(),
    *(Resource(o.kind, o.group, o.version, o.plural, True, Role.OWNER, owner=o) for o in OWNERS),
    *_kueue_rows(),
)


_JOB_RESOURCE_NAMES: dict[JobKind, tuple[str, ...]] = {
    w.kind: tuple(r.name for r in RESOURCES if r.workload is w) for w in WORKLOADS
}


def job_resource_names(kind: JobKind) -> tuple[str, ...]:
    """The resource names a training kind's objects are cached under, preferred version first
    (none for `Group`)."""
    return _JOB_RESOURCE_NAMES.get(kind, ())


# Cilium's drop event emitter: Warning Events `PacketDrop` from component `cilium`, selected by the
# server (kube-apiserver selects Events by `reason` and `source`, the source's component).
PACKET_DROP_EVENTS = Resource(
    "Event", "", "v1", "events", True, Role.EVENT, field_selector="reason=PacketDrop,source=cilium"
)


def group_versions(resources: tuple[Resource, ...] = RESOURCES) -> list[tuple[str, str]]:
    """The (group, version) pairs to discover (core v1 excluded: always served)."""
    seen: list[tuple[str, str]] = []
    for r in resources:
        if r.group and (r.group, r.version) not in seen:
            seen.append((r.group, r.version))
    return seen


def select_served(
    served: Mapping[tuple[str, str], set[str]],
    resources: tuple[Resource, ...] = RESOURCES,
) -> list[Resource]:
    """Resources to watch, given the plurals each (group, version) serves (absent = not served)."""
    chosen: list[Resource] = []
    for r in resources:
        if not r.group:
            chosen.append(r)
            continue
        if r.plural not in served.get((r.group, r.version), set()):
            continue
        versions = (r.workload.versions if r.workload is not None
                    else r.kueue.versions if r.kueue is not None else None)  # fmt: skip
        if versions is not None:
            earlier = versions[: versions.index(r.version)]
            if any(r.plural in served.get((r.group, v), set()) for v in earlier):
                continue  # one version per kind: the preferred one when several are served
        chosen.append(r)
    return chosen
