"""`zonemedic incidents approve|reject|snooze` through the real command line, on SQLite and
PostgreSQL: exit 0 when this call recorded the decision, 1 naming who decided when it did not, 2 on
bad input with one line and nothing written."""

from __future__ import annotations

import getpass
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.cli import main
from agent.fakes.slack import FakeSlack
from agent.model.lifecycle import DecisionOutcome, DecisionSource, EventKind, IncidentStatus
from agent.store.repository import IncidentStore
from tests.store.helpers import finding
from tests.support.approvals import queue_proposal, zone_split

S = IncidentStatus


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def incident(store: IncidentStore) -> int:
    incident_id = store.record_finding(finding()).incident.id
    store.transition(incident_id, S.OPEN, S.AWAITING_APPROVAL, actor="zonemedic",
                     now=datetime.now(UTC))
    return incident_id


def test_approve_then_a_second_decision_names_the_first(
    capsys: pytest.CaptureFixture[str], db_url: str, store: IncidentStore, incident: int
) -> None:
    code, out, err = cli(capsys, "incidents", "approve", str(incident), "--by", "carol",
                         "--reason", "looks right", "--database", db_url)
    assert (code, out, err) == (0, f"incident {incident} approved by carol\n", "")
    detail = store.get_incident(incident)
    assert detail.incident.status is S.APPROVED
    (decision,) = detail.decisions
    assert (decision.actor_id, decision.source, decision.comment) == (
        "carol", DecisionSource.CLI, "looks right")

    code, out, err = cli(capsys, "incidents", "reject", str(incident), "--by", "dave",
                         "--database", db_url)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert f"incident {incident} was already approved by carol (via cli) at " in err
    assert f"{decision.decided_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" in err
    assert len(store.get_incident(incident).decisions) == 1


def test_by_defaults_to_the_os_user(capsys: pytest.CaptureFixture[str], db_url: str,
                                    store: IncidentStore, incident: int) -> None:
    code, out, _ = cli(capsys, "incidents", "reject", str(incident), "--database", db_url)
    assert code == 0 and out == f"incident {incident} rejected by {getpass.getuser()}\n"
    assert store.get_incident(incident).decisions[0].actor_id == getpass.getuser()


def test_snooze_for_and_json(capsys: pytest.CaptureFixture[str], db_url: str,
                             store: IncidentStore, incident: int) -> None:
    before = datetime.now(UTC)
    code, out, _ = cli(capsys, "incidents", "snooze", str(incident), "--for", "2h", "--by", "eve",
                       "--output", "json", "--database", db_url)
    assert code == 0
    data = json.loads(out)
    assert (data["recorded"], data["reason"], data["status"], data["decided_by"]) == (
        True, "recorded", "snoozed", "eve")
    until = store.get_incident(incident).snoozed_until
    assert until is not None
    assert before + timedelta(hours=2) <= until <= datetime.now(UTC) + timedelta(hours=2)
    assert data["snoozed_until"] == until.isoformat()
    assert store.get_incident(incident).decisions[0].outcome is DecisionOutcome.SNOOZE


def test_an_incident_no_longer_current_exits_1(capsys: pytest.CaptureFixture[str], db_url: str,
                                                store: IncidentStore, incident: int) -> None:
    store.transition(incident, S.AWAITING_APPROVAL, S.SUPERSEDED, actor="zonemedic",
                     now=datetime.now(UTC))
    code, out, err = cli(capsys, "incidents", "approve", str(incident), "--database", db_url)
    assert code == 1 and out == ""
    assert f"zonemedic: incident {incident} is no longer current: superseded by zonemedic at " in err
    assert store.get_incident(incident).decisions == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["approve", "abc"], "ID: expected a whole number from 1 to 2147483647, got 'abc'"),
        (["approve", "-3"], "ID: expected a whole number from 1 to 2147483647, got '-3'"),
        (["reject", "0"], "ID: must be from 1 to 2147483647, got 0"),
        (["approve", "1.5"], "ID: expected a whole number"),
        (["approve", "٨٠"], "ID: expected a whole number"),
        (["approve", "99999999999"], "ID: must be from 1 to 2147483647"),
        (["snooze", "{id}", "--for", "soon"], "--for: expected a duration like"),
        (["snooze", "{id}", "--for", "0s"], "--for: expected a positive duration"),
        (["snooze", "{id}", "--for", "365d"], "snooze_for: expected a duration above 0 and at most"),
        (["approve", "{id}", "--by", "  "], "--by: expected a name"),
        (["approve", "{id}", "--output", "xml"], "--output: expected text or json"),
        (["approve", "{id}", "--reason", "x" * 2001], "reason: at most 2000 characters"),
        (["approve", "123456"], "no incident 123456; nothing changed"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], db_url: str,
                                         store: IncidentStore, incident: int, argv: list[str],
                                         message: str) -> None:
    argv = [a.replace("{id}", str(incident)) for a in argv]
    code, out, err = cli(capsys, "incidents", *argv, "--database", db_url)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("zonemedic: error: ")
    assert message in err
    detail = store.get_incident(incident)
    assert detail.incident.status is S.AWAITING_APPROVAL and detail.decisions == []


def test_an_approver_removed_from_the_playbook_is_refused_exit_3(
    capsys: pytest.CaptureFixture[str], db_url: str, store: IncidentStore, incident: int,
    tmp_path: Path
) -> None:
    """The configuration given (`--config`) is the one in force: zone-split listed U5 and U6
    when it proposed the fix, its file lists U6 now. `--by U5` exits 3 with the reason (a note
    on the timeline), `--by U6` is recorded."""
    queue_proposal(store, incident, approvers=["U5", "U6"])
    zone_split("U6", directory=tmp_path / "playbooks")
    config = tmp_path / "config.yaml"
    config.write_text(f"playbooks_dir: {tmp_path / 'playbooks'}\n"
                      "slack: {approvers: {users: [U1]}}\n")
    code, out, err = cli(capsys, "incidents", "approve", str(incident), "--by", "U5",
                         "--config", str(config), "--database", db_url)
    assert (code, out) == (3, "")
    assert err.splitlines() == [
        f"zonemedic: error: incident {incident} not approved: U5 is not an approver "
        "(slack.approvers and the approval.approvers of playbook zone-split, as configured now, "
        "list neither the user nor a user group of theirs); nothing changed"]
    detail = store.get_incident(incident)
    assert detail.decisions == [] and detail.incident.status is S.AWAITING_APPROVAL
    (note,) = [e for e in detail.events if e.kind is EventKind.NOTE]
    assert (note.actor, note.detail["refused"], note.detail["source"]) == ("U5", "approve", "cli")

    code, _, err = cli(capsys, "incidents", "approve", str(incident), "--by", "U6",
                       "--config", str(config), "--database", db_url)
    assert (code, err) == (0, "")


def test_a_missing_playbook_directory_is_bad_input_when_the_incident_names_its_playbook(
    capsys: pytest.CaptureFixture[str], db_url: str, store: IncidentStore, incident: int,
    tmp_path: Path
) -> None:
    queue_proposal(store, incident, approvers=["U5"])
    config = tmp_path / "config.yaml"
    config.write_text(f"playbooks_dir: {tmp_path / 'nowhere'}\n")
    code, _, err = cli(capsys, "incidents", "approve", str(incident), "--by", "U5",
                       "--config", str(config), "--database", db_url)
    assert code == 2 and err.startswith("zonemedic: error: playbooks_dir: ")
    assert "the approvers in force are read from the playbooks" in err
    assert store.get_incident(incident).decisions == []


def test_a_user_group_in_force_is_asked_of_slack(
    capsys: pytest.CaptureFixture[str], db_url: str, store: IncidentStore, incident: int,
    tmp_path: Path
) -> None:
    """`slack.approvers.usergroups` in force: the CLI asks Slack (the fake Slack Web API over
    HTTP, with the configured bot token) who is in the group; a member decides, others exit 3."""
    queue_proposal(store, incident, approvers=[])
    zone_split("", directory=tmp_path / "playbooks")
    with FakeSlack(usergroups={"S1": ["U3"]}) as slack:
        (tmp_path / "bot-token").write_text(slack.bot_token)
        (tmp_path / "signing-secret").write_text(slack.signing_secret)
        config = tmp_path / "config.yaml"
        config.write_text(
            f"playbooks_dir: {tmp_path / 'playbooks'}\n"
            f"slack: {{enabled: true, api_url: '{slack.base_url}', "
            f"bot_token_file: {tmp_path / 'bot-token'}, "
            f"signing_secret_file: {tmp_path / 'signing-secret'}, "
            "approvers: {usergroups: [S1]}}\n")
        code, _, err = cli(capsys, "incidents", "reject", str(incident), "--by", "U9",
                           "--config", str(config), "--database", db_url)
        assert code == 3 and "U9 is not an approver" in err
        code, _, err = cli(capsys, "incidents", "reject", str(incident), "--by", "U3",
                           "--config", str(config), "--database", db_url)
        assert (code, err) == (0, ""), err
        # one look-up per command (each asks Slack afresh)
        assert [c.args.get("usergroup") for c in slack.calls("usergroups.users.list")] == [
            "S1", "S1"]
