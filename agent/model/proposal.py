"""The proposed fix of an incident as plain data: the plan (or why there is none) people are shown.

Who uses it: the agent records a plan preview on an incident when a remediable finding opens it
(or re-detects it with another placement) as a `plan` remediation action whose payload says
`preview: true`; the remediation executor records the plan it executes as a `plan` action with a
`step`. `proposed_fix(actions)` reads the latest of either back, for the chat message, `incidents
show` (table and JSON) and the HTTP API's incident detail, none of which may import the
remediation code: they read this shape only.

Rules: the latest `plan` action wins (the executor's plan, once recorded, replaces the preview);
a `plan` action carries either a plan (`payload.plan` with its `diff`, `preconditions`,
`target_zone`, `pods` and its `targets`, each object it changes with the uid and resourceVersion
it was planned from, and `owners`: who owns each, `agent.model.ownership`) or a refusal (`payload.refusal`: why the fix cannot be applied, the action
not succeeded). What it does not do: build plans, read the store or render text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.model.handover import Handover
from agent.model.incident import RemediationAction
from agent.model.lifecycle import RemediationActionKind
from agent.model.ownership import ObjectOwnership
from agent.model.revert import Revert

PREVIEW = "preview"  # payload flag of a plan recorded before approval
REFUSAL = "refusal"  # payload key: why the fix cannot be applied
ZONES = "zones"  # payload key: the placement (zone -> pods) the preview was computed for
TARGET_ZONE = "target_zone"  # payload key: the zone the preview co-locates the job in
VERDICT = "verdict"  # payload key: the verdict the preview was computed for
REVERTED = "reverted"  # payload key: the job's last fix was undone (`agent.model.revert`)


@dataclass(frozen=True)
class PlannedObject:
    """One object a plan changes, as it was when planned (a generic group's plan has one per
    Deployment or batch Job it moves, and no job uid of its own)."""

    kind: str
    namespace: str
    name: str
    uid: str | None = None
    resource_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name,
                "uid": self.uid, "resource_version": self.resource_version}  # fmt: skip


def _planned_objects(targets: Any) -> tuple[PlannedObject, ...]:
    if not isinstance(targets, Sequence) or isinstance(targets, str):
        return ()
    out = []
    for target in targets:
        if not isinstance(target, Mapping) or not target.get("kind") or not target.get("name"):
            continue
        uid, version = target.get("uid"), target.get("resource_version")
        out.append(PlannedObject(
            kind=str(target["kind"]), namespace=str(target.get("namespace") or ""),
            name=str(target["name"]), uid=str(uid) if uid else None,
            resource_version=str(version) if version else None,
        ))  # fmt: skip
    return tuple(out)


@dataclass(frozen=True)
class ProposedFix:
    """One recorded plan (or refusal) of an incident.

    `summary`: the fix in words. `diff`: the patches as a unified diff ("" for a refusal).
    `preconditions`: what the plan was computed from (job uid, resourceVersion, verdict,
    placement pod -> zone). `refusal`: why the fix cannot be applied (None when it can).
    `preview`: recorded before approval (True) or the plan being executed (False).
    `objects`: the objects the plan changes, each with the uid and resourceVersion it was planned
    from (a generic group has no job uid: these are its identity).
    """

    summary: str
    diff: str = ""
    target_zone: str | None = None
    pods: int | None = None
    preconditions: Mapping[str, Any] = field(default_factory=dict)
    refusal: str | None = None
    preview: bool = True
    zones: Mapping[str, int] = field(default_factory=dict)
    action_id: int | None = None
    objects: tuple[PlannedObject, ...] = ()
    verdict: str | None = None  # the verdict a preview was computed for (not in `to_dict`)
    owners: tuple[ObjectOwnership, ...] = ()  # who owns each object the plan changes
    reverted: Revert | None = None  # the job's last fix was undone (by whom, when)
    handovers: tuple[Handover, ...] = ()  # the fix for each object's source (not in `to_dict`)

    @property
    def lasting(self) -> bool:
        """True when no GitOps tool, pipeline or controller owns an object the plan changes."""
        return all(o.ownership.durable for o in self.owners)

    @property
    def applicable(self) -> bool:
        return self.refusal is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary, "diff": self.diff, "target_zone": self.target_zone,
            "pods": self.pods, "preconditions": dict(self.preconditions),
            "refusal": self.refusal, "preview": self.preview, "zones": dict(self.zones),
            "action_id": self.action_id, "objects": [o.to_dict() for o in self.objects],
            "owners": [o.to_dict() for o in self.owners],
            "reverted": self.reverted.to_dict() if self.reverted is not None else None,
        }  # fmt: skip


def from_action(action: RemediationAction) -> ProposedFix | None:
    """The proposed fix a `plan` action records, or None for any other action."""
    if action.kind is not RemediationActionKind.PLAN:
        return None
    payload = action.payload
    preview = payload.get(PREVIEW) is True
    zones = payload.get(ZONES)
    zones = {str(k): int(v) for k, v in zones.items()} if isinstance(zones, Mapping) else {}
    target = payload.get(TARGET_ZONE)
    refusal = payload.get(REFUSAL)
    verdict = payload.get(VERDICT)
    found = payload.get(REVERTED)
    reverted = Revert.from_dict(found) if isinstance(found, Mapping) else None
    if isinstance(refusal, str) and refusal:
        return ProposedFix(summary=action.message or "", refusal=refusal, preview=preview,
                           target_zone=str(target) if target else None, zones=zones,
                           action_id=action.id,
                           verdict=str(verdict) if verdict else None)  # fmt: skip
    plan = payload.get("plan")
    if not isinstance(plan, Mapping):
        return None
    pre = plan.get("preconditions")
    pods = plan.get("pods")
    if not verdict and isinstance(pre, Mapping):
        verdict = pre.get("verdict")
    return ProposedFix(
        summary=action.message or "",
        diff=str(plan.get("diff") or ""),
        target_zone=str(plan.get("target_zone") or target or "") or None,
        pods=pods if isinstance(pods, int) else None,
        preconditions=dict(pre) if isinstance(pre, Mapping) else {},
        preview=preview,
        zones=zones,
        action_id=action.id,
        objects=_planned_objects(plan.get("targets")),
        verdict=str(verdict) if verdict else None,
        owners=tuple(ObjectOwnership.from_dict(o) for o in plan.get("owners") or ()
                     if isinstance(o, Mapping)),
        reverted=reverted,
        handovers=tuple(Handover.from_dict(h) for h in plan.get("handovers") or ()
                        if isinstance(h, Mapping)),
    )


def proposed_fix(actions: Sequence[RemediationAction]) -> ProposedFix | None:
    """The latest recorded plan or refusal of an incident (see the module docstring)."""
    for action in reversed(sorted(actions, key=lambda a: a.id)):
        found = from_action(action)
        if found is not None:
            return found
    return None


def latest_preview(actions: Sequence[RemediationAction]) -> ProposedFix | None:
    """The latest preview (recorded before approval), ignoring the executor's plans."""
    for action in reversed(sorted(actions, key=lambda a: a.id)):
        found = from_action(action)
        if found is not None and found.preview:
            return found
    return None
