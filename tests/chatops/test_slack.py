"""The Slack adapter end to end over HTTP: the fake Slack posts signed clicks and slash commands to
the agent's /slack/events, the real store records, the deliverer posts through the outbox."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.chatops.blocks import ButtonAction
from agent.fakes.slack import FakeSlack
from agent.model.lifecycle import EventKind, IncidentStatus
from tests.chatops.harness import CHANNEL, ChatRig, now, start_rig
from tests.support.approvals import zone_split

S = IncidentStatus
APPROVE, REJECT, SNOOZE = (a.value for a in ButtonAction)


def posted(rig: ChatRig, incident: int) -> tuple[str, str]:
    rig.deliver_until(lambda: bool(rig.slack.calls("chat.postMessage", ok_only=True)))
    detail = rig.store.get_incident(incident)
    refs = [m.external_ref for m in detail.messages if m.external_ref]
    channel, _, ts = refs[0].partition("|")
    return channel, ts


def action_ids(blocks: list[dict[str, Any]]) -> list[str]:
    return [e["action_id"] for b in blocks if b["type"] == "actions" for e in b["elements"]]


def test_finding_posted_with_buttons_then_approved_updates_message_and_thread(rig: ChatRig) -> None:
    incident = rig.open_incident()
    channel, ts = posted(rig, incident)
    message = rig.slack.message(channel, ts)
    assert message is not None and channel == CHANNEL
    assert action_ids(message.blocks) == [APPROVE, REJECT, SNOOZE]
    assert "zone_split_blocked" in message.text or "Zone split" in message.text

    answer = rig.slack.click(rig.url, user="U1", action_id=APPROVE, value=str(incident))
    assert answer.status == 200
    rig.wait(lambda: rig.store.get_incident(incident).incident.status is S.APPROVED)
    detail = rig.store.get_incident(incident)
    assert [(d.outcome.value, d.actor_id, d.actor_name) for d in detail.decisions] == [
        ("approve", "U1", "alice")]
    rig.wait(lambda: any("approved by alice" in m.text for m in rig.slack.ephemeral("U1")))

    rig.deliver_until(lambda: not action_ids(rig.slack.message(channel, ts).blocks))  # type: ignore[union-attr]
    updated = rig.slack.message(channel, ts)
    assert updated is not None and "Approved* by alice" in json.dumps(updated.blocks)
    rig.deliver_until(lambda: any(m.thread_ts == ts and "Approved by alice" in m.text
                                  for m in rig.slack.messages()))
    assert len(rig.slack.calls("chat.postMessage", ok_only=True)) == 2  # the post, one reply


def test_redetection_updates_the_message_instead_of_posting_again(rig: ChatRig) -> None:
    incident = rig.open_incident()
    channel, ts = posted(rig, incident)
    rig.store.add_event(incident, EventKind.REDETECTED, now=now(), actor="zonemedic",
                        detail={"metrics": {"status": "ok", "utilization_now": 38.0,
                                            "utilization_baseline": 85.0}})
    rig.deliver_until(lambda: "38% now (baseline 85%)" in json.dumps(
        rig.slack.message(channel, ts).blocks))  # type: ignore[union-attr]
    assert len(rig.slack.calls("chat.postMessage", ok_only=True)) == 1
    assert rig.slack.calls("chat.update", ok_only=True)


def test_chart_uploaded_into_the_thread_with_v2_flow(
    slack: FakeSlack, sqlite_template: Path, tmp_path: Path
) -> None:
    t0 = time.time() - 3600
    samples = [(t0 + 60 * i, 85.0 if i < 40 else 40.0) for i in range(60)]
    rig = start_rig(slack, sqlite_template, tmp_path, serve=False,
                    series=lambda incident: (samples, 85.0))
    try:
        incident = rig.open_incident()
        channel, ts = posted(rig, incident)
        rig.deliver_until(lambda: bool(slack.calls("files.completeUploadExternal", ok_only=True)))
        complete = slack.calls("files.completeUploadExternal")[0].args
        assert (complete["channel_id"], complete["thread_ts"]) == (channel, ts)
        message = slack.message(channel, ts)
        assert message is not None and message.files
        assert (slack.uploaded(message.files[0]) or b"").startswith(b"\x89PNG")
    finally:
        rig.stop()


@pytest.mark.parametrize("prometheus", [False, True])
def test_no_metrics_no_chart(
    slack: FakeSlack, sqlite_template: Path, tmp_path: Path, prometheus: bool
) -> None:
    """Without Prometheus no chart is queued; with it but no samples of the job, the chart is
    retried for a while (here: no patience at all), then left out."""
    asked: list[int] = []

    def no_samples(incident: Any) -> None:
        asked.append(incident.id)

    rig = start_rig(slack, sqlite_template, tmp_path, serve=False,
                    series=no_samples if prometheus else None)
    try:
        assert rig.chat.deliverer is not None
        rig.chat.deliverer.chart_patience = timedelta(0)
        incident = rig.open_incident()
        posted(rig, incident)
        rig.deliver_until(lambda: all(m.status.value == "delivered"
                                      for m in rig.store.get_incident(incident).messages)
                          and (not prometheus or bool(asked)))
        assert asked == ([incident] if prometheus else [])
        assert not slack.calls("files.getUploadURLExternal")
    finally:
        rig.stop()


def test_non_approver_refused_audited_nothing_changes(rig: ChatRig) -> None:
    incident = rig.open_incident()
    answer = rig.slack.click(rig.url, user="U9", action_id=APPROVE, value=str(incident))
    assert answer.status == 200
    rig.wait(lambda: bool(rig.slack.ephemeral("U9")))
    assert "not an approver" in rig.slack.ephemeral("U9")[0].text
    detail = rig.store.get_incident(incident)
    assert detail.incident.status is S.AWAITING_APPROVAL and not detail.decisions
    notes = [e for e in detail.events if e.kind is EventKind.NOTE]
    assert [(e.actor, e.detail["refused"]) for e in notes] == [("U9", "approve")]


def test_an_approver_removed_from_the_playbook_cannot_use_the_original_button(
    slack: FakeSlack, sqlite_template: Path, tmp_path: Path
) -> None:
    """U5 and U6 approve zone-split's fixes when the incident is posted; U5 is then removed from
    the playbook and the agent restarted. The original post's Approve button, clicked by U5 (a
    real signed request), is refused at click time: told ephemerally, audited on the timeline,
    counted; U6 still approves with the same button."""
    refused: list[str] = []
    before = start_rig(slack, sqlite_template, tmp_path, users=[], usergroups=[],
                       playbooks=[zone_split("U5, U6")])
    try:
        incident = before.open_incident(approvers=["U5", "U6"])
        channel, ts = posted(before, incident)
        message = slack.message(channel, ts)
        assert message is not None
        (approve,) = [e for b in message.blocks if b["type"] == "actions" for e in b["elements"]
                      if e["action_id"] == APPROVE]
    finally:
        before.stop()
    after = start_rig(slack, sqlite_template, tmp_path, users=[], usergroups=[],
                      playbooks=[zone_split("U6")], shared_db=tmp_path / "chat.db",
                      on_refused=lambda reason: refused.append(reason.value))
    try:
        answer = slack.click(after.url, user="U5", action_id=approve["action_id"],
                             value=approve["value"])
        assert answer.status == 200
        after.wait(lambda: bool(slack.ephemeral("U5")))
        told = slack.ephemeral("U5")[0].text
        assert f"incident {incident} not approved: you are not an approver" in told
        assert "approval.approvers of playbook zone-split" in told
        detail = after.store.get_incident(incident)
        assert detail.incident.status is S.AWAITING_APPROVAL and not detail.decisions
        (note,) = [e for e in detail.events if e.kind is EventKind.NOTE]
        assert (note.actor, note.detail["refused"], note.detail["source"],
                note.detail["audit"]) == ("U5", "approve", "slack", "not_approver")
        assert refused == ["not_approver"]

        slack.click(after.url, user="U6", action_id=approve["action_id"], value=approve["value"])
        after.wait(lambda: after.store.get_incident(incident).incident.status is S.APPROVED)
        assert [d.actor_id for d in after.store.get_incident(incident).decisions] == ["U6"]
    finally:
        after.stop()


def test_usergroup_member_approves_and_membership_is_cached(rig: ChatRig) -> None:
    first, second = rig.open_incident("a"), rig.open_incident("b")
    rig.slack.click(rig.url, user="U3", action_id=REJECT, value=str(first))
    rig.wait(lambda: rig.store.get_incident(first).incident.status is S.REJECTED)
    rig.slack.click(rig.url, user="U3", action_id=SNOOZE, value=str(second))
    rig.wait(lambda: rig.store.get_incident(second).incident.status is S.SNOOZED)
    assert len(rig.slack.calls("usergroups.users.list")) == 1


def test_no_approvers_means_no_buttons_and_clicks_refused(
    slack: FakeSlack, sqlite_template: Path, tmp_path: Path
) -> None:
    rig = start_rig(slack, sqlite_template, tmp_path, users=[], usergroups=[])
    try:
        incident = rig.open_incident()
        channel, ts = posted(rig, incident)
        message = slack.message(channel, ts)
        assert message is not None and not action_ids(message.blocks)
        assert "Approvals are off" in json.dumps(message.blocks)
        slack.click(rig.url, user="U1", action_id=APPROVE, value=str(incident))
        rig.wait(lambda: bool(slack.ephemeral("U1")))
        assert "approvals are off" in slack.ephemeral("U1")[0].text
        assert rig.store.get_incident(incident).incident.status is S.AWAITING_APPROVAL
    finally:
        rig.stop()


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        ("forged", "signature does not match"),
        ("stale", "outside the 5-minute window"),
        ("tampered", "signature does not match"),
        ("unsigned", "missing signature headers"),
    ],
)
def test_bad_requests_get_401_before_any_work(rig: ChatRig, tamper: str, reason: str) -> None:
    incident = rig.open_incident()
    body = rig.slack.action_body(user="U1", action_id=APPROVE, value=str(incident))
    headers = rig.slack.signed_headers(body)
    if tamper == "forged":
        headers["X-Slack-Signature"] = "v0=" + "0" * 64
    elif tamper == "stale":
        headers = rig.slack.signed_headers(body, timestamp=int(time.time()) - 301)
    elif tamper == "tampered":
        body = body.replace(str(incident).encode(), b"999", 1)
    else:
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
    calls_before = len(rig.slack.calls())
    answer = rig.slack.post(rig.url, body, headers)
    assert answer.status == 401
    assert reason in answer.body.decode()
    assert rig.store.get_incident(incident).incident.status is S.AWAITING_APPROVAL
    assert len(rig.slack.calls()) == calls_before  # no lookup, no reply: no work at all


def test_replayed_request_refused(rig: ChatRig) -> None:
    incident = rig.open_incident()
    body = rig.slack.action_body(user="U1", action_id=REJECT, value=str(incident))
    headers = rig.slack.signed_headers(body)
    assert rig.slack.post(rig.url, body, headers).status == 200
    again = rig.slack.post(rig.url, body, headers)
    assert again.status == 401 and b"already received" in again.body
    rig.wait(lambda: rig.store.get_incident(incident).incident.status is S.REJECTED)
    assert len(rig.store.get_incident(incident).decisions) == 1


def test_expired_approval_changes_nothing_and_says_why(rig: ChatRig) -> None:
    incident = rig.open_incident()
    assert rig.store.transition(incident, S.AWAITING_APPROVAL, S.EXPIRED, actor="zonemedic",
                                now=now()).applied
    rig.slack.click(rig.url, user="U1", action_id=APPROVE, value=str(incident))
    rig.wait(lambda: bool(rig.slack.ephemeral("U1")))
    assert "expired" in rig.slack.ephemeral("U1")[0].text
    detail = rig.store.get_incident(incident)
    assert detail.incident.status is S.EXPIRED and not detail.decisions


def test_superseded_incident_changes_nothing_and_says_why(rig: ChatRig) -> None:
    incident = rig.open_incident()
    assert rig.store.transition(incident, S.AWAITING_APPROVAL, S.SUPERSEDED, actor="zonemedic",
                                now=now(), detail={"reason": "the job was recreated"}).applied
    rig.slack.click(rig.url, user="U2", action_id=APPROVE, value=str(incident))
    rig.wait(lambda: bool(rig.slack.ephemeral("U2")))
    assert "no longer current" in rig.slack.ephemeral("U2")[0].text
    assert not rig.store.get_incident(incident).decisions


def test_unknown_incident_and_bad_value(rig: ChatRig) -> None:
    rig.slack.click(rig.url, user="U1", action_id=APPROVE, value="4242")
    rig.slack.click(rig.url, user="U2", action_id=APPROVE, value="not-a-number")
    rig.wait(lambda: bool(rig.slack.ephemeral("U1")) and bool(rig.slack.ephemeral("U2")))
    assert "no incident #4242" in rig.slack.ephemeral("U1")[0].text
    assert "names no incident" in rig.slack.ephemeral("U2")[0].text


def test_fifty_concurrent_clicks_from_three_approvers_one_decision(rig: ChatRig) -> None:
    incident = rig.open_incident()
    users = ["U1", "U2", "U3"]
    statuses: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(50)

    def click(i: int) -> None:
        start.wait()
        answer = rig.slack.click(rig.url, user=users[i % 3], action_id=APPROVE,
                                 value=str(incident))
        with lock:
            statuses.append(answer.status)

    threads = [threading.Thread(target=click, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert statuses == [200] * 50
    rig.wait(lambda: len(rig.slack.ephemeral()) == 50, timeout=60)
    detail = rig.store.get_incident(incident)
    assert detail.incident.status is S.APPROVED
    assert len(detail.decisions) == 1
    winner = detail.decisions[0].actor_name
    texts = [m.text for m in rig.slack.ephemeral()]
    assert sum("was already approved" in t for t in texts) == 49
    assert all(f"by {winner}" in t for t in texts)


@pytest.mark.parametrize(
    ("user", "text", "expected"),
    [
        ("U9", "help", "show ID"),
        ("U9", "", "show ID"),
        ("U9", "incidents", "zone_split_blocked ml/resnet"),
        ("U9", "incidents job ml/other", "No incidents for job ml/other"),
        ("U9", "show 1", "Timeline"),
        ("U9", "show 99", "There is no incident #99"),
        ("U9", "stats since 1d", "Incidents since"),
        ("U9", "sweep", "approvers only"),
        ("U1", "sweep", "Sweep done: 3 jobs, 1 finding"),
        ("U3", "sweep", "Sweep done: 3 jobs, 1 finding"),  # a member of the approvers' user group
        ("U9", "frobnicate", "unknown command"),
    ],
)
def test_slash_commands_reply_ephemerally(
    slack: FakeSlack, sqlite_template: Path, tmp_path: Path, user: str, text: str, expected: str
) -> None:
    rig = start_rig(slack, sqlite_template, tmp_path, sweep=lambda: "3 jobs, 1 finding")
    try:
        rig.open_incident()
        answer = slack.command(rig.url, user=user, text=text)
        assert answer.status == 200
        rig.wait(lambda: bool(slack.ephemeral(user)))
        reply = slack.ephemeral(user)[0]
        assert expected in reply.text + json.dumps(reply.blocks)
        assert reply.channel == CHANNEL
    finally:
        rig.stop()


def test_click_after_the_deadline_changes_nothing(rig: ChatRig) -> None:
    incident = rig.open_incident(awaiting=False)
    deadline = now() + timedelta(milliseconds=300)
    assert rig.store.request_approval(incident, deadline=deadline, now=now(),
                                      actor="zonemedic").applied
    rig.wait(lambda: now() > deadline)
    rig.slack.click(rig.url, user="U1", action_id=APPROVE, value=str(incident))
    rig.wait(lambda: bool(rig.slack.ephemeral("U1")))
    assert "expired" in rig.slack.ephemeral("U1")[0].text
    detail = rig.store.get_incident(incident)
    assert detail.incident.status is S.AWAITING_APPROVAL and not detail.decisions


def test_usergroup_unreadable_fails_closed(rig: ChatRig) -> None:
    incident = rig.open_incident()
    rig.slack.fail(status=500, seconds=30, methods=["usergroups.users.list"])
    rig.slack.click(rig.url, user="U3", action_id=APPROVE, value=str(incident))
    rig.wait(lambda: bool(rig.slack.ephemeral("U3")))
    assert "could not check user group membership" in rig.slack.ephemeral("U3")[0].text
    assert rig.store.get_incident(incident).incident.status is S.AWAITING_APPROVAL


def test_two_replicas_receiving_the_same_click_decide_once(
    slack: FakeSlack, sqlite_template: Path, tmp_path: Path
) -> None:
    first = start_rig(slack, sqlite_template, tmp_path)
    second = start_rig(slack, sqlite_template, tmp_path, shared_db=tmp_path / "chat.db")
    try:
        incident = first.open_incident()
        body = slack.action_body(user="U1", action_id=APPROVE, value=str(incident))
        headers = slack.signed_headers(body)
        answers: list[int] = []
        threads = [threading.Thread(target=lambda rig=rig: answers.append(
            slack.post(rig.url, body, headers).status)) for rig in (first, second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert answers == [200, 200], "each replica saw the click once: no replay for either"
        first.wait(lambda: len(slack.ephemeral("U1")) == 2)
        detail = first.store.get_incident(incident)
        assert detail.incident.status is S.APPROVED and len(detail.decisions) == 1
        texts = sorted(m.text for m in slack.ephemeral("U1"))
        assert sum("was already approved by alice" in t for t in texts) == 1
    finally:
        second.stop()
        first.stop()
