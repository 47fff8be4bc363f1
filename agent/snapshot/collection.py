"""Turn the bytes of one or more snapshot files into a `Snapshot`: cluster state plus policies.

Called by the `diagnose` command (which reads the files: `parse_snapshot`) and the remediation's
re-diagnosis (the API's objects, already decoded: `parse_objects`). Each
item is dispatched on (apiVersion group, kind): training jobs and a generic group's owners as the
workload table (`agent.model.workload`) names them, at a version their kind is served as (a
TrainJob and the JobSet it owns both: the JobSet holds its templates); Trainer training runtimes
are skipped silently (nothing the diagnosis reads is there); Kueue's Topologies, ResourceFlavors,
ClusterQueues, LocalQueues and Workloads are read into `ClusterState.kueue`; other unknown kinds are skipped and
reported once each in `Snapshot.warnings`. A bad item raises
`SnapshotError` as `FILE: item N (Kind ns/name): field: problem`, except a network policy: one
that cannot be read is kept as an `UnreadablePolicy` and named in a warning (the diagnosis marks
the jobs it may select as uncertain), so one bad policy never stops the diagnosis of the others.
What shows the dataplane is collected as `DataplaneEvidence`: any cilium.io object, a
CustomResourceDefinition of the cilium.io group, the `cilium-config` ConfigMap (its `data`;
consumed, not reported as skipped) and the image of the `cilium` DaemonSet. Later files win over
earlier ones for the same object. It reads no files itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.errors import SnapshotError
from agent.model.cluster import (
    ClusterState,
    Namespace,
    Node,
    OwnedObject,
    Pod,
    TrainingJobObject,
)
from agent.model.workload import (
    OWNERS,
    TRAINING_RUNTIMES,
    JobKind,
    kueue_kind_served,
    workload_served,
)
from agent.policy import Policy, PolicySet
from agent.policy.dataplane import (
    CILIUM_CONFIG,
    CILIUM_CONFIG_NAMESPACE,
    DataplaneEvidence,
    cilium_evidence,
    dataplane_for,
)
from agent.policy.reading import read_policy, unreadable_warning
from agent.policy.rule import UnreadablePolicy
from agent.settings import DiagnosisSettings
from agent.snapshot.documents import iter_items
from agent.snapshot.kueue import KueueObject, kueue_objects, parse_kueue_object
from agent.snapshot.manifests import (
    ManifestError,
    PodParts,
    parse_namespace,
    parse_node,
    parse_owned_object,
    parse_pod,
    parse_training_job,
)

_POLICY_KINDS = {
    ("networking.k8s.io", "NetworkPolicy"),
    ("cilium.io", "CiliumNetworkPolicy"),
    ("cilium.io", "CiliumClusterwideNetworkPolicy"),
}
_OWNED_KINDS = {(o.group, o.kind) for o in OWNERS}


@dataclass(frozen=True)
class Snapshot:
    """A parsed snapshot: cluster state, policies (and those that could not be read), what shows
    the dataplane, and warnings (one line per skipped kind, one per unreadable policy)."""

    state: ClusterState
    policies: tuple[Policy, ...] = ()
    warnings: tuple[str, ...] = ()
    unreadable: tuple[UnreadablePolicy, ...] = ()
    evidence: DataplaneEvidence = field(default_factory=DataplaneEvidence)

    def policy_set(self, settings: DiagnosisSettings) -> PolicySet:
        """The snapshot's policies under the dataplane its evidence and `settings` decide."""
        return PolicySet(
            self.policies, dataplane=dataplane_for(self.evidence, settings),
            unreadable=self.unreadable,
        )  # fmt: skip


def _describe(item: Mapping[str, Any]) -> str:
    kind = item.get("kind")
    meta = item.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return str(kind)
    ns = meta.get("namespace")
    return f"{kind} {ns}/{meta['name']}" if isinstance(ns, str) else f"{kind} {meta['name']}"


def _name(item: Mapping[str, Any]) -> str:
    meta = item.get("metadata")
    if not isinstance(meta, dict):
        return "?"
    ns, name = meta.get("namespace"), meta.get("name")
    return f"{ns}/{name}" if isinstance(ns, str) and ns else str(name)


def _named(item: Mapping[str, Any], name: str) -> bool:
    meta = item.get("metadata")
    return isinstance(meta, dict) and meta.get("name") == name


class _Builder:
    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.namespaces: dict[str, Namespace] = {}
        self.pods: dict[tuple[str, str], Pod] = {}
        self.jobs: dict[tuple[JobKind, str, str], TrainingJobObject] = {}
        self.owned: dict[tuple[str, str, str], OwnedObject] = {}
        self.kueue: list[KueueObject] = []
        self.policies: dict[str, Policy | UnreadablePolicy] = {}
        self.cilium: list[str] = []
        self.cilium_config: tuple[bool, dict[str, str]] | None = None  # (in kube-system, data)
        self.cilium_image: str | None = None
        self.unknown: dict[str, int] = {}
        # containers and owner references the YAML reader shares between pods parsed once
        self.parts = PodParts(capacity=4096)

    def add(self, item: dict[str, Any]) -> None:
        kind: str = item["kind"]
        api_version = item.get("apiVersion")
        if not isinstance(api_version, str):
            raise ManifestError("apiVersion", "missing or not a string")
        group, _, version = api_version.rpartition("/")
        if kind == "Pod" and api_version == "v1":
            pod = parse_pod(item, parts=self.parts)
            self.pods[(pod.namespace, pod.name)] = pod
        elif kind == "Node" and api_version == "v1":
            node = parse_node(item)
            self.nodes[node.name] = node
        elif kind == "Namespace" and api_version == "v1":
            ns = parse_namespace(item)
            self.namespaces[ns.name] = ns
        elif (group, kind) in _POLICY_KINDS:
            policy = read_policy(item)
            self.policies.pop(policy.id, None)
            self.policies[policy.id] = policy
            if group == "cilium.io":
                self.cilium.append(f"{kind} {_name(item)}")
        elif kind == "ConfigMap" and api_version == "v1" and _named(item, CILIUM_CONFIG):
            self._cilium_config(item)
        elif (training := workload_served(group, version, kind)) is not None:
            job = parse_training_job(item, training.kind)
            self.jobs[(job.kind, job.namespace, job.name)] = job
        elif (group, kind) in _OWNED_KINDS:
            obj = parse_owned_object(item, kind)
            self.owned[(kind, obj.namespace, obj.name)] = obj
        elif (queued := kueue_kind_served(group, version, kind)) is not None:
            self.kueue.append(parse_kueue_object(item, queued.kind))
        elif (group, kind) in TRAINING_RUNTIMES:
            pass  # a TrainJob's templates are read on its JobSet, not on its runtime
        else:
            self._evidence(item, group=group, kind=kind)
            label = f"{api_version} {kind}"
            self.unknown[label] = self.unknown.get(label, 0) + 1

    def _cilium_config(self, item: dict[str, Any]) -> None:
        meta = item.get("metadata") or {}
        in_home = meta.get("namespace") == CILIUM_CONFIG_NAMESPACE
        if self.cilium_config is not None and self.cilium_config[0] and not in_home:
            return  # kube-system's copy wins
        data = item.get("data")
        if data is not None and not isinstance(data, dict):
            raise ManifestError("data", f"expected a mapping, got {type(data).__name__}")
        self.cilium_config = (in_home, {str(k): v for k, v in (data or {}).items()
                                        if isinstance(v, str)})  # fmt: skip

    def _evidence(self, item: dict[str, Any], *, group: str, kind: str) -> None:
        """Note what an object of a kind the diagnosis does not read says about the dataplane."""
        if group == "cilium.io":
            self.cilium.append(f"{kind} {_name(item)}")
        elif kind == "CustomResourceDefinition" and _name(item).endswith(".cilium.io"):
            self.cilium.append(f"CRD {_name(item)}")
        elif kind == "DaemonSet" and group == "apps" and _named(item, "cilium"):
            self.cilium.append(f"DaemonSet {_name(item)}")
            spec = ((item.get("spec") or {}).get("template") or {}).get("spec") or {}
            for container in spec.get("containers") or []:
                image = container.get("image") if isinstance(container, dict) else None
                if isinstance(image, str) and "cilium" in image:
                    self.cilium_image = image
                    break

    def build(self) -> Snapshot:
        warnings = tuple(
            f"skipped {count} object(s) of unsupported kind {label}"
            for label, count in sorted(self.unknown.items())
        )
        read = [p for p in self.policies.values() if isinstance(p, Policy)]
        lost = [p for p in self.policies.values() if isinstance(p, UnreadablePolicy)]
        warnings += tuple(unreadable_warning(u) for u in lost)
        state = ClusterState(
            nodes=self.nodes,
            namespaces=self.namespaces,
            pods=tuple(self.pods.values()),
            job_objects=self.jobs,
            owned_objects=self.owned,
            kueue=kueue_objects(self.kueue),
        )
        config = self.cilium_config
        return Snapshot(
            state=state,
            policies=tuple(read),
            warnings=warnings,
            unreadable=tuple(lost),
            evidence=DataplaneEvidence(
                cilium=cilium_evidence(self.cilium),
                cilium_config=config[1] if config is not None else None,
                cilium_image=self.cilium_image,
            ),
        )


def _add_all(builder: _Builder, items: Iterable[dict[str, Any]], *, source: str) -> None:
    for index, item in enumerate(items):
        try:
            builder.add(item)
        except ManifestError as exc:
            raise SnapshotError(f"{source}: item {index} ({_describe(item)}): {exc}") from None


def parse_snapshot(files: Iterable[tuple[str, bytes]]) -> Snapshot:
    """Parse (name, content) pairs, in order, into one `Snapshot`."""
    builder = _Builder()
    for source, data in files:
        _add_all(builder, iter_items(data, source=source), source=source)
    return builder.build()


def parse_objects(items: Iterable[dict[str, Any]], *, source: str) -> Snapshot:
    """Parse Kubernetes objects already decoded (each with its `apiVersion` and `kind`, as the
    API's list items are once those are set), in order, into one `Snapshot`: the same per-object
    dispatch as `parse_snapshot`, without a file to decode. `source` names them in errors."""
    builder = _Builder()
    _add_all(builder, items, source=source)
    return builder.build()
