"""`metav1.Condition` lists as apimachinery's meta helpers keep them (Kueue's Workload, ClusterQueue
and LocalQueue statuses).

Called by the twin's Kueue modules. `set_condition` returns a new list with one condition type set
and whether anything changed: the transition time moves only when the status flips, while reason,
message and observedGeneration follow the newest write (`meta.SetStatusCondition`). Pure: the
timestamp is passed in. It does not handle the older core/v1 job conditions (operator_conditions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Condition = dict[str, Any]


def find(conditions: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def is_true(conditions: Sequence[Mapping[str, Any]], kind: str) -> bool:
    found = find(conditions, kind)
    return found is not None and found.get("status") == "True"


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    kind: str,
    *,
    status: bool,
    reason: str,
    message: str,
    generation: int,
    now: str,
) -> tuple[list[Condition], bool]:
    """The list with `kind` set, and True when that changed it."""
    value = "True" if status else "False"
    wanted = {"type": kind, "status": value, "reason": reason, "message": message,
              "observedGeneration": generation}  # fmt: skip
    out: list[Condition] = []
    changed = True
    found = False
    for condition in conditions:
        if condition.get("type") != kind:
            out.append(dict(condition))
            continue
        found = True
        same = all(condition.get(k) == v for k, v in wanted.items())
        transition = condition.get("lastTransitionTime") if condition.get("status") == value else now
        out.append({**wanted, "lastTransitionTime": transition or now})
        changed = not same
    if not found:
        out.append({**wanted, "lastTransitionTime": now})
    return out, changed


def remove(conditions: Sequence[Mapping[str, Any]], kind: str) -> list[Condition]:
    return [dict(c) for c in conditions if c.get("type") != kind]
