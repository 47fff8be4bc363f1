"""Revert detection: does a live object still hold what an executed plan wrote, and who undid it.

Called by the plan previews (`agent.runtime.plan_previews`) when a job whose last incident was
resolved by a zonemedic fix splits again: the executed plan's targets are compared with the live
objects just read, field by field (the zone nodeSelector, each zone-mirroring label, the
tolerations, the affinity terms the plan set); every field that no longer reads as planned is a
`RevertedField` naming the field manager that wrote it (`metadata.managedFields`; for a field
removed, which leaves no owner, the latest writer other than zonemedic) and when. Pure: plain data
in; it does not read the cluster or the store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agent.model.cluster import ZONE_LABEL
from agent.model.ownership import field_manager, field_path, latest_writer
from agent.model.revert import Revert, RevertedField
from agent.remediation.plan import Plan, Target
from agent.remediation.template import TemplateChange, TemplateState

LiveLookup = Callable[[Target], Mapping[str, Any] | None]
_SPEC_FIELDS = {
    "nodeSelector": ("spec", "nodeSelector", ZONE_LABEL),
    "tolerations": ("spec", "tolerations"),
    "nodeSelectorTerms": ("spec", "affinity", "nodeAffinity",
                          "requiredDuringSchedulingIgnoredDuringExecution"),
    "podAffinity": ("spec", "affinity", "podAffinity"),
}  # fmt: skip


Piece = tuple[tuple[str, ...], Any, TemplateChange]


def _pieces(change: TemplateChange) -> list[Piece]:
    """One sub-change per field the change sets: that field's path from the template, the value
    the plan set, and the sub-change (to read its state on the live object)."""
    out: list[Piece] = []
    for key, after in change.after.items():
        before = change.before.get(key)
        if key in ("labels", "annotations") and isinstance(after, Mapping):
            for inner, value in after.items():
                was = before.get(inner) if isinstance(before, Mapping) else None
                out.append((("metadata", key, str(inner)), value,
                            TemplateChange(change.replica, change.path, {key: {inner: was}},
                                           {key: {inner: value}})))  # fmt: skip
        elif key in _SPEC_FIELDS:
            out.append((_SPEC_FIELDS[key], after,
                        TemplateChange(change.replica, change.path, {key: before},
                                       {key: after})))  # fmt: skip
    return out


def _value_at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def find_revert(plan: Plan, live: LiveLookup, *, incident_id: int) -> Revert | None:
    """The fields of `plan` (executed for `incident_id`) the live objects no longer hold, or
    None when every target still reads as planned (or is gone: nothing to say who changed it)."""
    fields: list[RevertedField] = []
    for target in plan.targets:
        obj = live(target)
        if obj is None:
            continue
        for change in target.changes:
            for where, planned, piece in _pieces(change):
                if piece.state_of(obj) is TemplateState.PLANNED:
                    continue
                full = (*change.path, *where)
                writer = field_manager(obj, field_path(*full)) or latest_writer(obj)
                fields.append(RevertedField(
                    kind=target.kind, namespace=target.namespace, name=target.name,
                    field=".".join(full), planned=planned, now=_value_at(obj, full), manager=writer.manager if writer else "",
                    at=writer.time if writer else ""))  # fmt: skip
    return Revert(incident_id, tuple(fields)) if fields else None
