"""Re-detection floods: every re-detection is counted, but the timeline gets one row per incident per
window (folded, with its repeats and last time), on SQLite and PostgreSQL. Status changes and other
actors' events are never folded."""

from __future__ import annotations

from agent.model.incident import Verdict
from agent.model.lifecycle import EventKind, IncidentStatus
from agent.store.repository import IncidentStore
from agent.store.timeline import FOLD_WINDOW
from tests.store.helpers import T0, finding, minutes


def test_a_thousand_redetections_are_one_timeline_row(store: IncidentStore) -> None:
    first = store.record_finding(finding())
    for i in range(1, 1000):
        store.record_finding(finding(at=T0 + minutes(1) + i * (minutes(1) / 1000),
                                     utilization_now=float(i % 100)))
    detail = store.get_incident(first.incident.id)
    assert detail.incident.detections == 1000
    assert [e.kind for e in detail.events] == [EventKind.DETECTED, EventKind.REDETECTED]
    folded = detail.events[1]
    assert folded.at == T0 + minutes(1) + minutes(1) / 1000
    assert folded.detail["repeats"] == 999
    assert folded.detail["utilization_now"] == 99.0  # the latest evidence
    assert folded.detail["last_at"] == (T0 + minutes(1) + 999 * (minutes(1) / 1000)).isoformat()


def test_a_new_row_once_the_window_has_passed(store: IncidentStore) -> None:
    first = store.record_finding(finding())
    store.record_finding(finding(at=T0 + minutes(1)))
    store.record_finding(finding(at=T0 + minutes(2)))
    later = T0 + minutes(1) + FOLD_WINDOW + minutes(1)
    store.record_finding(finding(at=later, verdict=Verdict.ZONE_SPLIT_DEGRADED))
    events = store.get_incident(first.incident.id).events
    assert [(e.kind, e.at) for e in events] == [
        (EventKind.DETECTED, T0),
        (EventKind.REDETECTED, T0 + minutes(1)),
        (EventKind.REDETECTED, later),
    ]
    assert events[1].detail["repeats"] == 2
    assert "repeats" not in events[2].detail
    assert events[2].detail["verdict"] == "zone_split_degraded"


def test_status_changes_and_other_actors_are_never_folded(store: IncidentStore) -> None:
    first = store.record_finding(finding())
    incident_id = first.incident.id
    store.record_finding(finding(at=T0 + minutes(1)))
    store.transition(incident_id, IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL,
                     actor="agent", now=T0 + minutes(2))
    store.add_event(incident_id, EventKind.REDETECTED, now=T0 + minutes(3), actor="agent",
                    detail={"metrics": {"gpu": 40}})
    store.add_event(incident_id, EventKind.REDETECTED, now=T0 + minutes(3), actor="agent",
                    detail={"metrics": {"gpu": 41}})
    store.record_finding(finding(at=T0 + minutes(4)))
    events = store.get_incident(incident_id).events
    assert [(e.kind, e.actor) for e in events] == [
        (EventKind.DETECTED, "detector"),
        (EventKind.REDETECTED, "detector"),  # the re-detection at +4m folded into this row
        (EventKind.AWAITING_APPROVAL, "agent"),
        (EventKind.REDETECTED, "agent"),
        (EventKind.REDETECTED, "agent"),  # add_event appends: callers' events are never folded
    ]
    assert events[1].detail["repeats"] == 2
    assert store.get_incident(incident_id).incident.detections == 3
