"""The resources the agent watches (a table: adding a kind is one row) and their discovery.

Called by `agent.sources.kube` to decide which list+watch loops to start: core kinds always; Cilium
policies, Kubeflow kinds, batch/apps owners only when the server serves them (discovered through
`/apis/{group}/{version}`). kubeflow.org/v2beta1 `mpijobs` (mpi-operator) is watched only when
kubeflow.org/v1 does not serve `mpijobs` (a cluster serves one). One ConfigMap is watched by name,
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


class Role(StrEnum):
    """What the cache does with objects of a resource."""

    POD = "pod"
    NODE = "node"
    NAMESPACE = "namespace"
    POLICY = "policy"
    JOB = "job"  # Kubeflow training job objects
    OWNER = "owner"  # batch Jobs, ReplicaSets, Deployments: ownership chains only
    DATAPLANE = "dataplane"  # the cilium-config ConfigMap: how identities are built
    EVENT = "event"  # core/v1 Events read as hints (Cilium's PacketDrop), never cached


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

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def name(self) -> str:
        """A unique name: `pods`, `mpijobs.v2beta1.kubeflow.org`, `configmaps.cilium-config`."""
        base = self.plural if not self.group else f"{self.plural}.{self.version}.{self.group}"
        return base if self.role is not Role.DATAPLANE else f"{base}.cilium-config"

    def list_path(self) -> str:
        base = "/api/v1" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespace is not None:
            base = f"{base}/namespaces/{self.namespace}"
        return f"{base}/{self.plural}"

    def query(self) -> list[tuple[str, str]]:
        """Query parameters every list and watch of this resource carries."""
        return [("fieldSelector", self.field_selector)] if self.field_selector else []


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
    Resource("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs", True, Role.JOB),
    Resource("TFJob", "kubeflow.org", "v1", "tfjobs", True, Role.JOB),
    Resource("MPIJob", "kubeflow.org", "v1", "mpijobs", True, Role.JOB),
    Resource("XGBoostJob", "kubeflow.org", "v1", "xgboostjobs", True, Role.JOB),
    Resource("PaddleJob", "kubeflow.org", "v1", "paddlejobs", True, Role.JOB),
    Resource("JAXJob", "kubeflow.org", "v1", "jaxjobs", True, Role.JOB),
    Resource("MPIJob", "kubeflow.org", "v2beta1", "mpijobs", True, Role.JOB),
    Resource("Job", "batch", "v1", "jobs", True, Role.OWNER),
    Resource("ReplicaSet", "apps", "v1", "replicasets", True, Role.OWNER),
    Resource("Deployment", "apps", "v1", "deployments", True, Role.OWNER),
)


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
        if (
            r.group == "kubeflow.org"
            and r.version == "v2beta1"
            and r.plural in served.get(("kubeflow.org", "v1"), set())
        ):
            continue  # one MPIJob flavour per cluster: v1 wins when both are served
        chosen.append(r)
    return chosen
