"""A fix that was undone: which object, which field, by which field manager, and when.

Built by the revert detection (`agent.remediation.revert`) when a job zonemedic fixed splits
again and its live objects no longer hold what the executed plan wrote; recorded with the new
incident's plan preview, read back by the proposal (`agent.model.proposal`), the chat message,
`incidents show` and the approval step (an automatic fix is held, as after a rollback).

The timeline records it as its own event (`fix_reverted`, its actor the field manager that undid
the fix) on both incidents, since a person may read either: on the incident whose fix was undone
(`event_detail(redetected_as=M)`: the fix did not last, re-detected as M) and on the
re-detection's (`event_detail()`: `reverted_incident` N, whose fix this is). Plain data only; it does
not detect anything or write the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RevertedField:
    """One field the plan set that the live object no longer holds."""

    kind: str
    namespace: str
    name: str
    field: str  # where, as a dotted path from the object root
    planned: Any  # what zonemedic wrote
    now: Any  # what the object holds now (None: removed)
    manager: str  # the field manager that wrote it ("" when unknown)
    at: str  # when that manager last wrote (RFC 3339, "" when unknown)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name,
                "field": self.field, "planned": self.planned, "now": self.now,
                "manager": self.manager, "at": self.at}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RevertedField:
        return cls(kind=str(data.get("kind") or ""), namespace=str(data.get("namespace") or ""),
                   name=str(data.get("name") or ""), field=str(data.get("field") or ""),
                   planned=data.get("planned"), now=data.get("now"),
                   manager=str(data.get("manager") or ""), at=str(data.get("at") or ""))  # fmt: skip


@dataclass(frozen=True)
class Revert:
    """The fix of incident `incident_id` undone: its fields, and who undid it (the latest writer
    among them)."""

    incident_id: int
    fields: tuple[RevertedField, ...]

    @property
    def manager(self) -> str:
        latest = max(self.fields, key=lambda f: f.at, default=None)
        return latest.manager if latest is not None and latest.manager else "an unknown writer"

    @property
    def at(self) -> str:
        return max((f.at for f in self.fields), default="")

    def title(self) -> str:
        """How the re-detection is named: "fix reverted by <manager>"."""
        return f"fix reverted by {self.manager}"

    def sentence(self) -> str:
        where = "; ".join(
            f"{f.kind} {f.namespace}/{f.name} {f.field} "
            + ("removed" if f.now is None else f"is {_short(f.now)} again")
            + f" (zonemedic set {_short(f.planned)})"
            for f in self.fields)  # fmt: skip
        when = f" at {self.at}" if self.at else ""
        return (f"{self.title()}{when}: the fix of incident {self.incident_id} was undone ({where}); "
                "re-applying the live fix would be undone again: commit the change to the "
                "object's source instead")

    def to_dict(self) -> dict[str, Any]:
        return {"incident_id": self.incident_id, "manager": self.manager, "at": self.at,
                "fields": [f.to_dict() for f in self.fields], "says": self.sentence()}  # fmt: skip

    def event_detail(self, *, redetected_as: int | None = None) -> dict[str, Any]:
        """The `fix_reverted` event's detail: by whom and when, the fields, and the other
        incident (`redetected_as`: on the fixed incident, the re-detection's; else the fixed
        one, `reverted_incident`)."""
        other = ({"redetected_as": redetected_as} if redetected_as is not None
                 else {"reverted_incident": self.incident_id})  # fmt: skip
        return {"by": self.manager, "reverted_at": self.at, **other,
                "fields": [f"{f.kind} {f.namespace}/{f.name} {f.field}" for f in self.fields],
                "says": self.title()}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Revert:
        return cls(incident_id=int(data.get("incident_id") or 0),
                   fields=tuple(RevertedField.from_dict(f) for f in data.get("fields") or ()
                                if isinstance(f, Mapping)))  # fmt: skip


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
