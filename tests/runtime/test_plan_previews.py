"""Plan previews over the real store (SQLite, migrated): recorded once per placement, a re-detection
with another placement calls for a new one, and after a restart the latest preview is read back."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.model.finding import Finding
from agent.model.incident import FindingRecord, IncidentSummary
from agent.model.job import JobRef
from agent.model.lifecycle import EventKind, IncidentStatus, RemediationActionKind
from agent.model.proposal import proposed_fix
from agent.model.verdict import Verdict
from agent.model.workload import JobKind
from agent.remediation.plan import Refusal
from agent.remediation.preview_action import preview_action
from agent.runtime.plan_previews import PlanPreviews, Preview, placement_key
from agent.settings import Settings
from agent.sources.kubeapi import KubeApi
from agent.store.migrate import upgrade_on_start
from agent.store.repository import IncidentStore

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
REF = JobRef(JobKind.PYTORCH, "ml", "resnet")


def split(zones: Mapping[str, int], *, target: str | None = "zone-a",
          verdict: Verdict = Verdict.ZONE_SPLIT_BLOCKED, remediable: bool = True) -> Finding:  # fmt: skip
    return Finding(job=REF, verdict=verdict, zones=zones, coordinator=None,
                   remediable=remediable, target_zone=target)  # fmt: skip


def refused(finding: Finding, reason: str) -> Preview:
    action = preview_action(Refusal(REF, reason), zones=finding.zones,
                            target_zone=finding.target_zone, verdict=finding.verdict.value)
    return Preview(action, placement_key(finding.verdict.value, finding.target_zone,
                                         finding.zones))  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Iterator[IncidentStore]:
    settings = Settings(data_dir=str(tmp_path))
    settings = replace(settings, database=replace(settings.database,
                                                  url=f"sqlite:///{tmp_path / 'zm.db'}"))
    opened = upgrade_on_start(settings)
    yield opened
    opened.close()


def opened(store: IncidentStore, finding: Finding) -> IncidentSummary:
    """The incident `finding` opens for ml/resnet."""
    return store.record_finding(FindingRecord.from_finding(
        {**finding.to_dict(), "job": {"kind": "PyTorchJob", "namespace": "ml", "name": "resnet"}},
        cluster="prod", detected_at=NOW)).incident  # fmt: skip


def test_recorded_once_per_placement_and_read_back_after_a_restart(store: IncidentStore) -> None:
    first = split({"zone-a": 3, "zone-b": 1})
    incident = opened(store, first)
    previews = PlanPreviews(KubeApi(None), store, now=lambda: NOW)
    assert previews.stale(incident, first), "nothing previewed yet"
    assert previews.record(incident.id, refused(first, "no room"))
    assert not previews.record(incident.id, refused(first, "no room")), "a retried firing"
    assert not previews.stale(incident, first)
    moved = split({"zone-a": 2, "zone-b": 2})
    assert previews.stale(incident, moved)
    assert previews.stale(incident, split({"zone-a": 3, "zone-b": 1}, target="zone-b"))
    # another verdict, the same placement: the preview follows the verdict
    assert previews.stale(incident, split(first.zones, verdict=Verdict.ZONE_SPLIT_DEGRADED))
    # no longer previewable after a preview: planned again (a refusal saying why)
    assert previews.stale(incident, split(moved.zones, remediable=False))
    assert previews.stale(incident, split(moved.zones, verdict=Verdict.POLICY_BLOCKED))
    # no longer undecided: no new preview
    assert not previews.stale(replace(incident, status=IncidentStatus.APPROVED), moved)

    restarted = PlanPreviews(KubeApi(None), store, now=lambda: NOW)
    assert not restarted.stale(incident, first), "the latest preview is read from the store"
    assert restarted.stale(incident, moved)
    assert restarted.record(incident.id, refused(moved, "still no room"))
    detail = store.get_incident(incident.id)
    plans = [a for a in detail.actions if a.kind is RemediationActionKind.PLAN]
    assert [a.payload["refusal"] for a in plans] == ["no room", "still no room"]
    assert [e.kind for e in detail.events].count(EventKind.PLAN_PREVIEWED) == 2
    assert EventKind.REMEDIATION_STEP not in [e.kind for e in detail.events]


def test_a_verdict_with_no_fix_is_a_refusal_naming_the_verdict_and_why(store: IncidentStore) -> None:
    """Re-planned on a verdict change: a split that became a policy block shows why there is no
    fix, not the plan computed for the split."""
    first = split({"zone-a": 3, "zone-b": 1})
    incident = opened(store, first)
    previews = PlanPreviews(KubeApi(None), store, now=lambda: NOW)
    assert previews.record(incident.id, refused(first, "no room"))
    blocked = replace(split(first.zones, verdict=Verdict.POLICY_BLOCKED, remediable=False,
                            target=None),
                      reasons=("no single zone makes every required flow allowed: fix the "
                               "policies",))  # fmt: skip
    assert previews.stale(incident, blocked)
    assert previews.record(incident.id, previews.refusal(blocked))
    assert not previews.stale(incident, blocked), "recorded once per verdict and placement"
    fix = proposed_fix(store.get_incident(incident.id).actions)
    assert fix is not None and fix.verdict == "policy_blocked"
    assert fix.refusal == ("the job is now policy_blocked: no single zone makes every "
                           "required flow allowed: fix the policies")
