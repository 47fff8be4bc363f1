"""Hostile Slack requests, end to end over HTTP: every one is refused, changes nothing and is
audited (a `note` on the incident's timeline where the incident exists; always a log line and a
count per reason, reported to the agent's `zonemedic_slack_refused_total`).

Covered here: another workspace's click and slash command (the team id `auth.test` gave at
start-up is ours), an action id the agent never sends, a button naming an incident that does not
exist or one another cluster's agent recorded, a click from a non-approver, and the signature
refusals (forged, tampered, stale, replayed, unsigned) counted. The signature refusals' own
answers are in test_slack.py::test_bad_requests_get_401_before_any_work and
test_slack.py::test_replayed_request_refused."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.chatops.audit import RefusalReason
from agent.chatops.blocks import ButtonAction
from agent.fakes.slack import FakeSlack
from agent.model.lifecycle import EventKind, IncidentStatus
from tests.chatops.harness import ChatRig, start_rig
from tests.support.waiting import wait

S = IncidentStatus
APPROVE = ButtonAction.APPROVE.value


@pytest.fixture
def refusals() -> Counter[RefusalReason]:
    return Counter()


@pytest.fixture
def audited(slack: FakeSlack, sqlite_template: Any, tmp_path: Path,
            refusals: Counter[RefusalReason]) -> Iterator[ChatRig]:
    rig = start_rig(slack, sqlite_template, tmp_path, on_refused=lambda r: refusals.update([r]))
    try:
        yield rig
    finally:
        rig.stop()


def signed_post(rig: ChatRig, payload: dict[str, Any]) -> int:
    body = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
    return rig.slack.post(rig.url, body, rig.slack.signed_headers(body)).status


def audit_notes(rig: ChatRig, incident: int) -> list[dict[str, Any]]:
    return [dict(e.detail) for e in rig.store.get_incident(incident).events
            if e.kind is EventKind.NOTE and "refused" in e.detail]


def unchanged(rig: ChatRig, incident: int) -> bool:
    detail = rig.store.get_incident(incident)
    return detail.incident.status is S.AWAITING_APPROVAL and not detail.decisions


def test_another_workspaces_click_is_refused_and_audited(
    audited: ChatRig, refusals: Counter[RefusalReason]
) -> None:
    incident = audited.open_incident()
    payload = audited.slack.action_payload(user="U1", action_id=APPROVE, value=str(incident))
    payload["team"] = {"id": "T0THEIRS", "domain": "theirs"}
    payload["user"]["team_id"] = "T0THEIRS"
    assert signed_post(audited, payload) == 403
    notes = wait(lambda: audit_notes(audited, incident), timeout=10, what="the audit notes")
    assert notes[0]["audit"] == "other_team" and "T0THEIRS" in notes[0]["reason"]
    assert refusals[RefusalReason.OTHER_TEAM] == 1
    assert unchanged(audited, incident)
    assert not audited.slack.ephemeral()  # no work done for them, not even a reply


def test_another_workspaces_slash_command_is_refused(
    audited: ChatRig, refusals: Counter[RefusalReason]
) -> None:
    body = audited.slack.command_body(user="U1", text="incidents").replace(
        b"team_id=T0FAKE", b"team_id=T0THEIRS")
    assert b"T0THEIRS" in body
    assert audited.slack.post(audited.url, body, audited.slack.signed_headers(body)).status == 403
    wait(lambda: refusals[RefusalReason.OTHER_TEAM] == 1, timeout=10, what="the refusal")
    assert not audited.slack.ephemeral()
    # our own workspace's command is answered
    assert audited.slack.command(audited.url, user="U1", text="help").status == 200
    wait(lambda: audited.slack.ephemeral("U1"), timeout=10, what="the ephemeral answer")


def test_an_action_id_never_sent_is_refused_and_audited(
    audited: ChatRig, refusals: Counter[RefusalReason]
) -> None:
    incident = audited.open_incident()
    answer = audited.slack.click(audited.url, user="U1", action_id="force_remediate",
                                 value=str(incident))
    assert answer.status == 403 and b"never sent" in answer.body
    notes = wait(lambda: audit_notes(audited, incident), timeout=10, what="the audit notes")
    assert notes[0]["audit"] == "unknown_action"
    assert refusals[RefusalReason.UNKNOWN_ACTION] == 1
    assert unchanged(audited, incident)


def test_an_incident_that_does_not_exist_is_refused_and_counted(
    audited: ChatRig, refusals: Counter[RefusalReason]
) -> None:
    assert audited.slack.click(audited.url, user="U1", action_id=APPROVE, value="4242").status == 200
    audited.slack.click(audited.url, user="U1", action_id=APPROVE, value="٨٠")  # not ASCII digits
    wait(lambda: len(audited.slack.ephemeral("U1")) == 2, timeout=10, what="two ephemeral answers")
    assert refusals[RefusalReason.NO_INCIDENT] == 2
    assert audited.store.list_incidents().incidents == []


def test_another_clusters_incident_is_refused_and_audited(
    audited: ChatRig, refusals: Counter[RefusalReason]
) -> None:
    theirs = audited.open_incident(cluster="eu-west")
    audited.slack.click(audited.url, user="U1", action_id=APPROVE, value=str(theirs))
    wait(lambda: audited.slack.ephemeral("U1"), timeout=10, what="the ephemeral answer")
    assert "belongs to cluster eu-west" in audited.slack.ephemeral("U1")[0].text
    notes = audit_notes(audited, theirs)
    assert notes and notes[0]["audit"] == "other_cluster" and notes[0]["refused"] == "approve"
    assert refusals[RefusalReason.OTHER_CLUSTER] == 1
    assert unchanged(audited, theirs)


def test_a_non_approver_is_refused_audited_and_counted(
    audited: ChatRig, refusals: Counter[RefusalReason]
) -> None:
    incident = audited.open_incident()
    audited.slack.click(audited.url, user="U9", action_id=APPROVE, value=str(incident))
    notes = wait(lambda: audit_notes(audited, incident), timeout=10, what="the audit notes")
    assert notes[0]["user"] == "U9"
    assert refusals[RefusalReason.NOT_APPROVER] == 1
    assert unchanged(audited, incident)


@pytest.mark.parametrize("tamper", ["forged", "tampered", "stale", "replayed", "unsigned"])
def test_signature_refusals_are_counted(
    audited: ChatRig, refusals: Counter[RefusalReason], tamper: str
) -> None:
    incident = audited.open_incident()
    body = audited.slack.action_body(user="U1", action_id=APPROVE, value=str(incident))
    headers = audited.slack.signed_headers(body)
    if tamper == "forged":
        headers["X-Slack-Signature"] = "v0=" + "0" * 64
    elif tamper == "tampered":  # a valid signature over another body
        body = body.replace(b"U1", b"U2", 1)
    elif tamper == "stale":
        headers = audited.slack.signed_headers(body, timestamp=int(time.time()) - 301)
    elif tamper == "replayed":
        body = audited.slack.action_body(user="U1", action_id=ButtonAction.REJECT.value,
                                              value=str(incident))
        headers = audited.slack.signed_headers(body)
        assert audited.slack.post(audited.url, body, headers).status == 200
        wait(lambda: audited.store.get_incident(incident).decisions, timeout=10,
             what="the decision")
    else:
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
    assert audited.slack.post(audited.url, body, headers).status == 401
    assert refusals[RefusalReason.SIGNATURE] == 1
    assert len(audited.store.get_incident(incident).decisions) == (1 if tamper == "replayed" else 0)


def test_the_workspace_is_unknown_while_slack_is_down_then_learned(
    slack: FakeSlack, sqlite_template: Any, tmp_path: Path
) -> None:
    slack.fail(status=500, seconds=3600, methods=["auth.test"])
    refusals: Counter[RefusalReason] = Counter()
    rig = start_rig(slack, sqlite_template, tmp_path, on_refused=lambda r: refusals.update([r]))
    try:
        incident = rig.open_incident()
        # fail closed: nothing proves the click comes from our workspace
        assert rig.slack.click(rig.url, user="U1", action_id=APPROVE,
                               value=str(incident)).status == 403
        assert unchanged(rig, incident)
        slack.heal()
        assert rig.chat.handlers is not None and rig.chat.handlers.workspace is not None
        rig.chat.handlers.workspace._asked_at = None  # the retry period has passed
        assert rig.slack.click(rig.url, user="U1", action_id=APPROVE,
                               value=str(incident)).status == 200
        wait(lambda: rig.store.get_incident(incident).decisions, timeout=10, what="the decision")
        assert refusals[RefusalReason.OTHER_TEAM] == 1
    finally:
        rig.stop()
