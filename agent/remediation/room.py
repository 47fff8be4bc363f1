"""Does a zone have room for a job's pods: quantities, taints, tolerations and a first-fit packing.

Called by `agent.remediation.plan` before it proposes any write. A zone has room when every pod the
plan will (re)create fits on one of the zone's nodes that is schedulable (not cordoned), whose
labels match the pod's nodeSelector and whose NoSchedule/NoExecute taints the pod tolerates, with
free resources = allocatable minus the requests of the live pods already bound there (pods the plan
replaces do not count). Every requested resource counts (cpu, memory, `nvidia.com/gpu`, any
extended resource), plus one `pods` slot when the node declares a pod limit. Pods are packed first
fit, largest GPU request first. Pure: plain dicts in, plain data out; it does not schedule anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


class QuantityError(ValueError):
    """A resource quantity that is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes quantity (`500m`, `32Gi`, `1e3`, 4) as a Decimal."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if match is None or match.group(2) not in _SUFFIX:
        raise QuantityError(f"not a quantity: {value!r}")
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    except InvalidOperation:
        raise QuantityError(f"not a quantity: {value!r}") from None


def pod_spec_requests(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """Effective requests of a pod spec: the containers' sum, or an init container's larger need.

    A container's limit stands in for a missing request (as the API server defaults it).
    """

    def one(container: Mapping[str, Any]) -> dict[str, Decimal]:
        resources = container.get("resources") or {}
        wanted = dict(resources.get("limits") or {})
        wanted.update(resources.get("requests") or {})
        return {str(k): parse_quantity(v) for k, v in wanted.items()}

    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, amount in one(container).items():
            total[name] = total.get(name, Decimal(0)) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in one(container).items():
            total[name] = max(total.get(name, Decimal(0)), amount)
    return total


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether some toleration tolerates the taint (Kubernetes' matching rules)."""
    for tol in tolerations:
        effect = tol.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        operator = tol.get("operator") or "Equal"
        key = tol.get("key") or ""
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def blocking_taints(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The node's taints that keep pods without a matching toleration off it."""
    taints = (node.get("spec") or {}).get("taints") or []
    return [t for t in taints if t.get("effect") in BLOCKING_EFFECTS]


def node_labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
    return labels


def node_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def schedulable(node: Mapping[str, Any]) -> bool:
    return not (node.get("spec") or {}).get("unschedulable")


def selector_matches(node: Mapping[str, Any], node_selector: Mapping[str, str]) -> bool:
    labels = node_labels(node)
    return all(labels.get(k) == v for k, v in node_selector.items())


@dataclass(frozen=True)
class PodNeed:
    """One pod the plan will (re)create: what it requests and where it may go."""

    name: str
    requests: Mapping[str, Decimal]
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]


def _fmt(resource: str, amount: Decimal) -> str:
    if resource == "memory" and amount >= 2**30:
        return f"{amount / Decimal(2**30):.4g}Gi"
    return f"{amount.normalize():f}"


def _short(left: Mapping[str, Decimal], resource: str, amount: Decimal) -> bool:
    """Whether a node lacks `amount` of `resource`. A resource the node does not declare is
    missing when it is cpu, memory or an extended resource (`vendor/name`), else unlimited."""
    if amount <= 0:
        return False
    if resource in left:
        return left[resource] < amount
    return resource in ("cpu", "memory") or "/" in resource


def _describe(need: PodNeed) -> str:
    parts = [f"{k} {_fmt(k, v)}" for k, v in sorted(need.requests.items()) if v]
    return ", ".join(parts) or "no resources"


def check_room(
    needs: Sequence[PodNeed],
    *,
    zone: str,
    zone_label: str,
    nodes: Sequence[Mapping[str, Any]],
    bound_pods: Sequence[Mapping[str, Any]],
    replaced: frozenset[tuple[str, str]],
) -> str | None:
    """None when every need fits in `zone`; else the reason naming the first pod that does not.

    `bound_pods`: live pods on nodes (any namespace); `replaced`: (namespace, name) of the pods
    the plan deletes, whose requests are freed.
    """
    in_zone = [n for n in nodes if node_labels(n).get(zone_label) == zone]
    if not in_zone:
        return f"zone {zone} has no nodes"
    usable = [n for n in in_zone if schedulable(n)]
    if not usable:
        return f"every node of zone {zone} is cordoned (unschedulable)"
    free: dict[str, dict[str, Decimal]] = {}
    for node in usable:
        alloc = (node.get("status") or {}).get("allocatable") or {}
        free[node_name(node)] = {str(k): parse_quantity(v) for k, v in alloc.items()}
    for pod in bound_pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        where = spec.get("nodeName")
        if where not in free or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if (str(meta.get("namespace")), str(meta.get("name"))) in replaced:
            continue
        left = free[where]
        for name, amount in pod_spec_requests(spec).items():
            if name in left:
                left[name] -= amount
        if "pods" in left:
            left["pods"] -= 1
    order = sorted(
        needs,
        key=lambda n: (
            -n.requests.get(GPU_RESOURCE, Decimal(0)),
            -n.requests.get("cpu", Decimal(0)),
            -n.requests.get("memory", Decimal(0)),
            n.name,
        ),
    )
    for need in order:
        placed = False
        refusals: list[str] = []
        for node in usable:
            name = node_name(node)
            if not selector_matches(node, need.node_selector):
                refusals.append(f"{name}: nodeSelector does not match")
                continue
            untolerated = [t for t in blocking_taints(node) if not tolerates(need.tolerations, t)]
            if untolerated:
                refusals.append(f"{name}: untolerated taint {untolerated[0].get('key')}")
                continue
            left = free[name]
            short = [r for r, amount in need.requests.items() if _short(left, r, amount)]
            if "pods" in left and left["pods"] < 1:
                short.append("pods")
            if short:
                refusals.append(f"{name}: not enough {', '.join(sorted(short))}")
                continue
            for r, amount in need.requests.items():
                if r in left:
                    left[r] -= amount
            if "pods" in left:
                left["pods"] -= 1
            placed = True
            break
        if not placed:
            return (
                f"zone {zone} has no room for pod {need.name} ({_describe(need)}): "
                + "; ".join(refusals)
            )
    return None
