"""Socket Mode: no inbound endpoint; the agent opens a websocket to the URL `apps.connections.open`
returns (the fake's ws://127.0.0.1 endpoint speaking the Socket Mode envelope), acknowledges each
envelope over it, and does the work after, exactly as in HTTP mode."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.chatops.blocks import ButtonAction
from agent.fakes.slack import FakeSlack
from agent.model.lifecycle import IncidentStatus
from agent.settings import SlackMode
from tests.chatops.harness import ChatRig, start_rig


@pytest.fixture
def socket_rig(slack: FakeSlack, sqlite_template: Path, tmp_path: Path) -> Iterator[ChatRig]:
    rig = start_rig(slack, sqlite_template, tmp_path, mode=SlackMode.SOCKET,
                    sweep=lambda: "1 job")
    assert rig.server is None and not rig.chat.routes, "no inbound endpoint in Socket Mode"
    rig.chat.start()
    try:
        rig.wait(lambda: slack.socket_connected)
        yield rig
    finally:
        rig.stop()


def test_click_over_socket_mode_is_acked_and_decided(socket_rig: ChatRig) -> None:
    slack = socket_rig.slack
    incident = socket_rig.open_incident()
    assert slack.calls("apps.connections.open", ok_only=True)
    envelope = slack.socket_send("interactive", slack.action_payload(
        user="U2", action_id=ButtonAction.APPROVE.value, value=str(incident)))
    socket_rig.wait(lambda: slack.acknowledged(envelope))
    socket_rig.wait(
        lambda: socket_rig.store.get_incident(incident).incident.status is IncidentStatus.APPROVED)
    socket_rig.wait(lambda: any("approved by bob" in m.text for m in slack.ephemeral("U2")))


def test_non_approver_over_socket_mode_is_refused(socket_rig: ChatRig) -> None:
    slack = socket_rig.slack
    incident = socket_rig.open_incident()
    envelope = slack.socket_send("interactive", slack.action_payload(
        user="U9", action_id=ButtonAction.APPROVE.value, value=str(incident)))
    socket_rig.wait(lambda: slack.acknowledged(envelope))
    socket_rig.wait(lambda: bool(slack.ephemeral("U9")))
    assert "not an approver" in slack.ephemeral("U9")[0].text
    assert socket_rig.store.get_incident(incident).incident.status is IncidentStatus.AWAITING_APPROVAL


def test_slash_command_over_socket_mode(socket_rig: ChatRig) -> None:
    slack = socket_rig.slack
    socket_rig.open_incident()
    envelope = slack.socket_send("slash_commands", {
        "command": "/zonemedic", "text": "incidents", "user_id": "U9", "channel_id": "C0FAKE",
        "team_id": slack.team_id, "response_url": "http://127.0.0.1:1/unused",
        "trigger_id": "t1"})
    socket_rig.wait(lambda: slack.acknowledged(envelope))
    socket_rig.wait(lambda: bool(slack.ephemeral("U9")))
    assert "ml/resnet" in slack.ephemeral("U9")[0].text + str(slack.ephemeral("U9")[0].blocks)
