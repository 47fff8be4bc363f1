"""The scheduler's view of the cluster for one scheduling cycle: nodes, bound pods, namespaces.

Built by `scheduler.Scheduler` from its watch-fed cache (and by tests from small tables); read by
`scheduler_filters`, `scheduler_scores` and `scheduler_cycle`. Pure data plus lookups; it does not
decide anything. Terminal pods (Succeeded/Failed) are left out, as kube-scheduler's informer does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.twin.scheduler_resources import node_allocatable, pod_requests

Obj = Mapping[str, Any]
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def name_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def namespace_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "default")


@dataclass
class Snapshot:
    """Nodes in a stable order, pods bound to each node, and namespace labels."""

    nodes: list[Obj]
    pods_by_node: dict[str, list[Obj]] = field(default_factory=dict)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    _requested: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)
    _allocatable: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        nodes: Iterable[Obj],
        pods: Iterable[Obj],
        namespaces: Iterable[Obj] = (),
    ) -> Snapshot:
        ordered = sorted(nodes, key=name_of)
        by_node: dict[str, list[Obj]] = {name_of(n): [] for n in ordered}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            phase = (pod.get("status") or {}).get("phase")
            if node and phase not in TERMINAL_PHASES:
                by_node.setdefault(str(node), []).append(pod)
        labels = {
            name_of(ns): dict((ns.get("metadata") or {}).get("labels") or {}) for ns in namespaces
        }
        return cls(nodes=ordered, pods_by_node=by_node, namespace_labels=labels)

    def pods_on(self, node_name: str) -> list[Obj]:
        return self.pods_by_node.get(node_name, [])

    def all_pods(self) -> Iterable[tuple[Obj, Obj]]:
        """(node, pod) for every bound pod on a known node."""
        for node in self.nodes:
            for pod in self.pods_on(name_of(node)):
                yield node, pod

    def allocatable(self, node: Obj) -> dict[str, int]:
        name = name_of(node)
        cached = self._allocatable.get(name)
        if cached is None:
            cached = self._allocatable[name] = node_allocatable(node)
        return cached

    def requested(self, node_name: str) -> dict[str, int]:
        cached = self._requested.get(node_name)
        if cached is not None:
            return cached
        used: dict[str, int] = {}
        for pod in self.pods_on(node_name):
            for res, amount in pod_requests(pod).items():
                used[res] = used.get(res, 0) + amount
        self._requested[node_name] = used
        return used

    def assume(self, pod: Obj, node_name: str) -> None:
        """Count `pod` on `node_name` before the binding comes back through the watch."""
        self.pods_by_node.setdefault(node_name, []).append(pod)
        self._requested.pop(node_name, None)
