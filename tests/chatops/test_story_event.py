"""What the deliverer reads from an incident before rendering: the thread reply's event with what
its remediation action recorded and the incident's kind, and the latest waste estimate (the
finding's, refined by later evidence)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agent.chatops.delivery import story_event, waste_of
from agent.chatops.render import thread_update
from agent.model.incident import IncidentDetail, IncidentSummary, RemediationAction, TimelineEvent
from agent.model.lifecycle import (
    EventKind,
    IncidentStatus,
    RemediationActionKind,
    Severity,
)
from agent.model.stored import StoredWaste
from agent.model.verdict import Verdict

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NOT_YET = {"gpu_hours_per_day": None,
           "gpu_hours_basis": "not measured yet: no utilization sample of the job yet",
           "egress_usd_per_day": None, "egress_basis": "unknown: set diagnosis.bytes_per_step"}


def detail(*, kind: str = "PyTorchJob", events: list[TimelineEvent] | None = None,
           actions: list[RemediationAction] | None = None,
           waste: dict[str, Any] | None = None) -> IncidentDetail:
    incident = IncidentSummary(
        id=3, cluster="c", kind=kind, namespace="ml", name="job", uid=None,
        verdict=Verdict.ZONE_SPLIT_DEGRADED, status=IncidentStatus.REMEDIATING,
        severity=Severity.WARNING, fingerprint="f", target_zone="zone-a", opened_at=T0,
        updated_at=T0, closed_at=None, status_by=None, utilization_before=None,
        utilization_after=None, estimated_cost=None, gpus=4, detections=1,
    )
    return IncidentDetail(incident=incident, diagnosis={} if waste is None else {"waste": waste},
                          onset_at=None, decided_at=None, snoozed_until=None,
                          events=events or [], decisions=[], actions=actions or [], messages=[])


def test_a_groups_resumed_step_reads_as_its_workloads_moving() -> None:
    action = RemediationAction(9, 3, RemediationActionKind.APPLY, T0, "zonemedic", True,
                               {"step": "resumed"}, "every workload outside the zone moved")
    event = TimelineEvent(5, 3, T0, EventKind.REMEDIATION_STEP, "zonemedic",
                          {"action_id": 9, "message": "every workload outside the zone moved"})
    texts = {}
    for kind in ("Group", "PyTorchJob"):
        told = story_event(event, detail(kind=kind, actions=[action]))
        assert told.detail["job_kind"] == kind and told.detail["zone"] == "zone-a"
        rendered = thread_update(told)
        assert rendered is not None
        texts[kind] = rendered.text
    assert texts == {"Group": "• Workloads moved (every workload outside the zone moved)",
                     "PyTorchJob": "• Job resumed (every workload outside the zone moved)"}


def test_the_latest_evidence_refines_the_findings_waste() -> None:
    assert waste_of(detail()) is None
    assert waste_of(detail(waste=NOT_YET)) == StoredWaste.from_stored(NOT_YET)
    again = {"gpu_hours_per_day": 57.6, "gpu_hours_basis": "4 GPU(s) x 60% idle now x 24 h"}
    later = {"gpu_hours_per_day": 40.0, "gpu_hours_basis": "a later estimate"}
    events = [TimelineEvent(i, 3, T0, EventKind.REDETECTED, "zonemedic", d)
              for i, d in ((1, {"metrics": {}}), (2, {"waste": again}), (3, {"waste": later}))]
    assert waste_of(detail(waste=NOT_YET, events=events)) == StoredWaste.from_stored(
        {**NOT_YET, **later})
    assert waste_of(detail(waste=NOT_YET, events=list(reversed(events)))) == StoredWaste.from_stored(
        {**NOT_YET, **later})
