"""Kueue's flavor assignment and quota check: can a ClusterQueue reserve quota for a Workload now.

Called by the twin's Kueue admission for each pending Workload. It follows Kueue v0.14 without
cohorts, borrowing or preemption: the pod sets are taken in order (the two pod sets of a
`podset-group-name` share their flavors); for each resource group covering what a pod set asks
for, the flavors are tried in the ClusterQueue's order and the first that fits is taken. A flavor
does not fit when the pod set asks for Topology Aware Scheduling and the flavor has no
`topologyName` (or its Topology lacks the level), when it is a TAS flavor and the pod set neither
asks for TAS nor sits in a ClusterQueue whose flavors are all TAS flavors, when one of its
`nodeTaints` is not tolerated, when the pod set's nodeSelector contradicts its `nodeLabels`, or
when the request exceeds the nominal quota left. The messages are Kueue's (`insufficient unused
quota for nvidia.com/gpu in flavor gpu, 2 more needed`, `resource x unavailable in
ClusterQueue`, ...). Quantities are the scheduler's integer units (milli-cpu, bytes). Pure. It does
not place pods in the topology (kueue_topology does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.twin.scheduler_resources import CPU, PODS, to_units
from agent.twin.scheduler_terms import untolerated_taint

Units = dict[str, int]


@dataclass(frozen=True)
class Flavor:
    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Mapping[str, Any], ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()
    topology_name: str | None = None
    levels: tuple[str, ...] = ()  # the levels of its Topology, when that exists

    @classmethod
    def of(cls, obj: Mapping[str, Any], levels: Sequence[str] = ()) -> Flavor:
        spec = obj.get("spec") or {}
        return cls(
            name=str((obj.get("metadata") or {}).get("name")),
            node_labels=dict(spec.get("nodeLabels") or {}),
            node_taints=tuple(spec.get("nodeTaints") or ()),
            tolerations=tuple(spec.get("tolerations") or ()),
            topology_name=spec.get("topologyName") or None,
            levels=tuple(levels),
        )


@dataclass(frozen=True)
class ResourceGroup:
    covered: tuple[str, ...]
    flavors: tuple[tuple[str, Mapping[str, int]], ...]  # (flavor, resource -> nominal units)


@dataclass(frozen=True)
class Demand:
    """One pod set as the flavor assigner sees it."""

    name: str
    count: int
    per_pod: Mapping[str, int]
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    tas_level: str | None  # the required/preferred level, if any
    explicit_tas: bool
    tas_required: bool = False
    group: str | None = None

    @property
    def total(self) -> Units:
        return {r: v * self.count for r, v in self.per_pod.items() if r != PODS and v > 0}


@dataclass(frozen=True)
class Assigned:
    """Flavors per pod set (resource -> flavor name), or why none were found."""

    flavors: dict[str, dict[str, str]]
    message: str = ""


def resource_groups(cluster_queue: Mapping[str, Any]) -> list[ResourceGroup]:
    out = []
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        flavors = []
        for flavor in group.get("flavors") or []:
            quotas = {str(r.get("name")): to_units(str(r.get("name")), r.get("nominalQuota", 0))
                      for r in flavor.get("resources") or []}  # fmt: skip
            flavors.append((str(flavor.get("name")), quotas))
        out.append(ResourceGroup(tuple(str(r) for r in group.get("coveredResources") or ()),
                                 tuple(flavors)))  # fmt: skip
    return out


def tas_only(groups: Sequence[ResourceGroup], flavors: Mapping[str, Flavor]) -> bool:
    """Every flavor of the ClusterQueue is a TAS flavor: TAS is implied for every pod set."""
    names = [name for g in groups for name, _ in g.flavors]
    return bool(names) and all(
        name in flavors and flavors[name].topology_name for name in names
    )


def quantity(resource: str, units: int) -> str:
    """Units back to a Kubernetes quantity string (`2`, `500m`, `32Gi`)."""
    if resource == CPU:
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if units and units % size == 0:
            return f"{units // size}{suffix}"
    return str(units)


def _tas_mismatch(demand: Demand, flavor: Flavor, implied: bool) -> str | None:
    if demand.explicit_tas or implied:
        if implied and not demand.explicit_tas:
            return None
        if not flavor.topology_name:
            return f'Flavor "{flavor.name}" does not support TopologyAwareScheduling'
        if not flavor.levels:
            return f'Flavor "{flavor.name}" information missing in TAS cache'
        if demand.tas_level is not None and demand.tas_level not in flavor.levels:
            return f'Flavor "{flavor.name}" does not contain the requested level'
        return None
    if flavor.topology_name:
        return f'Flavor "{flavor.name}" supports only TopologyAwareScheduling'
    return None


def _flavor_refusal(demands: Sequence[Demand], flavor: Flavor, implied: bool) -> str | None:
    for demand in demands:
        mismatch = _tas_mismatch(demand, flavor, implied)
        if mismatch is not None:
            return mismatch
        pod = {"spec": {"tolerations": [*demand.tolerations, *flavor.tolerations]}}
        taint = untolerated_taint(pod, {"spec": {"taints": list(flavor.node_taints)}})
        if taint is not None:
            value = f"={taint['value']}" if taint.get("value") else ""
            text = f"{taint.get('key')}{value}:{taint.get('effect')}"
            return f"untolerated taint {text} in flavor {flavor.name}"
        if any(k in flavor.node_labels and flavor.node_labels[k] != v
               for k, v in demand.node_selector.items()):
            return f"flavor {flavor.name} doesn't match node affinity"  # fmt: skip
    return None


def assign(
    demands: Sequence[Demand],
    groups: Sequence[ResourceGroup],
    flavors: Mapping[str, Flavor],
    usage: Mapping[tuple[str, str], int],
) -> Assigned:
    """Flavors for every pod set of one Workload, given the ClusterQueue's current usage
    ((flavor, resource) -> units reserved by admitted Workloads)."""
    implied = tas_only(groups, flavors)
    order: list[str] = []
    grouped: dict[str, list[Demand]] = {}
    for index, demand in enumerate(demands):
        key = demand.group if demand.group is not None else f"#{index}"
        if key not in grouped:
            order.append(key)
        grouped.setdefault(key, []).append(demand)
    taken: dict[tuple[str, str], int] = {}
    result: dict[str, dict[str, str]] = {d.name: {} for d in demands}
    messages: list[str] = []
    for key in order:
        members = grouped[key]
        requests: Units = {}
        for demand in members:
            for resource, amount in demand.total.items():
                requests[resource] = requests.get(resource, 0) + amount
        chosen: dict[str, str] = {}
        reasons: list[str] = []
        for resource in sorted(requests):
            if resource in chosen:
                continue
            group = next((g for g in groups if resource in g.covered), None)
            if group is None:
                reasons = [f"resource {resource} unavailable in ClusterQueue"]
                chosen = {}
                break
            wanted = {r: v for r, v in requests.items() if r in group.covered}
            found = None
            for flavor_name, quotas in group.flavors:
                flavor = flavors.get(flavor_name)
                if flavor is None:
                    reasons.append(f"flavor {flavor_name} not found")
                    continue
                refusal = _flavor_refusal(members, flavor, implied)
                if refusal is not None:
                    reasons.append(refusal)
                    continue
                short = []
                for r, amount in sorted(wanted.items()):
                    nominal = quotas.get(r, 0)
                    val = amount + taken.get((flavor_name, r), 0)
                    available = nominal - usage.get((flavor_name, r), 0)
                    if val > nominal:
                        short.append(f"insufficient quota for {r} in flavor {flavor_name}, "
                                     f"request > maximum capacity ({quantity(r, val)} > "
                                     f"{quantity(r, nominal)})")  # fmt: skip
                    elif val > available:
                        short.append(f"insufficient unused quota for {r} in flavor "
                                     f"{flavor_name}, {quantity(r, val - available)} more needed")
                if short:
                    reasons.extend(short)
                    continue
                found = flavor_name
                break
            if found is None:
                chosen = {}
                break
            for r in wanted:
                chosen[r] = found
            reasons = []
        if not chosen and requests:
            for demand in members:
                messages.append(f"couldn't assign flavors to pod set {demand.name}: "
                                f"{', '.join(sorted(reasons))}")
            return Assigned({}, "; ".join(messages))
        for demand in members:
            result[demand.name] = {r: chosen[r] for r in demand.total if r in chosen}
            for resource, amount in demand.total.items():
                slot = (chosen[resource], resource)
                taken[slot] = taken.get(slot, 0) + amount
    return Assigned(result)
