"""Re-diagnosing one job from the live API, for the remediation executor.

Who calls it: the composition root hands `ApiRediagnosis(api, settings.diagnosis)` to
`agent.remediation.remediator.Remediator` as its `diagnose` callable; tests and the benchmark do the
same. One call lists what the job's verdict depends on -- every node, the job's namespace (object,
pods, the training jobs and owner kinds of the workload table at each version they are served
as: Deployments/ReplicaSets/batch Jobs, CiliumNetworkPolicies, NetworkPolicies)
and the CiliumClusterwideNetworkPolicies -- parses the listed objects as they are with the snapshot
reader's per-object parsers (`parse_objects`) and runs the core's scoped diagnosis, whose result
names the job's pods (`Diagnosis.job`). It reads the API directly rather than the watch cache so
that a remediation judges what the server says now. Zone-mirroring labels in `auto` mode are
detected over the namespace's pods. For a generic group it also names the members that finished (pods matching the
group's selector and a role, Succeeded or Failed: workers that gave up), which the plan needs to
recreate a worker Job that failed. A kind the server does not serve (404) is skipped. The dataplane
is resolved as the agent's mirror resolves it: Cilium when the server serves the cilium.io policy
kinds or has `kube-system/cilium-config` (read for its `labels`; 403/404 mean none). What it does
not do: record anything, or write to the cluster.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from agent.diagnosis.diagnose import JobScope, diagnose_cluster
from agent.model.cluster import ClusterState
from agent.model.job import JobRef
from agent.model.workload import KUEUE_KINDS, OWNERS, WORKLOADS, JobKind
from agent.policy.dataplane import CILIUM_CONFIG, CILIUM_CONFIG_NAMESPACE
from agent.remediation.observe import Rediagnosis
from agent.settings import DiagnosisSettings, GroupSpec
from agent.snapshot.collection import parse_objects
from agent.sources.kubeapi import KubeApi, KubeApiError

_NAMESPACED = (
    ("v1", "pods", "Pod"),
    *((api_version, w.plural, w.kind.value) for w in WORKLOADS for api_version in w.api_versions),
    *((o.api_version, o.plural, o.kind) for o in OWNERS),
    ("cilium.io/v2", "ciliumnetworkpolicies", "CiliumNetworkPolicy"),
    ("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy"),
    *((f"{k.group}/{v}", k.plural, k.kind.value) for k in KUEUE_KINDS if k.namespaced
      for v in k.versions),
)
# Kueue's cluster-scoped kinds (ClusterQueues, ResourceFlavors, Topologies), at every version read
_KUEUE_CLUSTER = tuple((f"{k.group}/{v}", k.plural, k.kind.value) for k in KUEUE_KINDS
                       if not k.namespaced for v in k.versions)  # fmt: skip


def finished_members(
    state: ClusterState, groups: Sequence[GroupSpec], ref: JobRef
) -> tuple[str, ...]:
    """The names of a group's pods that finished: its selector and a role's labels match, the
    phase is Succeeded or Failed (none for a Kubeflow job)."""
    if ref.kind is not JobKind.GROUP:
        return ()
    spec = next((g for g in groups if g.name == ref.name
                 and g.namespace in (None, ref.namespace)), None)  # fmt: skip
    if spec is None:
        return ()

    def matches(labels: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in wanted.items())

    return tuple(sorted(
        p.name for p in state.pods
        if p.namespace == ref.namespace and not p.live and matches(p.labels, spec.selector)
        and (matches(p.labels, spec.coordinator) or matches(p.labels, spec.workers))
    ))  # fmt: skip


class ApiRediagnosis:
    """`diagnose(ref) -> Rediagnosis` over fresh API reads."""

    def __init__(self, api: KubeApi, settings: DiagnosisSettings, *, timeout: float = 10.0) -> None:
        self.api = api
        self.settings = settings
        self.timeout = timeout
        self._served: set[str] = set()

    def _items(self, api_version: str, path: str, kind: str) -> list[dict[str, Any]]:
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        try:
            body = self.api.json("GET", f"{base}/{path}", timeout=self.timeout)
        except KubeApiError as exc:
            if exc.status == 404:
                return []
            raise
        self._served.add(api_version)
        items: list[dict[str, Any]] = body.get("items") or []
        for item in items:
            item["apiVersion"], item["kind"] = api_version, kind
        return items

    def _namespace(self, name: str) -> list[dict[str, Any]]:
        try:
            obj: dict[str, Any] = self.api.json("GET", f"/api/v1/namespaces/{name}",
                                                timeout=self.timeout)  # fmt: skip
        except KubeApiError as exc:
            if exc.status == 404:
                return []
            raise
        obj["apiVersion"], obj["kind"] = "v1", "Namespace"
        return [obj]

    def _cilium_config(self) -> dict[str, str] | None:
        path = f"/api/v1/namespaces/{CILIUM_CONFIG_NAMESPACE}/configmaps/{CILIUM_CONFIG}"
        try:
            obj = self.api.json("GET", path, timeout=self.timeout)
        except KubeApiError as exc:
            if exc.status in (403, 404):
                return None
            raise
        data = obj.get("data") or {}
        return {str(k): v for k, v in data.items() if isinstance(v, str)}

    def __call__(self, ref: JobRef) -> Rediagnosis:
        ns = ref.namespace
        self._served = set()
        items = self._items("v1", "nodes", "Node")
        items += self._namespace(ns)
        for api_version, plural, kind in _NAMESPACED:
            items += self._items(api_version, f"namespaces/{ns}/{plural}", kind)
        items += self._items("cilium.io/v2", "ciliumclusterwidenetworkpolicies",
                             "CiliumClusterwideNetworkPolicy")  # fmt: skip
        for api_version, plural, kind in _KUEUE_CLUSTER:
            items += self._items(api_version, plural, kind)
        snapshot = parse_objects(items, source="api")
        served = tuple(f"API group {v}" for v in sorted(self._served) if v.startswith("cilium.io"))
        snapshot = dataclasses.replace(snapshot, evidence=dataclasses.replace(
            snapshot.evidence, cilium=served + snapshot.evidence.cilium,
            cilium_config=self._cilium_config(),
        ))  # fmt: skip
        state = snapshot.state
        diagnosis = diagnose_cluster(
            state, snapshot.policy_set(self.settings), settings=self.settings,
            only=JobScope(jobs=frozenset({ref})),
        )  # fmt: skip
        finding = next((f for f in diagnosis.findings if f.job == ref), None)
        job = diagnosis.job(ref)
        pods = tuple(p.name for p in job.pods) if job is not None else ()
        return Rediagnosis(finding=finding, mirror_keys=diagnosis.mirror_keys, pods=pods,
                           finished=finished_members(state, self.settings.groups, ref),
                           kueue=state.kueue)  # fmt: skip
