"""What a new incident needs when a playbook proposes co-location (pure, table-driven)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent.approval.step import ApprovalStepKind, Remediability, RolledBack, approval_step
from agent.model.document import IncidentDocument, UtilizationEvidence
from agent.model.finding import Coordinator, Finding
from agent.model.job import JobRef
from agent.model.verdict import Verdict
from agent.model.workload import JobKind
from agent.playbook.model import ApprovalPolicy

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TTL = timedelta(minutes=30)
REMEDIABLE = Remediability(remediable=True, target_zone="zone-a")
JOB = JobRef(JobKind.PYTORCH, "train", "gpt")
SPLIT = Finding(JOB, Verdict.ZONE_SPLIT_DEGRADED, {"zone-a": 3, "zone-b": 1},
                Coordinator("gpt-master-0", "zone-b"), remediable=True, target_zone="zone-a")
EVIDENCE = UtilizationEvidence("no reading")


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (IncidentDocument.of_finding(SPLIT, uid="u", metrics=EVIDENCE), REMEDIABLE),
        # a previewed plan (no refusal) changes nothing; a refused one carries its reason
        (IncidentDocument.of_finding(SPLIT, uid="u", metrics=EVIDENCE).with_fix({"refusal": None, "diff": "+x"}),
         REMEDIABLE),
        (IncidentDocument.of_finding(SPLIT, uid="u", metrics=EVIDENCE).with_fix({"refusal": "no room"}),
         Remediability(remediable=True, target_zone="zone-a", refusal="no room")),
        # a utilization drop has no finding: nothing to move
        (IncidentDocument.of_drop(JOB, uid="u", metrics=EVIDENCE), Remediability(remediable=False)),
    ],
)
def test_remediability_is_read_off_the_typed_document(document: IncidentDocument,
                                                      expected: Remediability) -> None:
    assert Remediability.of(document) == expected


@pytest.mark.parametrize(
    ("namespace", "subject", "policy", "kind", "deadline", "reason"),
    [
        ("ml", REMEDIABLE, ApprovalPolicy(), ApprovalStepKind.REQUEST, NOW + TTL,
         "awaiting approval for 30m"),
        ("ml", REMEDIABLE, ApprovalPolicy(expiry=timedelta(hours=4)), ApprovalStepKind.REQUEST,
         NOW + timedelta(hours=4), "for 4h"),
        ("ml", REMEDIABLE, ApprovalPolicy(expiry=timedelta(seconds=90)), ApprovalStepKind.REQUEST,
         NOW + timedelta(seconds=90), "for 90s"),
        ("ml-sandbox", REMEDIABLE, ApprovalPolicy(auto_namespaces=("ml-sandbox",)),
         ApprovalStepKind.AUTO, None, "namespace ml-sandbox opts in"),
        ("ml", REMEDIABLE, ApprovalPolicy(auto_namespaces=("ml-sandbox",)),
         ApprovalStepKind.REQUEST, NOW + TTL, ""),
        # never auto in a protected namespace, even when listed
        ("kube-system", REMEDIABLE, ApprovalPolicy(auto_namespaces=("kube-system",)),
         ApprovalStepKind.NONE, None, "not remediable"),
        ("ml", Remediability(remediable=False, target_zone="zone-a"), ApprovalPolicy(),
         ApprovalStepKind.NONE, None, "not remediable"),
        ("ml", Remediability(remediable=True, target_zone=None), ApprovalPolicy(),
         ApprovalStepKind.NONE, None, ""),
        ("ml", Remediability(remediable=False), ApprovalPolicy(auto_namespaces=("ml",)), ApprovalStepKind.NONE, None, ""),
        # the plan preview refused the fix: nothing to approve, not even automatically
        ("ml", Remediability(remediable=True, target_zone="zone-a",
                                   refusal="every node of zone zone-a is cordoned"),
         ApprovalPolicy(), ApprovalStepKind.NONE, None,
         "the fix cannot be applied: every node of zone zone-a is cordoned"),
        ("ml-sandbox", Remediability(remediable=True, target_zone="zone-a", refusal="no room"),
         ApprovalPolicy(auto_namespaces=("ml-sandbox",)), ApprovalStepKind.NONE, None, "no room"),
    ],
)
def test_approval_step(namespace: str, subject: Remediability, policy: ApprovalPolicy,
                       kind: ApprovalStepKind, deadline: datetime | None, reason: str) -> None:
    step = approval_step(namespace=namespace, subject=subject, policy=policy,
                         protected_namespaces=("kube-system",), default_ttl=TTL, now=NOW)
    assert (step.kind, step.deadline) == (kind, deadline)
    assert reason in step.reason


HOLD = timedelta(hours=24)
AUTO = ApprovalPolicy(auto_namespaces=("ml-sandbox",))


@pytest.mark.parametrize(
    ("rolled_back", "policy", "kind", "deadline", "reason"),
    [
        (None, AUTO, ApprovalStepKind.AUTO, None, "opts in"),
        # the job's last co-location rolled back an hour ago: a person decides, told why
        (RolledBack(NOW - timedelta(hours=1), "incident 7: GPU utilization did not recover"), AUTO,
         ApprovalStepKind.REQUEST, NOW + TTL,
         "automatic co-location held: the last one of this job rolled back at 2026-11-30 11:00 UTC "
         "(incident 7: GPU utilization did not recover); awaiting approval for 30m"),
        (RolledBack(NOW - HOLD + timedelta(seconds=1), "x"), AUTO, ApprovalStepKind.REQUEST,
         NOW + TTL, "held"),
        (RolledBack(NOW - HOLD, "x"), AUTO, ApprovalStepKind.AUTO, None, "opts in"),  # hold over
        # a namespace that does not opt in asks a person anyway, with the usual reason
        (RolledBack(NOW - timedelta(hours=1), "x"), ApprovalPolicy(), ApprovalStepKind.REQUEST,
         NOW + TTL, "awaiting approval for 30m"),
    ],
)
def test_auto_approval_is_held_after_a_rollback(
    rolled_back: RolledBack | None, policy: ApprovalPolicy, kind: ApprovalStepKind,
    deadline: datetime | None, reason: str,
) -> None:
    step = approval_step(namespace="ml-sandbox", subject=REMEDIABLE, policy=policy,
                         protected_namespaces=(), default_ttl=TTL, now=NOW,
                         rolled_back=rolled_back, auto_hold=HOLD)
    assert (step.kind, step.deadline) == (kind, deadline)
    assert reason in step.reason
    if policy is not AUTO or kind is ApprovalStepKind.AUTO:
        assert "held" not in step.reason
