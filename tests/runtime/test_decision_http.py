"""`POST /api/incidents/{id}/decision` through the HTTP app under real uvicorn, over the real store
(SQLite and PostgreSQL): token, status codes, field errors, one winner; and the body parser, pure."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.approval.approvers import Authority
from agent.model.lifecycle import DecisionOutcome, DecisionSource, EventKind, IncidentStatus
from agent.runtime.decision_http import parse_decision
from agent.runtime.http import build_app
from agent.runtime.incidents import StoreIncidents
from agent.runtime.metrics import AgentMetrics
from agent.runtime.server import HttpServer
from agent.settings import Settings
from agent.store.repository import IncidentStore
from tests.store.helpers import finding
from tests.support.approvals import queue_proposal, zone_split

S = IncidentStatus
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _serve(store: IncidentStore, token: str | None,
           authority: Authority | None = None) -> HttpServer:
    incidents = StoreIncidents(store, cluster="prod", now=lambda: datetime.now(UTC),
                               authority=authority or Authority())
    app = build_app(metrics=AgentMetrics(), readiness=lambda: {}, incidents=incidents,
                    api_token=token, decisions=incidents)
    return HttpServer(app, host="127.0.0.1", port=0).start()


@pytest.fixture
def client(store: IncidentStore) -> Iterator[httpx.Client]:
    server = _serve(store, TOKEN)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            yield c
    finally:
        server.stop()


@pytest.fixture
def incident(store: IncidentStore) -> int:
    incident_id = store.record_finding(finding()).incident.id
    store.transition(incident_id, S.OPEN, S.AWAITING_APPROVAL, actor="zonemedic",
                     now=datetime.now(UTC))
    return incident_id


def test_approve_then_409_naming_the_winner(client: httpx.Client, store: IncidentStore,
                                            incident: int) -> None:
    ok = client.post(f"/api/incidents/{incident}/decision", headers=AUTH,
                     json={"outcome": "approve", "by": "ops-bot", "reason": "runbook 7"})
    assert ok.status_code == 200, ok.text
    body = ok.json()
    assert (body["recorded"], body["reason"], body["status"], body["decided_by"]) == (
        True, "recorded", "approved", "ops-bot")
    (decision,) = store.get_incident(incident).decisions
    assert (decision.actor_id, decision.source, decision.comment) == (
        "ops-bot", DecisionSource.API, "runbook 7")

    again = client.post(f"/api/incidents/{incident}/decision", headers=AUTH,
                        json={"outcome": "reject", "by": "someone"})
    assert again.status_code == 409
    body = again.json()
    assert (body["recorded"], body["reason"], body["decided_by"]) == (False, "already_decided",
                                                                      "ops-bot")
    assert body["decided_at"] == decision.decided_at.isoformat()
    assert "already approved by ops-bot (via api)" in body["error"]


def test_an_approver_removed_from_the_playbook_is_refused_403(
    store: IncidentStore, incident: int, tmp_path: Path
) -> None:
    """zone-split listed U5 and U6 when it proposed the fix (the proposal recorded both); U5 is
    no longer listed in the playbook the agent runs with: U5's decision is 403 with the reason
    and a note on the timeline, U6's is recorded."""
    queue_proposal(store, incident, approvers=["U5", "U6"])
    authority = Authority.of(Settings(), [zone_split("U6")])
    server = _serve(store, TOKEN, authority)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            refused = client.post(f"/api/incidents/{incident}/decision", headers=AUTH,
                                  json={"outcome": "approve", "by": "U5"})
            assert refused.status_code == 403, refused.text
            body = refused.json()
            assert (body["recorded"], body["reason"], body["status"]) == (
                False, "not_authorized", "awaiting_approval")
            assert body["error"].startswith(f"incident {incident} not approved: U5 is not an "
                                            "approver (slack.approvers and the approval.approvers "
                                            "of playbook zone-split, as configured now")
            detail = store.get_incident(incident)
            assert detail.decisions == []
            (note,) = [e for e in detail.events if e.kind is EventKind.NOTE]
            assert (note.actor, note.detail["refused"], note.detail["source"]) == (
                "U5", "approve", "api")
            ok = client.post(f"/api/incidents/{incident}/decision", headers=AUTH,
                             json={"outcome": "approve", "by": "U6"})
            assert ok.status_code == 200, ok.text
    finally:
        server.stop()


def test_snooze_with_duration(client: httpx.Client, store: IncidentStore, incident: int) -> None:
    before = datetime.now(UTC)
    ok = client.post(f"/api/incidents/{incident}/decision", headers=AUTH,
                     json={"outcome": "snooze", "by": "x", "snooze_for": "90m"})
    assert ok.status_code == 200
    until = store.get_incident(incident).snoozed_until
    assert until is not None and until >= before + timedelta(minutes=90)
    assert store.get_incident(incident).decisions[0].outcome is DecisionOutcome.SNOOZE


def test_not_found_and_not_current(client: httpx.Client, store: IncidentStore,
                                   incident: int) -> None:
    missing = client.post("/api/incidents/424242/decision", headers=AUTH,
                          json={"outcome": "approve", "by": "x"})
    assert missing.status_code == 404 and missing.json()["reason"] == "not_found"
    store.transition(incident, S.AWAITING_APPROVAL, S.EXPIRED, actor="zonemedic",
                     now=datetime.now(UTC))
    late = client.post(f"/api/incidents/{incident}/decision", headers=AUTH,
                       json={"outcome": "approve", "by": "x"})
    assert late.status_code == 409 and late.json()["reason"] == "expired"
    assert "expired at" in late.json()["error"]
    assert store.get_incident(incident).decisions == []


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": f"Basic {TOKEN}"}, 401),
        ({"Authorization": f"Bearer {TOKEN}x"}, 401),
        (AUTH, 200),
    ],
)
def test_bearer_token(client: httpx.Client, store: IncidentStore, incident: int,
                      headers: dict[str, str], status: int) -> None:
    response = client.post(f"/api/incidents/{incident}/decision", headers=headers,
                           json={"outcome": "approve", "by": "x"})
    assert response.status_code == status
    decided = store.get_incident(incident).decisions
    assert len(decided) == (1 if status == 200 else 0)


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("abc", b'{"outcome": "approve", "by": "x"}', "incident id: expected a whole number from 1"),
        ("0", b'{"outcome": "approve", "by": "x"}', "incident id: must be from 1 to 2147483647"),
        ("99999999999", b'{"outcome": "approve", "by": "x"}',
         "incident id: must be from 1 to 2147483647"),
        ("٨٠", b'{"outcome": "approve", "by": "x"}', "incident id: expected a whole number"),
        ("{id}", b"{nope", "body: not JSON"),
        ("{id}", b"[1, 2]", "body: expected a JSON object"),
        # the last key used to win: a body that says two things is refused, naming the key
        ("{id}", b'{"outcome": "reject", "by": "x", "outcome": "approve"}',
         'body: duplicate key "outcome" in an object'),
        ("{id}", b'{"outcome": "approve", "by": "\xff"}', "body: not UTF-8 (byte 0xff at offset 30)"),
        ("{id}", b'{"outcome": "approve", "by": "\\ud800"}', "body: not JSON: no low surrogate"),
        ("{id}", b'{"outcome": "approve", "by": "x", "reason": NaN}', "body: not JSON"),
        ("{id}", b'{"by": "x"}', "outcome: required"),
        ("{id}", b'{"outcome": "ship", "by": "x"}', "outcome: expected one of approve, reject, "
         "snooze, got 'ship'"),
        ("{id}", b'{"outcome": 3, "by": "x"}', "outcome: expected a string, got 3"),
        ("{id}", b'{"outcome": "approve"}', "by: required"),
        ("{id}", b'{"outcome": "approve", "by": " "}', "by: expected a name"),
        ("{id}", b'{"outcome": "approve", "by": "x", "reason": 5}', "reason: expected a string"),
        ("{id}", b'{"outcome": "approve", "by": "x", "colour": "red"}', "colour: unknown field"),
        ("{id}", b'{"outcome": "snooze", "by": "x", "snooze_for": "soon"}',
         "snooze_for: expected a duration"),
        ("{id}", b'{"outcome": "snooze", "by": "x", "snooze_for": [1]}',
         "snooze_for: expected a duration like 24h, got [1]"),
        ("{id}", b'{"outcome": "snooze", "by": "x", "snooze_for": 0}',
         "snooze_for: expected a duration above 0"),
        ("{id}", b'{"outcome": "approve", "by": "x", "snooze_for": "1h"}',
         "snooze_for: only a snooze has a duration"),
    ],
)
def test_bad_requests_name_the_field(client: httpx.Client, store: IncidentStore, incident: int,
                                     path: str, body: bytes, message: str) -> None:
    response = client.post(f"/api/incidents/{path.replace('{id}', str(incident))}/decision",
                           headers=AUTH, content=body)
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert store.get_incident(incident).decisions == []


def test_no_route_without_a_token(store: IncidentStore, incident: int) -> None:
    server = _serve(store, None)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            response = c.post(f"/api/incidents/{incident}/decision",
                              json={"outcome": "approve", "by": "x"})
            assert c.get(f"/api/incidents/{incident}").status_code == 200  # reads still answer
    finally:
        server.stop()
    assert response.status_code in (404, 405)
    assert store.get_incident(incident).decisions == []


def test_eight_concurrent_requests_one_200(client: httpx.Client, store: IncidentStore,
                                           incident: int) -> None:
    barrier = threading.Barrier(8)
    codes: dict[str, int] = {}
    bodies: dict[str, dict[str, Any]] = {}

    def post(i: int) -> None:
        barrier.wait()
        r = client.post(f"/api/incidents/{incident}/decision", headers=AUTH,
                        json={"outcome": "approve", "by": f"caller-{i}"})
        codes[f"caller-{i}"], bodies[f"caller-{i}"] = r.status_code, r.json()

    threads = [threading.Thread(target=post, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    winners = [who for who, code in codes.items() if code == 200]
    assert len(codes) == 8 and len(winners) == 1
    assert all(bodies[w]["decided_by"] == winners[0] for w in codes if w not in winners)
    assert sorted(codes.values()) == [200] + [409] * 7


def test_parse_decision_builds_the_request() -> None:
    request = parse_decision("12", b'{"outcome": "snooze", "by": " ana ", "reason": null, '
                                   b'"snooze_for": 3600}')
    assert (request.incident_id, request.outcome, request.actor.id, request.actor.source,
            request.reason, request.snooze_for) == (
        12, DecisionOutcome.SNOOZE, "ana", DecisionSource.API, None, timedelta(hours=1))


def test_a_body_over_the_limit_is_413_unread(client: httpx.Client, store: IncidentStore,
                                             incident: int) -> None:
    response = client.post(f"/api/incidents/{incident}/decision", headers=AUTH,
                           content=b" " * 20_000)
    assert response.status_code == 413
    assert "body too large" in response.json()["error"]
    assert store.get_incident(incident).decisions == []
