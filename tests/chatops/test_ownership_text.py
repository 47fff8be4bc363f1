"""The message's ownership section: who owns the objects a fix changes, and what it means."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent.chatops.ownership_text import handover_snippet, ownership_text
from agent.chatops.render import incident_message
from agent.model.handover import Handover, SourceKind
from agent.model.incident import IncidentSummary, Severity
from agent.model.lifecycle import IncidentStatus
from agent.model.ownership import ObjectOwnership, OwnerKind, Ownership
from agent.model.proposal import ProposedFix
from agent.model.stored import StoredDiagnosis
from agent.model.verdict import Verdict

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ARGO = ObjectOwnership("Deployment", "lab", "coordinator", Ownership(OwnerKind.ARGO_CD, "lab"))
NOBODY = ObjectOwnership("Job", "lab", "workers", Ownership(OwnerKind.NONE, managers=("kubectl-create",)))


@pytest.mark.parametrize(
    ("owners", "expect"),
    [
        ((), None),
        ((NOBODY,), None),  # the live fix lasts: nothing to say
        ((ARGO, NOBODY), "*Who owns it:*\n• Deployment lab/coordinator is managed by Argo CD "
                         "application lab: this live fix lasts until its next sync unless the "
                         "change is committed to the application's source\n"
                         "The change for the source: `zonemedic incidents patch 7 --format "
                         "kustomize` (or `manifest`, `json6902`)."),
    ],
)
def test_ownership_text(owners: tuple[ObjectOwnership, ...], expect: str | None) -> None:
    fix = ProposedFix(summary="s", diff="d", owners=owners)
    assert ownership_text(fix, incident_id=7) == expect


def test_the_message_carries_the_ownership_after_the_patch() -> None:
    incident = IncidentSummary(
        id=7, cluster="prod", kind="Group", namespace="lab", name="lab", uid=None,
        verdict=Verdict.ZONE_SPLIT_BLOCKED, status=IncidentStatus.AWAITING_APPROVAL,
        severity=Severity.CRITICAL, fingerprint="f", target_zone="zone-a", opened_at=T0,
        updated_at=T0, closed_at=None, status_by=None, utilization_before=None,
        utilization_after=None, estimated_cost=None, gpus=4, detections=1)
    diagnosis = StoredDiagnosis.from_stored({
        "job": {"kind": "Group", "namespace": "lab", "name": "lab"},
        "verdict": "zone_split_blocked", "zones": {"zone-a": 3, "zone-b": 1},
        "denied_flows": [], "denied_flows_total": 0, "remediable": True,
        "target_zone": "zone-a", "reasons": []})
    fix = ProposedFix(summary="co-locate", diff="--- a\n+++ b", target_zone="zone-a",
                      owners=(ARGO,))
    rendered = incident_message(incident, diagnosis, fix=fix, approvals_enabled=True)
    texts = [b.get("text", {}).get("text", "") for b in rendered.blocks]
    at_patch = next(i for i, t in enumerate(texts) if t.startswith("*Patch:*"))
    at_owner = next(i for i, t in enumerate(texts) if t.startswith("*Who owns it:*"))
    assert at_owner > at_patch
    assert "managed by Argo CD application lab" in texts[at_owner]


def test_a_fix_something_reapplies_carries_its_kustomize_patch_cut_to_fit() -> None:
    source = {"apiVersion": "apps/v1", "kind": "Deployment",
              "metadata": {"name": "coordinator", "namespace": "lab"}}
    patch = {"spec": {"template": {"spec": {"nodeSelector": {"zone": "zone-a"}}}}}
    one = Handover("apps/v1", "Deployment", "lab", "coordinator", patch, source,
                   SourceKind.LAST_APPLIED)
    assert handover_snippet(ProposedFix(summary="s", owners=(NOBODY,), handovers=(one,)),
                            incident_id=7) is None, "the live fix lasts: nothing to hand over"
    text = handover_snippet(ProposedFix(summary="s", owners=(ARGO,), handovers=(one,)),
                            incident_id=7)
    assert text is not None and text.startswith("*Kustomize patch for the source:*\n```")
    assert "kind: Deployment" in text and "zone: zone-a" in text and "cut:" not in text
    many = tuple(Handover("apps/v1", "Deployment", "lab", f"d{i}", patch, source,
                          SourceKind.LIVE) for i in range(40))
    cut = handover_snippet(ProposedFix(summary="s", owners=(ARGO,), handovers=many),
                           incident_id=7)
    assert cut is not None and len(cut) < 3000
    assert cut.endswith("`zonemedic incidents patch 7 --format kustomize` prints it whole)_")
