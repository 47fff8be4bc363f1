"""Rendering incidents, thread updates, digests and slash replies as Block Kit: table tests,
including Slack's limits at their edges."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agent.chatops.blocks import (
    MAX_BLOCKS,
    MAX_BUTTON_TEXT,
    MAX_HEADER,
    MAX_SECTION,
    ButtonAction,
    Rendered,
    button,
    cap_blocks,
    clip,
    context,
)
from agent.chatops.render import (
    ENABLE_APPROVALS,
    Utilization,
    denied_flows_text,
    diff_block,
    incident_message,
    thread_update,
    waste_text,
)
from agent.chatops.replies import (
    detail_reply,
    digest_message,
    help_reply,
    listing_reply,
    stats_reply,
)
from agent.model.admission import AdmissionSummary
from agent.model.incident import (
    Decision,
    IncidentDetail,
    IncidentListing,
    IncidentStats,
    IncidentSummary,
    TimelineEvent,
)
from agent.model.lifecycle import (
    DecisionOutcome,
    DecisionSource,
    EventKind,
    IncidentStatus,
    Severity,
)
from agent.model.proposal import PlannedObject, ProposedFix
from agent.model.stored import StoredDiagnosis, StoredWaste
from agent.model.verdict import Verdict

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
S = IncidentStatus


def summary(**changes: Any) -> IncidentSummary:
    base = IncidentSummary(
        id=7, cluster="prod", kind="PyTorchJob", namespace="ml", name="resnet", uid="u1",
        verdict=Verdict.ZONE_SPLIT_BLOCKED, status=S.AWAITING_APPROVAL,
        severity=Severity.CRITICAL, fingerprint="f", target_zone="zone-a", opened_at=T0,
        updated_at=T0, closed_at=None, status_by=None, utilization_before=None,
        utilization_after=None, estimated_cost=None, gpus=4, detections=1,
    )
    return dataclasses.replace(base, **changes)


def flow(i: int, *, policy: str = "CiliumNetworkPolicy/ml/zone-b-only", hop: str = "ingress") -> dict[str, Any]:
    return {"from_pod": f"resnet-worker-{i}", "to_pod": "resnet-master-0", "port": 23456,
            "protocol": "TCP", "hop": hop, "reason": "default_deny", "policies": [policy]}


def diagnosis(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "job": {"kind": "PyTorchJob", "namespace": "ml", "name": "resnet"},
        "verdict": "zone_split_blocked",
        "zones": {"zone-a": 3, "zone-b": 1},
        "coordinator": {"pod": "resnet-master-0", "zone": "zone-b"},
        "denied_flows": [flow(0), flow(1)],
        "denied_flows_total": 2,
        "remediable": True,
        "target_zone": "zone-a",
        "reasons": [],
        "impact": {"gpus_total": 4, "gpus_outside_target": 1, "gpu_share_outside_target": 0.25,
                   "pods_outside_target": 1, "cross_zone_cost_per_step_usd": 0.005},
        "waste": {"gpu_hours_per_day": 96.0,
                  "gpu_hours_basis": "training blocked: 4 GPU(s) idle x 24 h",
                  "egress_usd_per_day": 0.0,
                  "egress_basis": "none while blocked: no training step completes"},
    }
    base.update(changes)
    return base


def all_text(r: Rendered) -> str:
    return r.text + "\n" + json.dumps(r.blocks, ensure_ascii=False)


def buttons(r: Rendered) -> list[dict[str, Any]]:
    return [e for b in r.blocks if b["type"] == "actions" for e in b["elements"]]


def assert_within_limits(r: Rendered) -> None:
    assert len(r.blocks) <= MAX_BLOCKS
    assert len(r.text) <= 3000
    for b in r.blocks:
        if b["type"] == "section":
            assert len(b["text"]["text"]) <= MAX_SECTION
        if b["type"] == "header":
            assert len(b["text"]["text"]) <= MAX_HEADER
        for e in b.get("elements", []):
            if e.get("type") == "button":
                assert len(e["text"]["text"]) <= MAX_BUTTON_TEXT
                assert len(e["value"]) <= 2000


@pytest.mark.parametrize(
    ("name", "incident", "diag", "approvals", "expect_actions", "must", "must_not"),
    [
        ("remediable, approvers", summary(), diagnosis(), True,
         [ButtonAction.APPROVE, ButtonAction.REJECT, ButtonAction.SNOOZE],
         ["Zone split, traffic blocked", "PyTorchJob ml/resnet", "`zone-b`: 1 pod (coordinator `resnet-master-0`)",
          "denied at ingress (default_deny) by CiliumNetworkPolicy/ml/zone-b-only",
          "~96.0 GPU-hours/day (training blocked: 4 GPU(s) idle x 24 h)",
          "cross-zone egress $0.00/day (none while blocked",
          "co-located in zone `zone-a`"],
         [ENABLE_APPROVALS]),
        ("not remediable: reason and recommendation, no Approve", summary(),
         diagnosis(remediable=False, reasons=["zone-a has 2 GPUs free, the job needs 4"]), True,
         [ButtonAction.REJECT, ButtonAction.SNOOZE],
         ["Not remediable automatically: zone-a has 2 GPUs free, the job needs 4",
          "Kueue Topology Aware Scheduling"], ["Proposed fix"]),
        ("policy blocked: change the policy", summary(verdict=Verdict.POLICY_BLOCKED),
         diagnosis(verdict="policy_blocked", remediable=False), True,
         [ButtonAction.REJECT, ButtonAction.SNOOZE],
         ["change CiliumNetworkPolicy/ml/zone-b-only to allow"], ["Kueue"]),
        ("notified, not proposed: no Approve", summary(status=S.OPEN), diagnosis(), "notify-only",
         [ButtonAction.REJECT, ButtonAction.SNOOZE], ["co-located in zone `zone-a`"], []),
        ("no approvers: no buttons, says how", summary(), diagnosis(), False, [],
         [ENABLE_APPROVALS.replace("`", "")[:20]], []),
        ("decided: buttons replaced by the decision", summary(status=S.APPROVED, status_by="alice"),
         diagnosis(), True, [], ["*Approved* by alice"], [ENABLE_APPROVALS]),
        ("a lying zone label: relabel, with the lying pod and what may be uncertain",
         summary(verdict=Verdict.ZONE_LABEL_MISMATCH),
         diagnosis(verdict="zone_label_mismatch", zones={"zone-a": 4},
                   mislabelled_pods=[{"pod": "resnet-master-0", "label": "zone", "value": "zone-b",
                                      "node_zone": "zone-a"}],
                   uncertain=[{"policy": "CiliumNetworkPolicy/ml/new", "field": "spec.x",
                               "problem": "unknown field"}],
                   caveats=[{"policy": "CiliumNetworkPolicy/ml/mtls",
                             "feature": "authentication.mode: required", "detail": "d"}]),
         True, [ButtonAction.APPROVE, ButtonAction.REJECT, ButtonAction.SNOOZE],
         ["Zone label disagrees with the node's zone", "relabel the pod template(s)",
          "pod resnet-master-0: zone=zone-b, its node is in zone-a",
          "uncertain: CiliumNetworkPolicy/ml/new cannot be read (spec.x): unknown field",
          "caveat: CiliumNetworkPolicy/ml/mtls uses authentication.mode: required",
          "GitOps"], ["co-located in zone"]),
        ("a lying zone label not fixed by relabelling alone", summary(verdict=Verdict.ZONE_LABEL_MISMATCH),
         diagnosis(verdict="zone_label_mismatch", remediable=False), True,
         [ButtonAction.REJECT, ButtonAction.SNOOZE],
         ["set the zone-mirroring label of the pod template(s) to the node's zone"], ["Kueue"]),
    ],
)
def test_incident_message(
    name: str, incident: IncidentSummary, diag: dict[str, Any], approvals: bool | str,
    expect_actions: list[ButtonAction], must: list[str], must_not: list[str],
) -> None:
    decision = None
    if incident.status is S.APPROVED:
        decision = Decision(1, incident.id, DecisionOutcome.APPROVE, "U1", "alice",
                            DecisionSource.SLACK, T0, None, "ml/resnet")
    r = incident_message(incident, StoredDiagnosis.from_stored(diag), approvals_enabled=bool(approvals),
                         proposed=approvals != "notify-only", decision=decision)
    text = all_text(r)
    for piece in must:
        assert piece.replace("`", "") in text.replace("`", ""), (name, piece)
    for piece in must_not:
        assert piece not in text, (name, piece)
    assert [b["action_id"] for b in buttons(r)] == [a.value for a in expect_actions], name
    assert all(b["value"] == str(incident.id) for b in buttons(r)), "value: the incident id only"
    assert_within_limits(r)


def decision(outcome: DecisionOutcome) -> Decision:
    return Decision(1, 7, outcome, "U1", "dana", DecisionSource.SLACK, T0, None, "ml/resnet")


@pytest.mark.parametrize(
    ("status", "outcome", "snoozed_until", "expected"),
    [
        (S.APPROVED, DecisionOutcome.APPROVE, None, "*Approved* by dana at 2026-11-30 12:00 UTC"),
        (S.REMEDIATING, DecisionOutcome.APPROVE, None,
         "*Approved* by dana at 2026-11-30 12:00 UTC · now *remediating*"),
        (S.REJECTED, DecisionOutcome.REJECT, None, "*Rejected* by dana at 2026-11-30 12:00 UTC"),
        (S.SNOOZED, DecisionOutcome.SNOOZE, T0 + timedelta(days=1),
         "*Snoozed* by dana at 2026-11-30 12:00 UTC until 2026-12-01 12:00 UTC"),
        (S.EXPIRED, DecisionOutcome.SNOOZE, None,
         "*Snoozed* by dana at 2026-11-30 12:00 UTC · now *expired*"),
    ],
)
def test_the_decision_replaces_the_buttons_in_words(
    status: IncidentStatus, outcome: DecisionOutcome, snoozed_until: datetime | None, expected: str
) -> None:
    r = incident_message(summary(status=status), StoredDiagnosis.from_stored(diagnosis()), approvals_enabled=True,
                         decision=decision(outcome), snoozed_until=snoozed_until)
    assert r.blocks[-1] == context(expected)
    assert buttons(r) == []


def test_utilization_now_vs_baseline_is_shown() -> None:
    incident = summary(verdict=Verdict.ZONE_SPLIT_DEGRADED)
    r = incident_message(incident, StoredDiagnosis.from_stored(diagnosis(verdict="zone_split_degraded")),
                         utilization=Utilization(now=40.0, baseline=85.0), approvals_enabled=True)
    assert "40% now (baseline 85%)" in all_text(r)


@pytest.mark.parametrize(
    ("waste", "expected"),
    [
        ({"gpu_hours_per_day": 43.2, "gpu_hours_basis": "4 GPU(s) x (85% baseline - 40% now) x 24 h",
          "egress_usd_per_day": 12.5, "egress_source": "estimated", "egress_basis":
              "estimated from diagnosis.steps_per_day: 0.5 GB/step x 1,250 steps/day x $0.01/GB"},
         "*Waste:* ~43.2 GPU-hours/day (4 GPU(s) x (85% baseline - 40% now) x 24 h); "
         "cross-zone egress $12.50/day (estimated from diagnosis.steps_per_day: 0.5 GB/step x "
         "1,250 steps/day x $0.01/GB)"),
        ({"gpu_hours_per_day": 43.2, "gpu_hours_basis": "4 GPU(s) x (85% baseline - 40% now) x 24 h",
          "egress_usd_per_day": 6.048, "cross_zone_gb_per_day": 302.4, "egress_source": "measured",
          "egress_measured_by": "beyla", "egress_basis":
              "measured by Beyla over the last 1h: 302 GB/day x $0.01/GB each way"},
         "*Waste:* ~43.2 GPU-hours/day (4 GPU(s) x (85% baseline - 40% now) x 24 h); "
         "cross-zone egress $6.05/day (measured by Beyla over the last 1h: 302 GB/day x $0.01/GB "
         "each way)"),
        # recorded before bases were labelled: an estimate, said so
        ({"gpu_hours_per_day": None, "gpu_hours_basis": "unknown: no utilization baseline",
          "egress_usd_per_day": 12.5, "egress_basis": "0.5 GB/step x 1,250 steps/day x $0.01/GB"},
         "*Waste:* GPU-hours/day unknown: no utilization baseline; "
         "cross-zone egress $12.50/day (estimated: 0.5 GB/step x 1,250 steps/day x $0.01/GB)"),
        ({"gpu_hours_per_day": None, "gpu_hours_basis": "unknown: no utilization baseline",
          "egress_usd_per_day": None, "egress_basis": "unknown: no step rate"},
         "*Waste:* GPU-hours/day unknown: no utilization baseline; "
         "cross-zone egress $/day unknown: no step rate"),
        (None, None),
    ],
)
def test_waste_text(waste: dict[str, Any] | None, expected: str | None) -> None:
    assert waste_text(StoredWaste.from_stored(waste) if waste is not None else None) == expected


def test_the_latest_waste_estimate_replaces_the_findings() -> None:
    diag = diagnosis(waste={"gpu_hours_per_day": None, "gpu_hours_basis": "not measured yet: no "
                            "utilization sample of the job yet", "egress_usd_per_day": None,
                            "egress_basis": "unknown: set diagnosis.bytes_per_step"})
    first = all_text(incident_message(summary(), StoredDiagnosis.from_stored(diag), approvals_enabled=True))
    assert "GPU-hours/day not measured yet: no utilization sample of the job yet" in first
    later = {**diag["waste"], "gpu_hours_per_day": 57.6,
             "gpu_hours_basis": "4 GPU(s) x 60% idle now x 24 h; no pre-split baseline, so an upper bound"}
    text = all_text(incident_message(summary(), StoredDiagnosis.from_stored(diag), approvals_enabled=True,
                                         waste=StoredWaste.from_stored(later)))
    assert ("~57.6 GPU-hours/day (4 GPU(s) x 60% idle now x 24 h; no pre-split baseline, so an "
            "upper bound); cross-zone egress $/day unknown: set diagnosis.bytes_per_step") in text
    assert "not measured yet" not in text


def test_refused_fix_says_why_and_offers_no_approve() -> None:
    fix = ProposedFix(summary="the fix cannot be applied: zone zone-a has no room",
                      refusal="zone zone-a has no room for resnet-worker-0 (nvidia.com/gpu)",
                      target_zone="zone-a")
    r = incident_message(summary(), StoredDiagnosis.from_stored(diagnosis()), fix=fix,
                         approvals_enabled=True)
    text = all_text(r)
    assert "The fix cannot be applied:* zone zone-a has no room for resnet-worker-0" in text
    assert "*Patch:*" not in text
    assert [b["action_id"] for b in buttons(r)] == [ButtonAction.REJECT.value,
                                                    ButtonAction.SNOOZE.value]
    assert "the fix cannot be applied" in r.text


def test_planned_fix_shows_words_diff_and_preconditions_with_approve() -> None:
    diff = "# PyTorchJob ml/resnet: suspend\n--- a\n+++ b\n+nodeSelector:\n+  zone: zone-a"
    fix = ProposedFix(summary="co-locate the job in zone zone-a: suspend PyTorchJob ml/resnet",
                      diff=diff, target_zone="zone-a",
                      preconditions={"uid": "u1", "resource_version": "42",
                                     "verdict": "zone_split_blocked",
                                     "placement": {"resnet-master-0": "zone-b"}})
    r = incident_message(summary(), StoredDiagnosis.from_stored(diagnosis()), fix=fix,
                         approvals_enabled=True)
    text = all_text(r)
    assert "*Proposed fix:* co-locate the job in zone zone-a" in text
    assert "```# PyTorchJob ml/resnet: suspend" in text and "+  zone: zone-a```" in text
    assert "Previewed before approval from uid u1, resourceVersion 42" in text
    assert buttons(r)[0]["action_id"] == ButtonAction.APPROVE.value


def test_a_group_plan_names_the_objects_it_was_planned_from() -> None:
    """A generic group has no job uid: the preview names each object it changes instead."""
    fix = ProposedFix(summary="co-locate the job in zone zone-a: patch Deployment ml/coord",
                      diff="--- a\n+++ b", target_zone="zone-a",
                      preconditions={"uid": None, "resource_version": None,
                                     "verdict": "zone_split_blocked",
                                     "placement": {"coord-1": "zone-b", "w-1": "zone-a"}},
                      objects=(PlannedObject("Deployment", "ml", "coord", "d-uid", "28"),
                               PlannedObject("Job", "ml", "workers", "j-uid", "31")))
    text = all_text(incident_message(summary(kind="Group"), StoredDiagnosis.from_stored(diagnosis()), fix=fix,
                                     approvals_enabled=True))
    assert ("Previewed before approval from Deployment ml/coord (uid d-uid, resourceVersion 28); "
            "Job ml/workers (uid j-uid, resourceVersion 31), verdict zone_split_blocked, 2 pod(s)"
            ) in text
    assert "uid -" not in text


def test_many_denied_flows_are_grouped_and_fit() -> None:
    flows = [flow(i) for i in range(30)] + [flow(i, policy="NetworkPolicy/ml/deny", hop="egress")
                                           for i in range(5)]
    text = denied_flows_text(StoredDiagnosis.from_stored({"denied_flows": flows,
                                                          "denied_flows_total": 500}))
    assert text is not None
    assert "30 flow(s) denied at ingress (default_deny) by CiliumNetworkPolicy/ml/zone-b-only" in text
    assert "5 flow(s) denied at egress" in text
    assert "and 465 more not listed" in text
    assert text.index("30 flow(s)") < text.index("5 flow(s)")


def test_long_names_and_huge_diff_stay_within_limits() -> None:
    long = "x" * 400
    incident = summary(name=long, namespace=long)
    diff = "\n".join(f"+  line {i} " + "y" * 80 for i in range(500))
    r = incident_message(incident, StoredDiagnosis.from_stored(diagnosis(
        reasons=[long] * 50, denied_flows=[flow(i, policy="P" * 300) for i in range(200)])),
        fix=ProposedFix(summary="s" * 5000, diff=diff), approvals_enabled=True)
    assert_within_limits(r)
    patches = [b["text"]["text"] for b in r.blocks
               if b["type"] == "section" and b["text"]["text"].startswith("*Patch:*")]
    assert len(patches) == 1 and "incidents show 7" in patches[0]


@pytest.mark.parametrize(("length", "cut"), [(MAX_SECTION - 100, False), (MAX_SECTION * 3, True)])
def test_diff_block_edges(length: int, cut: bool) -> None:
    diff = "\n".join("+" + "a" * 99 for _ in range(length // 100))
    text = diff_block(diff, incident_id=3)
    assert len(text) <= MAX_SECTION
    assert ("incidents show 3" in text) is cut
    assert ("truncated: " in text) is cut
    if cut:
        kept = text.split("```")[1]
        assert all(line == "+" + "a" * 99 for line in kept.splitlines()), "cut at a line end"
    assert text.count("```") == 2


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [("abc", 3, "abc"), ("abcd", 3, "ab…"), ("", 0, ""), ("a" * 151, MAX_HEADER, "a" * 149 + "…")],
)
def test_clip(text: str, limit: int, expected: str) -> None:
    assert clip(text, limit) == expected


@pytest.mark.parametrize(("count", "kept"), [(MAX_BLOCKS, MAX_BLOCKS), (MAX_BLOCKS + 1, MAX_BLOCKS),
                                             (200, MAX_BLOCKS)])
def test_cap_blocks_keeps_the_tail(count: int, kept: int) -> None:
    blocks = [context(str(i)) for i in range(count - 1)] + [{"type": "actions", "elements": []}]
    capped = cap_blocks(blocks, keep_last=1)
    assert len(capped) == kept
    assert capped[-1]["type"] == "actions"
    if count > MAX_BLOCKS:
        assert "more block(s) left out" in json.dumps(capped[-2])


def test_button_limits() -> None:
    b = button("A" * 100, action=ButtonAction.APPROVE, value="1" * 2000)
    assert len(b["text"]["text"]) == MAX_BUTTON_TEXT
    with pytest.raises(ValueError, match="2000"):
        button("x", action=ButtonAction.APPROVE, value="1" * 2001)


@pytest.mark.parametrize(
    ("reason", "advice"),
    [
        ("PyTorchJob ml/resnet is in the protected namespace ml; zonemedic never touches it",
         "co-locate it by hand or ask the namespace's owners to"),
        ("PyTorchJob resnet is queued by Kueue (label kueue.x-k8s.io/queue-name=gpus)",
         "Kueue Topology Aware Scheduling"),
        ("PyTorchJob resnet is managed by example.com/other, not by its own controller",
         "Kueue Topology Aware Scheduling"),
        ("PyTorchJob has finished: it cannot be resumed", "submit the job again"),
        ("no room in zone-a: 2 free GPUs, the job needs 4", "make room for the whole job"),
    ],
)
def test_a_refused_fix_says_why_and_what_to_do_with_no_buttons(reason: str, advice: str) -> None:
    r = incident_message(summary(status=S.REFUSED), StoredDiagnosis.from_stored(diagnosis()),
                         approvals_enabled=True, decision=decision(DecisionOutcome.APPROVE),
                         refused=reason)  # fmt: skip
    text = all_text(r)
    assert "Not fixed automatically" in text and advice in text
    assert "stays open" in text
    assert f"not fixed automatically: {reason}" in r.text
    assert buttons(r) == []
    assert r.blocks[-1] == context(
        "*Approved* by dana at 2026-11-30 12:00 UTC · now *refused: not fixable automatically*")
    assert_within_limits(r)


def event(kind: EventKind, actor: str | None = "alice", **detail: Any) -> TimelineEvent:
    return TimelineEvent(1, 7, T0, kind, actor, detail)


@pytest.mark.parametrize(
    ("ev", "expected"),
    [
        (event(EventKind.APPROVED), "Approved by alice"),
        (event(EventKind.REJECTED, reason="not now"), "Rejected by alice: not now"),
        (event(EventKind.SNOOZED, snoozed_until="2026-12-01T12:00:07.003076+00:00"),
         "💤 Snoozed by alice until 2026-12-01 12:00 UTC"),
        (event(EventKind.SNOOZED, snoozed_until="tomorrow"), "Snoozed by alice until tomorrow"),
        (event(EventKind.REMEDIATION_STEP, step="dry_run", succeeded=True), "Dry run passed"),
        (event(EventKind.REMEDIATION_STEP, step="suspend", succeeded=True), "Job suspended"),
        (event(EventKind.REMEDIATION_STEP, step="resume", succeeded=True), "Job resumed"),
        (event(EventKind.REMEDIATION_STEP, step="resumed", succeeded=True, job_kind="PyTorchJob"),
         "• Job resumed"),
        # a generic group resumes no Job: its workloads moved
        (event(EventKind.REMEDIATION_STEP, step="resumed", succeeded=True, job_kind="Group",
               message="every workload outside the zone moved"),
         "• Workloads moved (every workload outside the zone moved)"),
        (event(EventKind.REMEDIATION_STEP, step="rolled_out", succeeded=True, job_kind="Group"),
         "• Deployment rolled out"),
        (event(EventKind.REMEDIATION_STEP, step="dry_run", succeeded=False, message="denied"), "Dry run failed: denied"),
        (event(EventKind.REMEDIATION_STEP, step="suspended", succeeded=True), "Job suspended with the co-location patch"),
        (event(EventKind.REMEDIATION_STEP, step="bound", zone="zone-a", message="4 pods bound"), "Pods co-located in zone zone-a (4 pods bound)"),
        (event(EventKind.REMEDIATION_STEP, step="rolled_back", succeeded=True), "Rolled back"),
        (event(EventKind.VERIFIED, zone="zone-a", utilization_before=40, utilization_after=85),
         "Verified: pods co-located in zone zone-a, GPU utilization 40% → 85%"),
        (event(EventKind.RESOLVED, reason="verified", utilization_before=40.0, utilization_after=86.0),
         "Resolved: verified (GPU utilization 40% → 86%)"),
        (event(EventKind.ROLLED_BACK, reason="pods did not land together"), "Rolled back: pods did not land together"),
        (event(EventKind.SUPERSEDED, reason="the job has no live pods"), "No longer current: the job has no live pods"),
        (event(EventKind.REFUSED, reason="PyTorchJob resnet is queued by Kueue"),
         "Not fixed automatically: PyTorchJob resnet is queued by Kueue. What to do: schedule "
         "the job with Kueue Topology Aware Scheduling"),
        (event(EventKind.DETECTED), None),
        (event(EventKind.POSTED), None),
    ],
)
def test_thread_updates(ev: TimelineEvent, expected: str | None) -> None:
    r = thread_update(ev)
    if expected is None:
        assert r is None
    else:
        assert r is not None and expected in r.text
        assert_within_limits(r)


def stats(**changes: Any) -> IncidentStats:
    base = IncidentStats(since=T0 - timedelta(days=1), until=T0, total=3,
                         by_verdict={"zone_split_blocked": 3}, by_outcome={"resolved": 2, "open": 1},
                         mean_time_to_detect=timedelta(seconds=4), mean_time_to_decide=None,
                         mean_time_to_resolve=timedelta(hours=3), gpu_hours_recovered=12.34)
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(("open_count", "listed"), [(0, 0), (3, 3), (80, 20)])
def test_digest(open_count: int, listed: int) -> None:
    incidents = [summary(id=i) for i in range(1, open_count + 1)]
    r = digest_message(incidents, stats(), period=timedelta(days=1))
    text = all_text(r)
    assert f"{open_count} open, 2 resolved in the last 1d, 12.3 GPU-hours recovered" in r.text
    assert text.count("zone_split_blocked ml/resnet") == listed
    assert ("more" in text) is (open_count > listed)
    assert_within_limits(r)


def test_digest_says_why_an_open_incident_was_not_posted() -> None:
    incidents = [summary(id=1), summary(id=2)]
    reason = "playbook zone-split: the job's pods request 0 GPU(s), fewer than conditions.min_gpus 1"
    r = digest_message(incidents, stats(), period=timedelta(days=1), not_posted={"2": reason})
    [listing] = [b["text"]["text"] for b in r.blocks if "*Open:*" in str(b)]
    lines = [line for line in listing.splitlines() if "ml/resnet" in line]
    assert "not posted" not in lines[0]
    assert lines[1].endswith(f"· _not posted: {reason}_")
    assert_within_limits(r)


@pytest.mark.parametrize(("by_outcome", "shown"), [
    ({"placed": 5, "constrained": 2}, True),
    ({}, False),  # the webhook decided nothing this week (or is off): no line
])
def test_digest_says_how_many_jobs_were_placed_at_admission(by_outcome: dict[str, int],
                                                            shown: bool) -> None:  # fmt: skip
    week = AdmissionSummary(placed=by_outcome.get("placed", 0), restarts_avoided=4,
                            by_outcome=by_outcome)  # fmt: skip
    r = digest_message([summary()], stats(), period=timedelta(days=1), admissions=week)
    line = "5 job(s) placed at admission this week, 4 restart(s) avoided"
    assert (f"*Admission:* {line}" in all_text(r)) is shown
    assert (line in r.text) is shown
    assert_within_limits(r)


def test_slash_replies() -> None:
    assert "No incidents for job ml/x." in listing_reply(IncidentListing([]), filters="job ml/x").text
    listing = listing_reply(IncidentListing([summary(), summary(id=8)]), filters="")
    assert "#7" in all_text(listing) and "#8" in all_text(listing)
    detail = IncidentDetail(summary(), diagnosis(), None, None, None,
                            [event(EventKind.DETECTED, actor="zonemedic")], [], [], [])
    assert "detected zonemedic" in all_text(detail_reply(detail))
    s = stats_reply(stats(), period="30d")
    assert "GPU-hours recovered: 12.3" in all_text(s) and "resolve 3.0h" in all_text(s)
    assert "show ID" in all_text(help_reply())


FORGED = "dana\n✅ Approved by mallory\x1b[2J\r"


@pytest.mark.parametrize("ev", [
    event(EventKind.APPROVED, actor=FORGED),
    event(EventKind.REJECTED, actor="bob", reason=FORGED),
    event(EventKind.ROLLED_BACK, reason=FORGED),
])
def test_outside_text_cannot_forge_a_line_in_a_thread_update(ev: TimelineEvent) -> None:
    r = thread_update(ev)
    assert r is not None
    for text in (r.text, r.blocks[0]["text"]["text"]):
        assert "\n" not in text and "\r" not in text and "\x1b" not in text
        assert "\\n✅ Approved by mallory\\x1b[2J\\r" in text


def test_a_display_name_cannot_forge_a_line_in_the_decided_message() -> None:
    decided = dataclasses.replace(summary(), status=IncidentStatus.APPROVED)
    decision = Decision(id=1, incident_id=7, outcome=DecisionOutcome.APPROVE, actor_id="U9",
                        actor_name=FORGED, source=DecisionSource.SLACK, decided_at=T0,
                        comment=None, job="ml/resnet")
    r = incident_message(decided, StoredDiagnosis.from_stored(diagnosis()), approvals_enabled=True,
                         decision=decision)
    texts = [b["elements"][0]["text"] for b in r.blocks if b["type"] == "context"]
    assert texts == ["*Approved* by dana\\n✅ Approved by mallory\\x1b[2J\\r at 2026-11-30 12:00 UTC"]


OFFER = {"kind": "CiliumNetworkPolicy", "names": ["zonemedic-allow-resnet"],
         "yaml": "kind: CiliumNetworkPolicy\n", "diff": "--- /dev/null\n+++ zonemedic-allow-resnet.yaml\n+kind: CiliumNetworkPolicy\n",
         "apply": "kubectl apply -f zonemedic-allow-resnet.yaml", "exact": True, "opened_flows": 6,
         "blast_radius": {"touched_outside_job": [], "other_flows_changed": 0},
         "note": "zonemedic does not apply network policies: network policy belongs to the security team"}  # fmt: skip


@pytest.mark.parametrize(("offer", "expected", "absent"), [
    (OFFER, ["*Alternative: a policy change.*", "exactly the job's 6 denied required flow(s) become "
             "allowed; no other flow changes", "*Apply:* `kubectl apply -f zonemedic-allow-resnet.yaml`",
             "zonemedic does not apply network policies", "*Policy to add:*",
             "+++ zonemedic-allow-resnet.yaml"], ["NOT limited"]),
    ({**OFFER, "exact": False, "blast_radius": {"touched_outside_job": ["ml/web-0"],
                                                "other_flows_changed": 4}},
     ["NOT limited to the job's flows (4 other flow(s) change; it also selects ml/web-0)"],
     ["no other flow changes"]),
    ({"refused": "PyTorchJob/ml/resnet: denied by a deny rule", "note": "n"},
     ["*Policy-side fix:* none can be proposed: PyTorchJob/ml/resnet: denied by a deny rule"],
     ["*Policy to add:*", "*Apply:*"]),
])  # fmt: skip
def test_a_refused_colocation_offers_the_policy_fix(
    offer: dict[str, Any], expected: list[str], absent: list[str]
) -> None:
    diag = diagnosis(verdict="policy_blocked", remediable=False, target_zone=None, policy_fix=offer)
    r = incident_message(summary(verdict=Verdict.POLICY_BLOCKED, target_zone=None),
                         StoredDiagnosis.from_stored(diag), approvals_enabled=True)  # fmt: skip
    assert_within_limits(r)
    text = all_text(r)
    for piece in expected:
        assert piece in text, (piece, text)
    for piece in absent:
        assert piece not in text
    assert "Approve" not in [b["text"]["text"] for b in buttons(r)]
