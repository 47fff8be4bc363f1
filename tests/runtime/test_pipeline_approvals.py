"""The approval step of a new incident through the real pipeline and store: a playbook's
`propose_colocation` requests approval until a deadline (the playbook's expiry, else
`slack.approval_ttl`), approves at once in a namespace that opts in (source `auto`), and
does nothing for a finding that cannot be remediated."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from agent.model.lifecycle import DecisionSource, EventKind, IncidentStatus, MessageKind
from agent.playbook.schema import parse_playbook
from agent.sources.change import Change
from tests.runtime.world import JOB, NOW, World

S = IncidentStatus


def playbook(approval: str) -> str:
    return f"""\
name: colocate
triggers:
  - type: zone_split
actions:
  - type: propose_colocation
    {approval}
"""


def _use(world: World, text: str) -> None:
    world.parts.playbooks[:] = [parse_playbook(text, path=Path("colocate.yaml"))]


@pytest.mark.parametrize(
    ("approval", "deadline"),
    [
        ("approval: {approvers: [U1], expiry: 2h}", NOW + timedelta(hours=2)),
        ("approval: {approvers: [U1]}", NOW + timedelta(minutes=30)),  # slack.approval_ttl
        ("approval: {auto_namespaces: [other]}", NOW + timedelta(minutes=30)),
    ],
)
def test_a_proposal_requests_approval_until_a_deadline(world: World, approval: str,
                                                       deadline: object) -> None:
    _use(world, playbook(approval))
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)
    (incident,) = world.incidents()
    assert (incident.status, incident.approval_deadline) == (S.AWAITING_APPROVAL, deadline)
    detail = world.store.get_incident(incident.id)
    (post,) = [m for m in detail.messages if m.kind is MessageKind.POST]
    assert post.payload["approval"]["deadline"] == incident.approval_deadline.isoformat()
    assert post.payload["approval"]["auto"] is False
    assert detail.decisions == []
    # the expiry job, once the deadline passed
    assert world.store.expire_due(now=incident.approval_deadline) == [incident.id]
    assert world.store.get_incident(incident.id).incident.status is S.EXPIRED


def test_an_opted_in_namespace_is_approved_automatically(world: World) -> None:
    _use(world, playbook("approval: {auto_namespaces: [train]}"))
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)
    (incident,) = world.incidents()
    assert incident.status is S.APPROVED and incident.approval_deadline is None
    detail = world.store.get_incident(incident.id)
    (decision,) = detail.decisions
    assert (decision.actor_id, decision.source) == ("zonemedic", DecisionSource.AUTO)
    assert decision.comment is not None and "playbook colocate" in decision.comment
    (post,) = [m for m in detail.messages if m.kind is MessageKind.POST]
    assert post.payload["approval"]["auto"] is True and post.payload["approval"]["deadline"] is None


def test_after_a_rollback_the_same_job_is_not_approved_automatically_again(world: World) -> None:
    _use(world, playbook("approval: {auto_namespaces: [train]}"))
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)
    (first,) = world.incidents()
    assert first.status is S.APPROVED
    for old, new in ((S.APPROVED, S.REMEDIATING), (S.REMEDIATING, S.ROLLED_BACK)):
        assert world.store.transition(first.id, old, new, actor="zonemedic", now=NOW,
                                      detail={"reason": "GPU utilization did not recover"}).applied
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)  # split again: new incident
    second = next(i for i in world.incidents() if i.id != first.id)
    assert second.status is S.AWAITING_APPROVAL and second.approval_deadline is not None
    detail = world.store.get_incident(second.id)
    assert detail.decisions == []
    (note,) = [e for e in detail.events if e.kind is EventKind.NOTE]
    assert note.detail["reason"].startswith(
        "automatic co-location held: the last one of this job rolled back at ")
    assert f"(incident {first.id}: GPU utilization did not recover)" in note.detail["reason"]


def test_a_finding_that_cannot_be_remediated_stays_open(world: World) -> None:
    _use(world, playbook("approval: {auto_namespaces: [train]}"))
    settings = world.pipeline.settings  # the diagnosis protects the job's namespace
    world.pipeline.settings = replace(settings, diagnosis=replace(
        settings.diagnosis, protected_namespaces=["train"]))
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)
    (incident,) = world.incidents()
    assert world.store.get_incident(incident.id).diagnosis["remediable"] is False
    assert incident.status is S.OPEN and world.store.get_incident(incident.id).decisions == []
