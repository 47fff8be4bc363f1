"""Turn the bytes of one or more snapshot files into a `Snapshot`: cluster state plus policies.

Called by the `diagnose` command (which reads the files). Each item is dispatched on (apiVersion
group, kind); unknown kinds are skipped and reported once each in `Snapshot.warnings`. A bad item
raises `SnapshotError` (or `PolicyError` for policies) as `FILE: item N (Kind ns/name): field:
problem`. Later files win over earlier ones for the same object. It reads no files itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.errors import PolicyError, SnapshotError
from agent.model.cluster import (
    ClusterState,
    ContainerPort,
    JobKind,
    Namespace,
    Node,
    OwnedObject,
    Pod,
    TrainingJobObject,
)
from agent.policy import Policy, parse_policy
from agent.snapshot.documents import iter_items
from agent.snapshot.manifests import (
    ManifestError,
    parse_namespace,
    parse_node,
    parse_owned_object,
    parse_pod,
    parse_training_job,
)

_KUBEFLOW_V1 = {k.value: k for k in JobKind if k is not JobKind.GROUP}
_POLICY_KINDS = {
    ("networking.k8s.io", "NetworkPolicy"),
    ("cilium.io", "CiliumNetworkPolicy"),
    ("cilium.io", "CiliumClusterwideNetworkPolicy"),
}
_OWNED_KINDS = {("apps", "Deployment"), ("apps", "ReplicaSet"), ("batch", "Job")}


@dataclass(frozen=True)
class Snapshot:
    """A parsed snapshot: cluster state, policies and warnings (one line per skipped kind)."""

    state: ClusterState
    policies: tuple[Policy, ...] = ()
    warnings: tuple[str, ...] = ()


def _describe(item: Mapping[str, Any]) -> str:
    kind = item.get("kind")
    meta = item.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return str(kind)
    ns = meta.get("namespace")
    return f"{kind} {ns}/{meta['name']}" if isinstance(ns, str) else f"{kind} {meta['name']}"


class _Builder:
    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.namespaces: dict[str, Namespace] = {}
        self.pods: dict[tuple[str, str], Pod] = {}
        self.jobs: dict[tuple[JobKind, str, str], TrainingJobObject] = {}
        self.owned: dict[tuple[str, str, str], OwnedObject] = {}
        self.policies: dict[str, Policy] = {}
        self.unknown: dict[str, int] = {}
        self.ports: dict[tuple[ContainerPort, ...], tuple[ContainerPort, ...]] = {}

    def add(self, item: dict[str, Any]) -> None:
        kind: str = item["kind"]
        api_version = item.get("apiVersion")
        if not isinstance(api_version, str):
            raise ManifestError("apiVersion", "missing or not a string")
        group, _, version = api_version.rpartition("/")
        if kind == "Pod" and api_version == "v1":
            pod = parse_pod(item, shared=self.ports)
            self.pods[(pod.namespace, pod.name)] = pod
        elif kind == "Node" and api_version == "v1":
            node = parse_node(item)
            self.nodes[node.name] = node
        elif kind == "Namespace" and api_version == "v1":
            ns = parse_namespace(item)
            self.namespaces[ns.name] = ns
        elif (group, kind) in _POLICY_KINDS:
            policy = parse_policy(item)
            self.policies[policy.id] = policy
        elif (
            group == "kubeflow.org"
            and kind in _KUBEFLOW_V1
            and (version == "v1" or (version == "v2beta1" and kind == "MPIJob"))
        ):
            job = parse_training_job(item, _KUBEFLOW_V1[kind])
            self.jobs[(job.kind, job.namespace, job.name)] = job
        elif (group, kind) in _OWNED_KINDS:
            obj = parse_owned_object(item, kind)
            self.owned[(kind, obj.namespace, obj.name)] = obj
        else:
            label = f"{api_version} {kind}"
            self.unknown[label] = self.unknown.get(label, 0) + 1

    def build(self) -> Snapshot:
        warnings = tuple(
            f"skipped {count} object(s) of unsupported kind {label}"
            for label, count in sorted(self.unknown.items())
        )
        state = ClusterState(
            nodes=self.nodes,
            namespaces=self.namespaces,
            pods=tuple(self.pods.values()),
            job_objects=self.jobs,
            owned_objects=self.owned,
        )
        return Snapshot(
            state=state,
            policies=tuple(self.policies.values()),
            warnings=warnings,
        )


def parse_snapshot(files: Iterable[tuple[str, bytes]]) -> Snapshot:
    """Parse (name, content) pairs, in order, into one `Snapshot`."""
    builder = _Builder()
    for source, data in files:
        for index, item in enumerate(iter_items(data, source=source)):
            try:
                builder.add(item)
            except ManifestError as exc:
                raise SnapshotError(f"{source}: item {index} ({_describe(item)}): {exc}") from None
            except PolicyError as exc:
                raise PolicyError(f"{source}: item {index}: {exc}") from None
    return builder.build()
