"""Cluster-wide facts a scoped diagnosis needs, kept up to date pod by pod.

A scoped diagnosis (one job) still depends on the whole cluster in three ways: which pod label
keys mirror the node zone (`auto` detection looks at every scheduled pod), how many GPUs the live
pods use on each node (free capacity per zone), and which pods live in the job's namespace.
Computing them from every pod costs hundreds of milliseconds at 150,000 pods. `FactsIndex` keeps
them as counters that a caller updates with `add(key, pod)` / `remove(key)` as pods change
(`agent.runtime.mirror` does, from the watch cache; `add_many` counts a bulk load at once: the
(label, value) pairs of the pods scheduled in each zone in one C-level count per zone); `facts()` returns a `ClusterFacts` snapshot
equal to what `cluster_facts` computes from scratch (a test holds them equal). Node zones are
fixed for the life of an index: when a node's labels change, build a new one. Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, ItemsView, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from agent.model.cluster import ZONE_LABEL, Node, Pod


@dataclass(frozen=True)
class ClusterFacts:
    """`mirror_keys`: label keys that mirror the node zone (the `auto` detection of
    `agent.topology.zones`: zone values only, agreeing on most pods, >= 2 distinct values); `gpu_used`: GPUs requested by live pods
    bound to each node; `pods_in`: the pods of each namespace, in cluster order; `zones`: every
    zone a node names, sorted; `node_zone`: each node's zone; `zone_free`: free GPUs per zone
    (as `CapacityIndex` counts them)."""

    mirror_keys: tuple[str, ...] = ()
    gpu_used: Mapping[str, int] = field(default_factory=dict)
    pods_in: Mapping[str, tuple[Pod, ...]] = field(default_factory=dict)
    zones: tuple[str, ...] = ()
    node_zone: Mapping[str, str | None] = field(default_factory=dict)
    zone_free: Mapping[str, int] = field(default_factory=dict)


class FactsIndex:
    """Counters behind `ClusterFacts`, for pods keyed by any hashable key (not thread-safe)."""

    def __init__(self, nodes: Mapping[str, Node]) -> None:
        self._nodes = dict(nodes)
        self._node_zone = {name: n.zone for name, n in nodes.items()}
        self._zones = tuple(sorted({z for z in self._node_zone.values() if z is not None}))
        self._zone_free: dict[str, int] = dict.fromkeys(self._zones, 0)
        for node in nodes.values():
            if node.zone is not None and not node.unschedulable:
                self._zone_free[node.zone] += node.gpu_allocatable
        self._pods: dict[Hashable, Pod] = {}
        self._by_namespace: dict[str, dict[Hashable, Pod]] = {}
        self._namespace_tuples: dict[str, tuple[Pod, ...]] = {}
        self._gpu_used: dict[str, int] = {}
        self._zone_set = frozenset(self._zones)
        self._foreign: dict[str, int] = {}  # key -> scheduled pods whose value is no zone
        self._lies: dict[str, int] = {}  # key -> scheduled pods whose value is another zone
        self._agree: dict[str, int] = {}  # key -> scheduled pods whose value is their zone
        self._values: dict[str, dict[str, int]] = {}  # key -> {zone value: pods}
        self._mirror_keys: tuple[str, ...] | None = None

    def _zone(self, pod: Pod) -> str | None:
        return self._node_zone.get(pod.node_name) if pod.node_name is not None else None

    def _count(self, pod: Pod, step: int) -> None:
        if pod.gpu_request and pod.node_name is not None and pod.live:
            before = self._gpu_used.get(pod.node_name, 0)
            used = before + step * pod.gpu_request
            if used:
                self._gpu_used[pod.node_name] = used
            else:
                self._gpu_used.pop(pod.node_name, None)
            node = self._nodes.get(pod.node_name)
            if node is not None and node.zone is not None and not node.unschedulable:
                alloc = node.gpu_allocatable
                self._zone_free[node.zone] += max(0, alloc - used) - max(0, alloc - before)
        zone = self._zone(pod)
        if zone is None:
            return
        self._mirror_keys = None
        for key, value in pod.labels.items():
            if key == ZONE_LABEL:
                continue
            if value not in self._zone_set:
                self._foreign[key] = self._foreign.get(key, 0) + step
                continue
            counts = self._agree if value == zone else self._lies
            counts[key] = counts.get(key, 0) + step
            values = self._values.setdefault(key, {})
            count = values.get(value, 0) + step
            if count:
                values[value] = count
            else:
                del values[value]

    def add(self, key: Hashable, pod: Pod) -> None:
        """Add a pod, or replace the pod of the same key."""
        old = self._pods.get(key)
        if old is not None:
            self._count(old, -1)
            if old.namespace != pod.namespace:
                self._drop_from_namespace(key, old.namespace)
        self._pods[key] = pod
        self._count(pod, 1)
        self._by_namespace.setdefault(pod.namespace, {})[key] = pod
        self._namespace_tuples.pop(pod.namespace, None)

    def add_many(self, pods: Mapping[Any, Pod]) -> None:
        """Add `pods` (key -> pod) at once: the same counters as `add` for each, counted in bulk
        when the index holds no pod yet (a mirror's bulk load), one by one otherwise."""
        if self._pods:
            for key, pod in pods.items():
                self.add(key, pod)
            return
        node_zone, gpu_used, by_namespace = self._node_zone, self._gpu_used, self._by_namespace
        # each scheduled pod's labels, by its node's zone, counted (key, value) per zone below
        labelled: dict[str, list[ItemsView[str, str]]] = {zone: [] for zone in self._zones}
        for key, pod in pods.items():
            node = pod.node_name
            if node is not None:
                if pod.gpu_request and pod.live:
                    gpu_used[node] = gpu_used.get(node, 0) + pod.gpu_request
                zone = node_zone.get(node)
                if zone is not None:
                    labelled[zone].append(pod.labels.items())
            members = by_namespace.get(pod.namespace)
            if members is None:
                by_namespace[pod.namespace] = members = {}
            members[key] = pod
        seen = {zone: Counter(chain.from_iterable(labels))
                for zone, labels in labelled.items()}  # fmt: skip
        self._pods.update(pods)
        self._namespace_tuples.clear()
        for name, used in list(gpu_used.items()):
            if not used:
                del gpu_used[name]
                continue
            node_obj = self._nodes.get(name)
            if node_obj is not None and node_obj.zone is not None and not node_obj.unschedulable:
                alloc = node_obj.gpu_allocatable
                self._zone_free[node_obj.zone] += max(0, alloc - used) - alloc
        self._mirror_keys = None
        for (label, value), zone, count in (
            (pair, zone, n) for zone, counts in seen.items() for pair, n in counts.items()
        ):
            if label == ZONE_LABEL:
                continue
            if value not in self._zone_set:
                self._foreign[label] = self._foreign.get(label, 0) + count
                continue
            counts = self._agree if value == zone else self._lies
            counts[label] = counts.get(label, 0) + count
            values = self._values.setdefault(label, {})
            values[value] = values.get(value, 0) + count

    def remove(self, key: Hashable) -> None:
        old = self._pods.pop(key, None)
        if old is None:
            return
        self._count(old, -1)
        self._drop_from_namespace(key, old.namespace)

    def _drop_from_namespace(self, key: Hashable, namespace: str) -> None:
        members = self._by_namespace.get(namespace)
        if members is not None:
            members.pop(key, None)
            if not members:
                del self._by_namespace[namespace]
        self._namespace_tuples.pop(namespace, None)

    def mirror_keys(self) -> tuple[str, ...]:
        if self._mirror_keys is None:
            self._mirror_keys = tuple(
                sorted(
                    key
                    for key, values in self._values.items()
                    if len(values) >= 2
                    and not self._foreign.get(key)
                    and self._agree.get(key, 0) > self._lies.get(key, 0)
                )
            )
        return self._mirror_keys

    def facts(self) -> ClusterFacts:
        for namespace, members in self._by_namespace.items():
            if namespace not in self._namespace_tuples:
                self._namespace_tuples[namespace] = tuple(members.values())
        return ClusterFacts(
            mirror_keys=self.mirror_keys(),
            gpu_used=dict(self._gpu_used),
            pods_in=dict(self._namespace_tuples),
            zones=self._zones,
            node_zone=self._node_zone,
            zone_free=dict(self._zone_free),
        )


def cluster_facts(nodes: Mapping[str, Node], pods: Iterable[Pod]) -> ClusterFacts:
    """The facts of a whole cluster, computed from scratch."""
    index = FactsIndex(nodes)
    for i, pod in enumerate(pods):
        index.add(i, pod)
    return index.facts()
