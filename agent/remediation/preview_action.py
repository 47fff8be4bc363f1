"""The plan preview: what a finding's fix would do, as the `plan` action recorded before approval.

Who calls it: the agent's plan previews (`agent.runtime.plan_previews`) when a remediable finding opens
an incident or re-detects it with another placement; it plans with `plan_remediation` over the
live objects it read and records what `preview_action` returns. Pure: a `Plan` or `Refusal` in,
plain data out (`PreviewAction`: the action's message, payload and outcome, in the shape
`agent.model.proposal` reads back).

Rules: a plan is recorded with its whole `Plan.to_dict()` (diff, preconditions, patches), the
fix in words as the message, `preview: true`, the placement and verdict it was computed for, and no
outcome yet (`succeeded` None); the message ends saying who owns each object something else
re-applies (a GitOps tool, a pipeline, kubectl apply, a controller) and what that means for the
live fix. When the job's last fix was undone (`reverted`), the message starts by naming it ("fix
reverted by <manager> at <time>") and the payload carries the revert. A refusal is recorded as `refusal` with `succeeded` False and
the message "the fix cannot be applied: <why>". The preview is never what the executor applies:
the executor re-reads, re-plans and records its own plan (with a `step`) on approval.

What it does not do: read the cluster, write anything, or decide approvals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.model.proposal import PREVIEW, REFUSAL, REVERTED, TARGET_ZONE, VERDICT, ZONES
from agent.model.revert import Revert
from agent.remediation.plan import Plan, Refusal, TargetAction

_FIELD_WORDS = (
    ("nodeSelector", "the zone nodeSelector"),
    ("nodeSelectorTerms", "the zone in every nodeAffinity term"),
    ("podAffinity", "podAffinity to the job's own pods on the zone key"),
    ("tolerations", "tolerations for the zone's node taints"),
    ("labels", "the zone label"),
)


@dataclass(frozen=True)
class PreviewAction:
    """What to record: a `plan` action with this message, payload and outcome."""

    message: str
    payload: dict[str, Any]
    succeeded: bool | None


def _fields(plan: Plan) -> str:
    touched = {key for t in plan.targets for c in t.changes for key in c.after}
    words = [w for key, w in _FIELD_WORDS if key in touched]
    if not words:
        return ""
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " and " + words[-1]


def _written_where(override: Mapping[str, Any] | None) -> str:
    """Where a TrainJob's or JobSet's changes are written, in words."""
    found = override or {}
    field = str(found.get("field"))
    if found.get("manager"):
        return f"its own {field} entry (manager {found['manager']})"
    if field == "replicatedJobs":
        return "its replicated jobs' pod templates"
    return f"its own {field} entries"


def _resumed_how(override: Mapping[str, Any] | None) -> str:
    return " in the same request" if (override or {}).get("resume_with_patch") else ""


def describe(plan: Plan) -> str:
    """The fix in words: which objects move how, what their templates get, where they land."""
    zone = plan.target_zone
    if plan.kueue:
        requeue, annotate = plan.targets
        replicas = ", ".join(c.replica for c in annotate.changes)
        where = (f"the templates of {annotate.kind} {annotate.namespace}/{annotate.name}"
                 if annotate.override is None else
                 f"{_written_where(annotate.override)} of {annotate.kind} {annotate.namespace}/"
                 f"{annotate.name}")  # fmt: skip
        renew = ("" if annotate.override is None else
                 ", renew its suspended child Jobs that keep Kueue's old marks")
        return (f"re-place the job through Kueue: deactivate Workload {requeue.namespace}/"
                f"{requeue.name} (Kueue suspends the job), add Kueue's zone-level topology "
                f"request to {where} ({replicas}){renew}, then delete the Workload so Kueue "
                f"rebuilds it and re-queues the job (it may wait for quota); Kueue places it in "
                f"one zone ({', '.join(plan.zones)} allow every required flow)")  # fmt: skip
    fields = _fields(plan)
    parts: list[str] = []
    for target in plan.targets:
        where = f"{target.kind} {target.namespace}/{target.name}"
        replicas = ", ".join(c.replica for c in target.changes)
        if target.action is TargetAction.SUSPEND_RESUME:
            parts.append(f"suspend {where}, set {fields} on its templates ({replicas}), then "
                         f"resume it")  # fmt: skip
        elif target.action is TargetAction.SUSPEND_PATCH_RESUME:
            parts.append(f"suspend {where}, wait for its pods to go, set {fields} on "
                         f"{_written_where(target.override)} ({replicas}), then resume it"
                         f"{_resumed_how(target.override)}")  # fmt: skip
        elif target.action is TargetAction.ROLLOUT:
            parts.append(f"patch the template of {where} with {fields} (a rollout moves its pods)")
        else:
            parts.append(f"recreate {where} with {fields} (its template is immutable)")
    owned = "".join(f". {o.sentence()}" for o in plan.owners if not o.ownership.durable)
    return (f"co-locate the job in zone {zone}: " + "; ".join(parts)
            + f"; {plan.pods} pod(s) start in {zone}{owned}")  # fmt: skip


def preview_action(
    result: Plan | Refusal, *, zones: Mapping[str, int], target_zone: str | None,
    verdict: str | None = None, reverted: Revert | None = None,
) -> PreviewAction:
    """The `plan` action recording a preview of the fix for the placement `zones` (zone ->
    pods), `target_zone` and the finding's `verdict` (see the module docstring). `reverted`:
    the job's last fix was undone (named first in the message, recorded in the payload)."""
    placement = {str(k): int(v) for k, v in sorted(zones.items())}
    seen: dict[str, Any] = {VERDICT: verdict} if verdict is not None else {}
    if reverted is not None:
        seen[REVERTED] = reverted.to_dict()
    if isinstance(result, Refusal):
        return PreviewAction(
            message=f"the fix cannot be applied: {result.reason}",
            payload={PREVIEW: True, REFUSAL: result.reason, ZONES: placement,
                     TARGET_ZONE: target_zone, **seen},
            succeeded=False,
        )
    said = describe(result)
    return PreviewAction(
        message=f"{reverted.sentence()}. The live fix again: {said}" if reverted else said,
        payload={PREVIEW: True, "plan": result.to_dict(), ZONES: placement,
                 TARGET_ZONE: result.target_zone, **seen},
        succeeded=None,
    )
