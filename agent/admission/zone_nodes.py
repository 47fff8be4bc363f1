"""The nodes of a zone the admission decision hands the remediation planner, kept across requests.

Who calls it: `agent.admission.decision` (its `Decider` holds one `ZoneNodes`), for every zone
the planner is asked about. Pure: the view's nodes, their zones and their GPU use in, the nodes
as the planner reads them (`agent.admission.documents.node_dict`) out; no clock, no I/O.

Which nodes: of each node shape of the zone (nodes alike in taints, cordon and the values of the
label keys the job's templates' placement reads: `keys`; the hostname is not read), the `pods`
with the most free GPUs (ties: the first in the cluster's order), in the cluster's node order;
every node of the zone when `keys` is None (a term names nodes by field). A gang never needs
more than its pod count of one shape, so a zone of 800 nodes costs what its shapes cost.

Kept: the shapes while the view holds the same node objects (fingerprinted once per node map:
a view's maps are not changed); each shape's ranking by free GPUs while the GPU use per node is
equal too (a refreshed view of an unchanged cluster keeps it); each node's planner form while
its node object is the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.admission.documents import node_dict
from agent.model.cluster import Node

Keys = frozenset[str] | None


class ZoneNodes:
    """The zones' nodes by shape, ranked by free GPUs (see the module docstring)."""

    def __init__(self) -> None:
        self._node_dicts: dict[int, tuple[Node, dict[str, Any]]] = {}
        self._nodes_seen: tuple[int, ...] = ()
        self._nodes_map: object = None  # the node map last fingerprinted (a view's are not changed)
        self._used_map: object = None  # the GPU-use map last compared
        self._shape_cache: dict[tuple[str, Keys], list[list[tuple[int, str, Node]]]] = {}
        self._ranked_for: tuple[object, Mapping[str, int]] | None = None
        self._ranked: dict[tuple[str, Keys], list[list[tuple[int, Node]]]] = {}

    def pick(self, nodes: Mapping[str, Node], *, node_zone: Mapping[str, str | None],
             used: Mapping[str, int], zone: str, keys: Keys, pods: int) -> list[dict[str, Any]]:  # fmt: skip
        """The zone's nodes as the planner reads nodes (each built once per node object)."""
        chosen: list[tuple[int, Node]] = []
        for group in self._ranked_shapes(nodes, node_zone, used, zone, keys):
            chosen.extend(group[:pods])
        out = []
        for _, node in sorted(chosen, key=lambda e: e[0]):
            found = self._node_dicts.get(id(node))
            if found is None or found[0] is not node:
                found = self._node_dicts[id(node)] = (node, node_dict(node))
            out.append(found[1])
        return out

    def _shapes(self, nodes: Mapping[str, Node], node_zone: Mapping[str, str | None], zone: str,
                keys: Keys) -> list[list[tuple[int, str, Node]]]:  # fmt: skip
        """The zone's nodes (index in the cluster's order, name, node) by node shape."""
        if nodes is not self._nodes_map:
            fingerprint = tuple(map(id, nodes.values()))
            self._nodes_map = nodes
            if fingerprint != self._nodes_seen:
                self._nodes_seen, self._shape_cache = fingerprint, {}
            if len(self._node_dicts) > 4 * len(nodes) + 64:
                self._node_dicts.clear()
        found = self._shape_cache.get((zone, keys))
        if found is None:
            groups: dict[tuple[object, ...], list[tuple[int, str, Node]]] = {}
            for index, (name, node) in enumerate(nodes.items()):
                if node_zone.get(name, node.zone) != zone:
                    continue
                shape = ((index,) if keys is None else
                         (node.taints, node.unschedulable, tuple(node.labels.get(k) for k in keys)))  # fmt: skip
                groups.setdefault(shape, []).append((index, name, node))
            found = self._shape_cache[(zone, keys)] = list(groups.values())
        return found

    def _ranked_shapes(self, nodes: Mapping[str, Node], node_zone: Mapping[str, str | None],
                       used: Mapping[str, int], zone: str, keys: Keys) -> list[list[tuple[int, Node]]]:  # fmt: skip
        """The zone's node shapes, each's nodes (index, node) by free GPUs, most first (ties:
        the first in the cluster's order)."""
        groups = self._shapes(nodes, node_zone, zone, keys)  # resets the shapes when the nodes changed
        if (self._ranked_for is None or self._ranked_for[0] is not self._shape_cache
                or (used is not self._used_map and self._ranked_for[1] != used)):  # fmt: skip
            self._ranked_for, self._ranked = (self._shape_cache, dict(used)), {}
        self._used_map = used
        found = self._ranked.get((zone, keys))
        if found is None:
            found = self._ranked[(zone, keys)] = [
                [(index, node) for index, name, node in
                 sorted(group, key=lambda e: (e[2].gpu_allocatable - used.get(e[1], 0), -e[0]), reverse=True)]
                for group in groups]  # fmt: skip
        return found

