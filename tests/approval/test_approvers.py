"""Who may decide: the rule (pure, a table) and the approvers in force read from the playbooks
loaded now, never from what the incident's queued proposal recorded (over the real store)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.approval.approvers import Approvers, Authority, authorize
from agent.model.incident import Actor
from agent.model.lifecycle import DecisionSource, MessageKind
from agent.playbook.model import Playbook
from agent.playbook.schema import parse_playbook
from agent.settings import Settings, SlackApprovers, SlackSettings
from agent.store.repository import IncidentStore
from tests.store.helpers import finding

SLACK, CLI, API, AUTO = (DecisionSource.SLACK, DecisionSource.CLI, DecisionSource.API,
                         DecisionSource.AUTO)
GROUPS = {"S1": frozenset({"U3"})}


def members(group: str) -> frozenset[str] | None:
    return GROUPS.get(group)  # S2: cannot be read now


NOBODY = Approvers()
LISTED = Approvers(users=frozenset({"U1"}))
GROUPED = Approvers(usergroups=("S1",))
UNREADABLE = Approvers(usergroups=("S2",))


@pytest.mark.parametrize(("actor", "approvers", "allowed", "reason"), [
    (Actor("zonemedic", None, AUTO), NOBODY, True, ""),
    (Actor("zonemedic", None, AUTO), LISTED, True, ""),
    # nobody configured: never "anyone in the channel"; the CLI and the API decide on their own
    (Actor("U1", "alice", SLACK), NOBODY, False, "approvals are off: no approvers are configured"),
    (Actor("root", None, CLI), NOBODY, True, ""),
    (Actor("ci-bot", None, API), NOBODY, True, ""),
    # someone configured: every source must name an approver
    (Actor("U1", "alice", SLACK), LISTED, True, ""),
    (Actor("U1", None, CLI), LISTED, True, ""),
    (Actor("U1", None, API), LISTED, True, ""),
    (Actor("U9", "mallory", SLACK), LISTED, False, "you are not an approver (slack.approvers"),
    (Actor("root", None, CLI), LISTED, False, "root is not an approver (slack.approvers"),
    (Actor("U9", None, API), LISTED, False, "U9 is not an approver"),
    (Actor("U3", None, SLACK), GROUPED, True, ""),
    (Actor("U3", None, API), GROUPED, True, ""),
    (Actor("U9", None, SLACK), GROUPED, False, "you are not an approver"),
    (Actor("U3", None, SLACK), UNREADABLE, False, "could not check user group membership"),
    (Actor("U3", None, CLI), UNREADABLE, False, "could not check user group membership"),
    (Actor("U1", None, CLI), Approvers(users=frozenset({"U1"}), usergroups=("S2",)), True, ""),
])
def test_the_rule(actor: Actor, approvers: Approvers, allowed: bool, reason: str) -> None:
    verdict = authorize(actor, approvers, members=members)
    assert verdict.allowed is allowed
    assert verdict.reason.startswith(reason) and "\n" not in verdict.reason


def test_groups_without_a_way_to_read_them_are_unreadable() -> None:
    verdict = authorize(Actor("U3", None, CLI), GROUPED, members=None)
    assert not verdict.allowed and "could not check" in verdict.reason


def playbook(approvers: str, *, name: str = "zone-split", enabled: bool = True,
             action: str = "propose_colocation") -> Playbook:
    approval = f"\n    approval: {{approvers: [{approvers}]}}" if action == "propose_colocation" else ""
    return parse_playbook(
        f"name: {name}\nenabled: {str(enabled).lower()}\ntriggers: [{{type: zone_split}}]\n"
        f"actions:\n  - type: {action}{approval}\n", path=Path(f"{name}.yaml"))


def _proposed(store: IncidentStore, *, by: str = "zone-split") -> int:
    """An incident whose proposal the playbook `by` queued, recording approvers U5 and U6."""
    incident = store.record_finding(finding()).incident.id
    store.enqueue_message(
        MessageKind.POST, now=datetime.now(UTC), incident_id=incident, channel="C0FAKE",
        payload={"action": "propose_colocation", "playbook": by, "incident_id": incident,
                 "approval": {"approvers": ["U5", "U6"]}},
    )
    return incident


@pytest.mark.parametrize(("loaded", "users", "where"), [
    ([playbook("U5, U6")], {"U1", "U5", "U6"}, ("zone-split",)),
    ([playbook("U6")], {"U1", "U6"}, ("zone-split",)),  # U5 removed from the playbook since
    ([playbook("")], {"U1"}, ()),
    ([], {"U1"}, ()),  # the playbook was removed
    ([playbook("U5", name="renamed")], {"U1"}, ()),
    ([playbook("U5", enabled=False)], {"U1"}, ()),
    ([playbook("U5", action="notify")], {"U1"}, ()),  # it no longer proposes the fix
])
def test_the_approvers_in_force_are_the_loaded_playbooks_not_the_recorded_ones(
    store: IncidentStore, loaded: list[Playbook], users: set[str], where: tuple[str, ...]
) -> None:
    settings = Settings(slack=SlackSettings(approvers=SlackApprovers(users=["U1"],
                                                                     usergroups=["S1"])))
    authority = Authority.of(settings, loaded, members=members)
    detail = store.get_incident(_proposed(store))
    approvers = authority.approvers(detail)
    assert (approvers.users, approvers.usergroups, approvers.playbooks) == (
        frozenset(users), ("S1",), where)
    assert authority.authorize(detail, Actor("U5", None, SLACK)).allowed is ("U5" in users)


def test_playbooks_are_read_only_for_an_incident_a_playbook_proposed(store: IncidentStore) -> None:
    reads: list[int] = []

    def playbooks() -> list[Playbook]:
        reads.append(1)
        return [playbook("U6")]

    authority = Authority.of(Settings(), playbooks)
    plain = store.get_incident(store.record_finding(finding("plain")).incident.id)
    assert authority.authorize(plain, Actor("root", None, CLI)).allowed and reads == []
    proposed = store.get_incident(_proposed(store))
    assert not authority.authorize(proposed, Actor("root", None, CLI)).allowed and reads == [1]


@pytest.mark.parametrize(("users", "usergroups", "user", "allowed", "reason"), [
    (["U1"], [], "U1", True, ""),
    (["U1"], ["S1"], "U3", True, ""),  # a member of a listed user group
    (["U1"], ["S1"], "U9", False, "you are not an approver (slack.approvers"),
    ([], ["S2"], "U3", False, "could not check user group membership"),  # Slack cannot say now
    ([], [], "U1", False, "approvals are off"),  # nobody configured: nobody sweeps from Slack
    ([], [], "U6", False, "approvals are off"),  # a playbook's approver is no standing approver
])
def test_the_standing_approvers_are_slack_approvers_under_the_one_rule(
    users: list[str], usergroups: list[str], user: str, allowed: bool, reason: str
) -> None:
    settings = Settings(slack=SlackSettings(approvers=SlackApprovers(users=users,
                                                                     usergroups=usergroups)))
    authority = Authority.of(settings, [playbook("U6")], members=members)
    verdict = authority.authorize_standing(Actor(user, None, SLACK))
    assert (verdict.allowed, verdict.reason.startswith(reason)) == (allowed, True)
