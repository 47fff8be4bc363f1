"""Job status conditions as the Kubeflow training operator and the batch Job controller write them,
and the `metav1.Condition`s of the JobSet and Trainer controllers.

Called by `operator_training`, `operator_batchjob`, `operator_jobset` and `operator_trainjob`.
`set_condition` and `set_status_condition` return a new list with one condition type set
(lastTransitionTime moves only when the status flips). Pure apart from reading
the wall clock for timestamps through `operator_events.timestamp`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.twin.operator_events import timestamp

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
) -> list[Condition]:
    now = timestamp()
    value = "True" if status else "False"
    out: list[Condition] = []
    found = False
    for c in conditions:
        if c.get("type") != kind:
            out.append(dict(c))
            continue
        found = True
        if c.get("status") == value and c.get("reason") == reason:
            out.append(dict(c))
        else:
            transition = c.get("lastTransitionTime") if c.get("status") == value else now
            out.append({"type": kind, "status": value, "reason": reason, "message": message,
                        "lastUpdateTime": now, "lastTransitionTime": transition})  # fmt: skip
    if not found:
        out.append({"type": kind, "status": value, "reason": reason, "message": message,
                    "lastUpdateTime": now, "lastTransitionTime": now})  # fmt: skip
    return out


def set_status_condition(
    conditions: Sequence[Mapping[str, Any]],
    kind: str,
    *,
    status: bool,
    reason: str,
    message: str,
    add_when_false: bool = True,
) -> list[Condition]:
    """A `metav1.Condition` set as `meta.SetStatusCondition` does (the JobSet and Trainer
    controllers' conditions: no lastUpdateTime; lastTransitionTime moves when the status flips).
    With add_when_false=False a missing condition is added only when true (JobSet's rule)."""
    value = "True" if status else "False"
    out: list[Condition] = []
    found = False
    for c in conditions:
        if c.get("type") != kind:
            out.append(dict(c))
            continue
        found = True
        transition = c.get("lastTransitionTime") if c.get("status") == value else timestamp()
        out.append({"type": kind, "status": value, "reason": reason, "message": message,
                    "lastTransitionTime": transition})  # fmt: skip
    if not found and (status or add_when_false):
        out.append({"type": kind, "status": value, "reason": reason, "message": message,
                    "lastTransitionTime": timestamp()})  # fmt: skip
    return out
