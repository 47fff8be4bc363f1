"""An incident's Slack post and its thread updates, as plain data.

Who calls it: the outbox deliverer (`agent.chatops.delivery`). Pure: records (the incident's
stored diagnosis as its typed view, `agent.model.stored.StoredDiagnosis`) in, `Rendered`
(Block Kit blocks plus a short plain-text fallback) out; no I/O, no clock (times are passed in).
Every block is built with `agent.chatops.blocks`, which holds Slack's limits and the mrkdwn
escaping of outside text. Long lists (denied flows) are grouped by hop, reason and policy when
there are many. Button values carry the incident id and nothing else.

The fix: the latest recorded plan (`agent.model.proposal.ProposedFix`: the preview computed when
the finding opened the incident, later the plan being executed) in words, and its patch as a
unified diff in a code block cut to one section (a line says so, and where to read it whole).
A preview the plan refused (no room in the target zone, Kueue-managed...) says the fix cannot be
applied and why; a split Kueue job's finding adds why Kueue let it split and the Kueue
configuration to add (YAML, a code block), and says Kueue will re-queue the job. A finding whose
co-location is refused adds the policy-side fix offered instead (`agent.chatops.policy_offer`: the
policy as a diff, its blast radius, the command to apply it, and that zonemedic does not apply it). Waste per day comes with the finding (`waste`: GPU-hours and cross-zone egress
dollars, each with its basis, measured or estimated, or "unknown" and why). Who owns the
objects a fix changes and the change for their source (`agent.chatops.ownership_text`) follow
the fix; a fix that was undone (`ProposedFix.reverted`) names the post ("Fix reverted by
<manager>: <job>") and leads with them, right after the facts, before the live fix again.

Approvals: Approve / Reject / Snooze 24h appear only while the incident can be decided (open or
awaiting approval), the finding is remediable, its fix was not refused and approvers are
configured. An approved fix refused before anything was written (`refused`: Kueue-managed,
protected namespace, finished, no room) says so, why, and what to do instead. Not remediable: the reason and the recommendation, Reject / Snooze only. No approvers: no buttons and a line saying how
to enable approvals. Once decided, the buttons are replaced by the decision.

What it does not do: render the digest or slash-command replies (`agent.chatops.replies`), send
anything, read the store, or decide who may click.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent.chatops.blocks import (
    STATUS_WORDS,
    ButtonAction,
    Rendered,
    button,
    cap_blocks,
    context,
    diff_block,
    fallback,
    fit_lines,
    header,
    job_label,
    mrkdwn_escape,
    section,
    when,
)
from agent.chatops.ownership_text import handover_snippet, ownership_text
from agent.chatops.policy_offer import policy_offer_texts
from agent.model.incident import (
    Decision,
    IncidentSummary,
    TimelineEvent,
)
from agent.model.lifecycle import DECISION_STATUS, DecisionOutcome, EventKind, IncidentStatus
from agent.model.proposal import ProposedFix
from agent.model.stored import StoredDiagnosis, StoredFlow, StoredWaste
from agent.model.verdict import Verdict
from agent.model.workload import JobKind

FLOWS_LISTED = 8  # denied flows listed one per line; more are grouped

ENABLE_APPROVALS = (
    "Approvals are off: no approvers are configured. Set `slack.approvers.users` or "
    "`slack.approvers.usergroups` in the agent's config to approve fixes from Slack."
)


DECIDABLE = frozenset({IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL})


@dataclass(frozen=True)
class Utilization:
    """GPU utilization now and its baseline, in percent (None when unknown)."""

    now: float | None
    baseline: float | None


# --------------------------------------------------------------------------------------------
# findings


_VERDICT_TITLE: dict[Verdict, str] = {
    Verdict.ZONE_SPLIT_BLOCKED: "Zone split, traffic blocked",
    Verdict.ZONE_SPLIT_DEGRADED: "Zone split, training slowed",
    Verdict.POLICY_BLOCKED: "Blocked by network policy",
    Verdict.ZONE_LABEL_MISMATCH: "Zone label disagrees with the node's zone",
    Verdict.GPU_UTILIZATION_DROP: "GPU utilization dropped",
    Verdict.ALERT: "Alert",
    Verdict.PENDING: "Pending",
    Verdict.HEALTHY: "Healthy",
}

_DECIDED: dict[DecisionOutcome, str] = {
    DecisionOutcome.APPROVE: "Approved",
    DecisionOutcome.REJECT: "Rejected",
    DecisionOutcome.SNOOZE: "Snoozed",
}


def _zones_line(diagnosis: StoredDiagnosis) -> str | None:
    zones = diagnosis.zones
    if not zones:
        return None
    coordinator = diagnosis.coordinator
    coord_zone = coordinator.zone if coordinator is not None else None
    coord_pod = coordinator.pod if coordinator is not None else None
    parts = []
    for zone, count in sorted(zones.items(), key=lambda kv: str(kv[0])):
        plural = "pod" if count == 1 else "pods"
        mark = f" (coordinator `{mrkdwn_escape(str(coord_pod))}`)" if zone == coord_zone else ""
        parts.append(f"`{mrkdwn_escape(str(zone))}`: {count} {plural}{mark}")
    return "*Pods per zone:* " + " · ".join(parts)


def _policies(flow: StoredFlow) -> str:
    return ", ".join(flow.policies) or "no policy allows it"


def _flow_line(flow: StoredFlow) -> str:
    return (
        f"`{flow.from_pod}` → `{flow.to_pod}` {flow.protocol}/"
        f"{flow.port} denied at {flow.hop} ({flow.reason}) by {_policies(flow)}"
    )


def denied_flows_text(diagnosis: StoredDiagnosis) -> str | None:
    """Each denied flow on its own line, or (many) grouped by hop, reason and policy."""
    flows = diagnosis.denied_flows
    if not flows:
        return None
    stored_total = diagnosis.denied_flows_total
    total = (stored_total if stored_total is not None and stored_total >= len(flows)
             else len(flows))  # fmt: skip
    title = f"*Denied flows ({total}):*"
    if len(flows) <= FLOWS_LISTED:
        lines = [f"• {mrkdwn_escape(_flow_line(f))}" for f in flows]
    else:
        groups: dict[tuple[str, str, str], list[StoredFlow]] = {}
        for f in flows:
            groups.setdefault((f.hop, f.reason, _policies(f)), []).append(f)
        lines = []
        for (hop, reason, policies), members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            example = members[0]
            lines.append(mrkdwn_escape(
                f"• {len(members)} flow(s) denied at {hop} ({reason}) by {policies}; e.g. "
                f"{example.from_pod} → {example.to_pod} {example.protocol}/{example.port}"
            ))
    if total > len(flows):
        lines.append(f"_… and {total - len(flows)} more not listed_")
    return fit_lines(title, lines)


def trust_text(diagnosis: StoredDiagnosis) -> str | None:
    """What the verdict rests on that may be wrong: lying zone labels, unreadable policies that
    may select the job, features of deciding rules that are not modelled exactly."""
    lines: list[str] = []
    for m in diagnosis.mislabelled:
        lines.append(mrkdwn_escape(
            f"• pod {m.pod}: {m.label}={m.value}, its node is in {m.node_zone}"
        ))  # fmt: skip
    for u in diagnosis.uncertain:
        where = f" ({u.field})" if u.field else ""
        lines.append(mrkdwn_escape(
            f"• uncertain: {u.policy} cannot be read{where}: {u.problem}"
        ))  # fmt: skip
    for c in diagnosis.caveats:
        lines.append(mrkdwn_escape(f"• caveat: {c.policy} uses {c.feature}"))
    if not lines:
        return None
    return fit_lines("*Notes:*", lines)


def waste_text(waste: StoredWaste | None) -> str | None:
    """The finding's waste per day (`waste`, computed with the diagnosis): GPU-hours and
    cross-zone egress dollars, each with its basis, or "unknown" and why. The egress basis says
    whether the figure was measured (by which exporter, over which window) or estimated; a
    figure recorded before bases were labelled is said to be an estimate."""
    if waste is None:
        return None
    parts = []
    hours = waste.gpu_hours_per_day
    hours_basis = mrkdwn_escape(str(waste.gpu_hours_basis or ""))
    if hours is not None:
        parts.append(f"~{hours:,.1f} GPU-hours/day ({hours_basis})")
    else:
        parts.append(f"GPU-hours/day {hours_basis or 'unknown'}")
    dollars = waste.egress_usd_per_day
    egress_basis = mrkdwn_escape(str(waste.egress_basis or ""))
    if dollars is not None:
        if not egress_basis.startswith(("measured", "estimated", "none")):
            egress_basis = f"estimated: {egress_basis}"
        parts.append(f"cross-zone egress ${dollars:,.2f}/day ({egress_basis})")
    else:
        parts.append(f"cross-zone egress $/day {egress_basis or 'unknown'}")
    return "*Waste:* " + "; ".join(parts)


def _utilization_line(utilization: Utilization) -> str | None:
    if utilization.now is None:
        return None
    base = f" (baseline {utilization.baseline:.0f}%)" if utilization.baseline is not None else ""
    return f"*GPU utilization:* {utilization.now:.0f}% now{base}"


def _fix_text(
    incident: IncidentSummary, diagnosis: StoredDiagnosis, fix: ProposedFix | None
) -> str:
    if fix is not None and fix.refusal is not None:
        zone = fix.target_zone or incident.target_zone or diagnosis.target_zone
        return (f"*The fix cannot be applied:* {mrkdwn_escape(fix.refusal)}\n"
                f"zonemedic changes nothing and asks no approval. The fix (co-location in zone "
                f"`{mrkdwn_escape(str(zone))}`) is planned again when the job is re-detected elsewhere; Reject or "
                "Snooze meanwhile.")  # fmt: skip
    if fix is not None and fix.summary:
        return f"*Proposed fix:* {mrkdwn_escape(fix.summary)}"
    target = incident.target_zone or diagnosis.target_zone
    if incident.verdict is Verdict.ZONE_LABEL_MISMATCH:
        return (
            f"*Proposed fix:* relabel the pod template(s): the zone-mirroring label must be "
            f"`{target}`, the zone the pods run in (pinned there). Fix the manifests a GitOps "
            "sync or `kubectl apply` uses as well, or the next sync puts the wrong label back."
        )
    return (
        f"*Proposed fix:* restart the job co-located in zone `{mrkdwn_escape(str(target))}`: "
        "a nodeAffinity on "
        "`topology.kubernetes.io/zone`, and a toleration so the coordinator may land on the GPU "
        "nodes there."
    )


def kueue_block(proposal: str, *, incident_id: int) -> str:
    """The Kueue configuration a finding proposes (YAML), in a code block cut like a diff."""
    return diff_block(proposal, incident_id=incident_id, title="*Kueue configuration to add:*",
                      noun="configuration")


def _preconditions_text(fix: ProposedFix) -> str | None:
    pre = fix.preconditions
    if not pre:
        return None
    placement = pre.get("placement")
    pods = len(placement) if isinstance(placement, Mapping) else 0
    what = "Previewed before approval" if fix.preview else "Planned"
    return mrkdwn_escape(
        f"{what} from {_planned_from(fix)}, verdict {pre.get('verdict')}, {pods} pod(s) "
        "placed as diagnosed; re-read and re-checked before any change"
    )


def _planned_from(fix: ProposedFix) -> str:
    """The identity the plan was computed from: the job's uid and resourceVersion, or (a generic
    group has no uid of its own) those of each object it changes."""
    pre = fix.preconditions
    if pre.get("uid") or not fix.objects:
        return (f"uid {pre.get('uid') or '-'}, resourceVersion "
                f"{pre.get('resource_version') or '-'}")  # fmt: skip
    return "; ".join(
        f"{o.kind} {o.namespace}/{o.name} (uid {o.uid or '-'}, resourceVersion "
        f"{o.resource_version or '-'})"
        for o in fix.objects
    )


def _not_remediable(diagnosis: StoredDiagnosis) -> str:
    why = "; ".join(diagnosis.reasons) or "no single zone can hold the whole job"
    policies = sorted({p for f in diagnosis.denied_flows for p in f.policies})
    if diagnosis.verdict is Verdict.ZONE_LABEL_MISMATCH:
        advice = ("set the zone-mirroring label of the pod template(s) to the node's zone (in "
                  "the manifests a GitOps sync applies too) before changing any policy")
    elif diagnosis.verdict is Verdict.POLICY_BLOCKED and policies:
        advice = (f"change {', '.join(policies[:5])} to allow the job's own traffic; "
                  "co-location does not help")
    elif diagnosis.kueue is not None:
        advice = (f"{diagnosis.kueue.message}. Add the Kueue configuration below; Kueue then "
                  "re-queues the job (it may wait for quota)")
    else:
        advice = ("make room for the whole job in one zone, or schedule it with Kueue "
                  "Topology Aware Scheduling (a zone-level topology request)")
    return (mrkdwn_escape(f"Not remediable automatically: {why}.")
            + f"\n*Recommendation:* {mrkdwn_escape(advice)}")


def refused_advice(reason: str) -> str:
    """What a person does about a fix zonemedic refused to apply, by what refused it."""
    low = reason.lower()
    if "kueue" in low or "managed by" in low:
        return ("schedule the job with Kueue Topology Aware Scheduling (a zone-level topology "
                "request on its pod sets) so Kueue admits it in one zone; zonemedic never "
                "suspends or rewrites what Kueue or another controller manages")
    if "protected" in low:
        return ("co-locate it by hand or ask the namespace's owners to (a node selector or "
                "affinity on the zone key in its pod templates); zonemedic never touches a "
                "protected namespace")
    if "finished" in low:
        return "nothing to move: submit the job again and it is diagnosed afresh"
    return ("co-locate the job by hand (a node selector on the zone key in its pod templates), "
            "or make room for the whole job in one zone and zonemedic proposes the fix again")


def refused_text(reason: str) -> str:
    """The message's section for an incident whose approved fix was refused."""
    return (f"🚫 *Not fixed automatically:* {mrkdwn_escape(reason)}\n"
            f"*What to do:* {mrkdwn_escape(refused_advice(reason))}\n"
            "_This incident stays open and follows the job: it ends when the job is healthy; a "
            "new one opens only for a new problem._")


def _decision_text(incident: IncidentSummary, decision: Decision | None,
                   snoozed_until: datetime | None) -> str:
    words = STATUS_WORDS[incident.status]
    if decision is not None and incident.status not in DECIDABLE:
        who = decision.actor_name or decision.actor_id
        text = (f"*{_DECIDED[decision.outcome]}* by {mrkdwn_escape(who)} at "
                f"{when(decision.decided_at)}")  # fmt: skip
        if incident.status is IncidentStatus.SNOOZED and snoozed_until is not None:
            text += f" until {when(snoozed_until)}"
        if incident.status is not DECISION_STATUS[decision.outcome]:
            text += f" · now *{words}*"
        return text
    by = f" by {mrkdwn_escape(incident.status_by)}" if incident.status_by else ""
    return f"Status: *{words}*{by}"


def incident_message(
    incident: IncidentSummary,
    diagnosis: StoredDiagnosis,
    *,
    fix: ProposedFix | None = None,
    utilization: Utilization | None = None,
    approvals_enabled: bool,
    proposed: bool = True,
    decision: Decision | None = None,
    snoozed_until: datetime | None = None,
    waste: StoredWaste | None = None,
    refused: str | None = None,
) -> Rendered:
    """The finding's message: verdict and job, zones, denied flows, utilization, waste, the fix and
    its patch, and the decision buttons (or the decision, once made). `proposed`: a playbook
    proposed the fix (only then is there an Approve button; a notification alone has none).
    `waste`: the latest estimate (evidence may refine the finding's own). `refused`: why the
    approved fix was refused (the incident is `refused`): said with what to do instead."""
    utilization = utilization or Utilization(incident.utilization_before, None)
    title = _VERDICT_TITLE.get(incident.verdict, incident.verdict.value)
    reverted = fix.reverted if fix is not None else None
    if reverted is not None:  # named by the revert: "Fix reverted by argocd-controller"
        said = reverted.title()
        title = said[:1].upper() + said[1:]
    job = job_label(incident)
    blocks: list[dict[str, Any]] = [header(f"{title}: {job}")]
    facts = [f"*Incident* #{incident.id} · *verdict* `{incident.verdict.value}` · "
             f"*severity* {incident.severity.value} · opened {when(incident.opened_at)}"]
    zones = _zones_line(diagnosis)
    if zones:
        facts.append(zones)
    util = _utilization_line(utilization)
    if util:
        facts.append(util)
    wasted = waste_text(waste if waste is not None else diagnosis.waste)
    if wasted:
        facts.append(wasted)
    blocks.append(section("\n".join(facts)))
    handover = [ownership_text(fix, incident_id=incident.id),
                handover_snippet(fix, incident_id=incident.id)]
    if reverted is not None:  # a fix undone leads with the change for the source
        blocks.extend(section(text) for text in handover if text)
    flows = denied_flows_text(diagnosis)
    if flows:
        blocks.append(section(flows))
    trust = trust_text(diagnosis)
    if trust:
        blocks.append(section(trust))
    remediable = diagnosis.remediable
    applicable = remediable and (fix is None or fix.applicable)
    if remediable:
        blocks.append(section(_fix_text(incident, diagnosis, fix)))
        if fix is not None and fix.applicable and fix.diff:
            blocks.append(section(diff_block(fix.diff, incident_id=incident.id)))
            pre = _preconditions_text(fix)
            if pre:
                blocks.append(context(pre))
        if reverted is None:
            blocks.extend(section(text) for text in handover if text)
    elif incident.verdict in (Verdict.ZONE_SPLIT_BLOCKED, Verdict.ZONE_SPLIT_DEGRADED,
                              Verdict.POLICY_BLOCKED, Verdict.ZONE_LABEL_MISMATCH):
        blocks.append(section(_not_remediable(diagnosis)))
        if diagnosis.kueue is not None:
            blocks.append(section(kueue_block(diagnosis.kueue.proposal, incident_id=incident.id)))
        if diagnosis.policy_fix is not None:
            blocks.extend(section(text) for text in
                          policy_offer_texts(diagnosis.policy_fix, incident_id=incident.id))
    if incident.status is IncidentStatus.REFUSED:
        blocks.append(section(refused_text(refused or "a guard refused the approved fix")))
    tail: list[dict[str, Any]] = []
    value = str(incident.id)
    if incident.status in DECIDABLE:
        if not approvals_enabled:
            tail.append(context(ENABLE_APPROVALS))
        else:
            buttons = []
            if applicable and proposed:
                buttons.append(button("Approve", action=ButtonAction.APPROVE, value=value,
                                      style="primary"))
            buttons.append(button("Reject", action=ButtonAction.REJECT, value=value,
                                  style="danger"))
            buttons.append(button("Snooze 24h", action=ButtonAction.SNOOZE, value=value))
            tail.append({"type": "actions", "block_id": "decision", "elements": buttons})
    else:
        tail.append(context(_decision_text(incident, decision, snoozed_until)))
    status = STATUS_WORDS[incident.status]
    text = f"zonemedic #{incident.id} [{status}]: {title} for {job}"
    if incident.target_zone and applicable:
        text += f"; proposed fix: co-locate in {incident.target_zone}"
    if incident.status is IncidentStatus.REFUSED:
        text += f"; not fixed automatically: {refused or 'a guard refused the approved fix'}"
    elif remediable and fix is not None and fix.refusal is not None:
        text += f"; the fix cannot be applied: {fix.refusal}"
    return Rendered(text=fallback(text), blocks=cap_blocks([*blocks, *tail], keep_last=len(tail)))


# --------------------------------------------------------------------------------------------
# thread updates


def _pct(value: Any) -> str | None:
    return f"{float(value):.0f}%" if isinstance(value, int | float) else None


def _reason(detail: Mapping[str, Any]) -> str:
    for key in ("reason", "message", "error"):
        value = detail.get(key)
        if value:
            return f": {value}"
    return ""


_STEP_WORDS = {
    "planned": "Plan recorded",
    "dry_run": "Dry run passed",
    "suspending": "Suspending the job with the co-location patch",
    "suspended": "Job suspended with the co-location patch",
    "pods_gone": "Old pods gone",
    "patching": "Applying the co-location patch",
    "patched": "Co-location patch applied",
    "resumed": "Job resumed",
    "rolling_out": "Patching the Deployment's template",
    "rolled_out": "Deployment rolled out",
    "job_deleting": "Deleting the Job for recreation",
    "job_deleted": "Job deleted for recreation",
    "job_created": "Job recreated",
    "rollback_started": "Rolling back",
    "restoring": "Restoring",
    "rollback_reactivated": "Workload reactivated",
    "rollback_deactivated": "Workload deactivated for the rollback",
    "rollback_pods_gone": "Pods gone for the restore",
    "rollback_restored": "Original templates restored",
    "rollback_renewed": "Child Jobs renewed from the restored templates",
    "rollback_requeued": "Workload deleted: Kueue rebuilds it as before",
    "rolled_back": "Rolled back",
    # older or other recorders
    "suspend": "Job suspended",
    "resume": "Job resumed",
    "apply": "Patch applied",
    "rollback": "Rolled back",
}
# A generic group (Deployments and batch Jobs) records `resumed` once every workload outside the
# zone moved: no Job was suspended, so no Job resumes.
_GROUP_STEP_WORDS = {"resumed": "Workloads moved"}
# A TrainJob or a JobSet is suspended first and patched once its pods are gone (the JobSet refuses
# the templates' change before).
_SUSPEND_FIRST_KINDS = frozenset({JobKind.TRAINJOB.value, JobKind.JOBSET.value})
_SUSPEND_FIRST_STEP_WORDS = {"suspending": "Suspending the job", "suspended": "Job suspended"}
_FAILED_WORDS = {"dry_run": "Dry run"}


def _until(value: Any) -> str:
    """A snooze's end as people read it (the recorded ISO timestamp, in UTC to the minute)."""
    try:
        return when(datetime.fromisoformat(str(value)))
    except ValueError:
        return str(value)


def thread_update(event: TimelineEvent) -> Rendered | None:
    """The thread reply telling one step of the incident's story, or None for events the thread
    does not show (detection, posting, notes)."""
    d = event.detail
    who = event.actor or "zonemedic"
    text: str | None = None
    kind = event.kind
    if kind is EventKind.APPROVED:
        text = f"✅ Approved by {who}"
    elif kind is EventKind.REJECTED:
        text = f"✋ Rejected by {who}{_reason(d)}"
    elif kind is EventKind.SNOOZED:
        until = d.get("snoozed_until")
        text = f"💤 Snoozed by {who}" + (f" until {_until(until)}" if until else "")
    elif kind is EventKind.EXPIRED:
        text = f"⌛ Approval expired{_reason(d)}"
    elif kind is EventKind.REMEDIATION_STARTED:
        text = "🛠️ Remediation started"
    elif kind is EventKind.REMEDIATION_STEP:
        step = str(d.get("step") or d.get("action") or "step")
        ok = d.get("succeeded")
        words = _STEP_WORDS.get(step, step.replace("_", " ").capitalize())
        if d.get("job_kind") == JobKind.GROUP.value:
            words = _GROUP_STEP_WORDS.get(step, words)
        elif d.get("job_kind") in _SUSPEND_FIRST_KINDS:
            words = _SUSPEND_FIRST_STEP_WORDS.get(step, words)
        zone = d.get("zone") or d.get("target_zone")
        if step in ("bound", "colocated", "co_located"):
            words = f"Pods co-located in zone {zone}" if zone else "Pods co-located"
        if ok is False:
            text = f"❌ {_FAILED_WORDS.get(step, words)} failed{_reason(d)}"
        else:
            text = f"• {words}" + (f" ({d['message']})" if d.get("message") else "")
    elif kind is EventKind.VERIFYING:
        text = "🔎 Verifying: waiting for the pods to land together and utilization to recover"
    elif kind is EventKind.VERIFIED:
        before, after = _pct(d.get("utilization_before")), _pct(d.get("utilization_after"))
        zone = d.get("zone") or d.get("target_zone")
        parts = ["✔️ Verified"]
        if zone:
            parts.append(f"pods co-located in zone {zone}")
        if before and after:
            parts.append(f"GPU utilization {before} → {after}")
        text = ": ".join(parts[:1]) + (": " + ", ".join(parts[1:]) if len(parts) > 1 else "")
    elif kind is EventKind.RESOLVED:
        before, after = _pct(d.get("utilization_before")), _pct(d.get("utilization_after"))
        util = f" (GPU utilization {before} → {after})" if before and after else ""
        text = f"🎉 Resolved{_reason(d)}{util}"
    elif kind is EventKind.ROLLED_BACK:
        text = f"↩️ Rolled back{_reason(d)}"
    elif kind is EventKind.FAILED:
        text = f"❌ Remediation failed{_reason(d)}"
    elif kind is EventKind.SUPERSEDED:
        text = f"ℹ️ No longer current{_reason(d)}"
    elif kind is EventKind.REFUSED:
        reason = str(d.get("reason") or "a guard refused the approved fix")
        text = (f"🚫 Not fixed automatically: {reason}. What to do: {refused_advice(reason)}. "
                "This incident stays open until the job is healthy.")
    if text is None:
        return None
    safe = mrkdwn_escape(text)
    return Rendered(text=fallback(safe), blocks=[section(safe)])


THREAD_EVENTS = frozenset({
    EventKind.APPROVED, EventKind.REJECTED, EventKind.SNOOZED, EventKind.EXPIRED,
    EventKind.REMEDIATION_STARTED, EventKind.REMEDIATION_STEP, EventKind.VERIFYING,
    EventKind.VERIFIED, EventKind.RESOLVED, EventKind.ROLLED_BACK, EventKind.FAILED,
    EventKind.SUPERSEDED, EventKind.REFUSED,
})

# Events after which the original message is re-rendered (its buttons become the decision).
REFRESH_EVENTS = frozenset({*THREAD_EVENTS, EventKind.REDETECTED, EventKind.AWAITING_APPROVAL,
                            EventKind.PLAN_PREVIEWED})
