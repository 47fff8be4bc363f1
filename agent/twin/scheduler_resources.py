"""Resource quantities for the twin's scheduler: parse `500m`/`4Gi`, sum pod requests, node room.

Called by `scheduler_filters` (NodeResourcesFit) and `scheduler_scores` (least-allocated and balanced
allocation). Pure. Quantities are held as integers in milli-units for cpu and whole units for the
rest, which is precise enough for scheduling decisions. It does not read metrics or usage, only
requests and allocatable, exactly as kube-scheduler does.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

Obj = Mapping[str, Any]

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
GPU = "nvidia.com/gpu"

_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


class QuantityError(ValueError):
    """A resource quantity string that Kubernetes would refuse."""


def parse_quantity(value: object) -> Decimal:
    """`"500m"` -> 0.5, `"4Gi"` -> 4294967296, `2` -> 2."""
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIX:
        raise QuantityError(f"invalid quantity {value!r}")
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    except InvalidOperation as exc:
        raise QuantityError(f"invalid quantity {value!r}") from exc


@functools.lru_cache(maxsize=8192)
def to_units(name: str, value: object) -> int:
    """Integer units: milli-cpu for cpu, whole units otherwise (rounded up, like upstream)."""
    amount = parse_quantity(value)
    if name == CPU:
        amount *= 1000
    return int(amount.to_integral_value(rounding="ROUND_CEILING"))


def _container_requests(container: Obj) -> dict[str, int]:
    resources = container.get("resources") or {}
    requests = dict(resources.get("limits") or {})  # limits default the requests
    requests.update(resources.get("requests") or {})
    return {name: to_units(name, q) for name, q in requests.items()}


def pod_requests(pod: Obj) -> dict[str, int]:
    """Sum of containers' requests, max'd with each init container, plus overhead; `pods` is 1."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, amount in _container_requests(container).items():
            total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in _container_requests(container).items():
            total[name] = max(total.get(name, 0), amount)
    for name, q in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + to_units(name, q)
    total[PODS] = 1
    return total


def node_allocatable(node: Obj) -> dict[str, int]:
    status = node.get("status") or {}
    source = status.get("allocatable") or status.get("capacity") or {}
    return {name: to_units(name, q) for name, q in source.items()}


def sum_requests(pods: Iterable[Obj]) -> dict[str, int]:
    used: dict[str, int] = {}
    for pod in pods:
        for name, amount in pod_requests(pod).items():
            used[name] = used.get(name, 0) + amount
    return used
