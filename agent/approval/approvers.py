"""Who may decide an incident now: the approvers in force, and the one rule every decider meets.

Who calls it: the one decision function (`agent.approval.decision.decide`) asks an `Authority`
before it records anything, whichever way the decision comes (a Slack click, the HTTP API, the
CLI); the chat layer asks it whether a message gets decision buttons, and whether a Slack user
may start a sweep (`authorize_standing`: the same rule over `slack.approvers` alone). The agent builds one
`Authority` from the configuration it runs with (`Authority.of`), the CLI one from the
configuration it is given.

The approvers in force for an incident are read when the decision is asked for, never taken from
what was recorded with the incident: `slack.approvers` (users, and members of user groups) plus
the `approval.approvers` of each playbook that proposed the incident's fix (named in its queued
proposal), as those playbooks are loaded now. A playbook that was removed, renamed, disabled or
no longer proposes co-location contributes nobody. So an approver taken off the list (the
configuration changed and the agent restarted) can no longer decide an incident opened before,
from the old post's button or anywhere else.

The rule (`authorize`, pure):
- zonemedic itself (`auto`: a playbook's `auto_namespaces`) may decide.
- Anyone else must be an approver in force: a listed user id, or a member of a listed user group
  (members come from `Members`, Slack's `usergroups.users.list`; a group that cannot be read now
  counts as having no members: refused, saying it could not check).
- Nobody in force: a Slack user may not decide ("approvals are off"), never "anyone in the
  channel"; the CLI and the HTTP API may (their own authentication is the right to decide: the
  agent's database, or the API's bearer token), as when no approvals are configured at all.

What it does not do: record anything (the decision function records the refusal as a `note` on
the incident's timeline), read Slack itself (`Members` is injected), or check the state of the
incident (the decision function's `judge` does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.model.incident import Actor, IncidentDetail
from agent.model.lifecycle import DecisionSource
from agent.playbook.model import Playbook, PlaybookActionKind
from agent.settings import Settings


class Members(Protocol):
    """The port to Slack's user groups: the members of `group`, or None when they cannot be read
    right now. Slack's adapter is `agent.chatops.directory.ApproverDirectory.members` (cached);
    the CLI builds one on first use (`agent.commands.decisions.slack_members`)."""

    def __call__(self, group: str, /) -> frozenset[str] | None: ...


PROPOSAL = PlaybookActionKind.PROPOSE_COLOCATION.value


@dataclass(frozen=True)
class Approvers:
    """The approvers in force for one incident, and where the list comes from (for messages)."""

    users: frozenset[str] = frozenset()
    usergroups: tuple[str, ...] = ()
    playbooks: tuple[str, ...] = ()  # the incident's proposing playbooks that are still loaded

    @property
    def configured(self) -> bool:
        return bool(self.users or self.usergroups)

    @property
    def where(self) -> str:
        """Which settings list them, for a refusal: `slack.approvers and playbook zone-split's
        approval.approvers`."""
        if not self.playbooks:
            return "slack.approvers"
        names = ", ".join(self.playbooks)
        return f"slack.approvers and the approval.approvers of playbook {names}"


@dataclass(frozen=True)
class Authorization:
    """Whether an actor may decide an incident, and when not, why (one line, for the refusal)."""

    allowed: bool
    reason: str = ""


def proposing_playbooks(detail: IncidentDetail) -> list[str]:
    """The names of the playbooks whose `propose_colocation` action was queued for the incident."""
    names: list[str] = []
    for message in detail.messages:
        payload = message.payload
        name = payload.get("playbook")
        if payload.get("action") == PROPOSAL and isinstance(name, str) and name not in names:
            names.append(name)
    return names


def playbook_approvers(playbook: Playbook) -> list[str]:
    """The user ids a playbook's `propose_colocation` actions list as approvers (none when the
    playbook is disabled)."""
    if not playbook.enabled:
        return []
    return [user for action in playbook.actions
            if action.kind is PlaybookActionKind.PROPOSE_COLOCATION and action.approval is not None
            for user in action.approval.approvers]


def authorize(actor: Actor, approvers: Approvers, *, members: Members | None) -> Authorization:
    """May `actor` decide an incident whose approvers in force are `approvers`? (the rule of the
    module docstring). `members`: user group lookups; None: no way to ask (groups unreadable)."""
    if actor.source is DecisionSource.AUTO:
        return Authorization(True)
    if not approvers.configured:
        if actor.source is DecisionSource.SLACK:
            return Authorization(False, "approvals are off: no approvers are configured")
        return Authorization(True)
    if actor.id in approvers.users:
        return Authorization(True)
    unreadable = False
    for group in approvers.usergroups:
        found = members(group) if members is not None else None
        if found is None:
            unreadable = True
        elif actor.id in found:
            return Authorization(True)
    if unreadable:
        return Authorization(False, "could not check user group membership with Slack right "
                                    "now; try again in a minute")
    who = "you are" if actor.source is DecisionSource.SLACK else f"{actor.id} is"
    return Authorization(False, f"{who} not an approver ({approvers.where}, as configured now, "
                                "list neither the user nor a user group of theirs)")


@dataclass
class Authority:
    """The approvers in force (from the loaded configuration) and how to read group members.

    `playbooks` is called when an incident names a proposing playbook (the CLI loads them only
    then); `members` is set by the chat layer once it has a Slack client (`read_groups_with`)."""

    users: frozenset[str] = frozenset()
    usergroups: tuple[str, ...] = ()
    playbooks: Callable[[], Sequence[Playbook]] = field(default=lambda: ())
    members: Members | None = None

    @classmethod
    def of(cls, settings: Settings, playbooks: Sequence[Playbook] | Callable[[], Sequence[Playbook]],
           *, members: Members | None = None) -> Authority:
        """The authority of a configuration: its `slack.approvers` and its playbooks."""
        approvers = settings.slack.approvers
        loaded: Callable[[], Sequence[Playbook]] = (
            playbooks if callable(playbooks) else _constant(tuple(playbooks)))
        return cls(users=frozenset(approvers.users), usergroups=tuple(approvers.usergroups),
                   playbooks=loaded, members=members)

    def read_groups_with(self, members: Members) -> None:
        """Read user group members with `members` from now on (the chat layer's Slack lookups)."""
        self.members = members

    def approvers(self, detail: IncidentDetail) -> Approvers:
        """The approvers in force for `detail`'s incident, now."""
        names = proposing_playbooks(detail)
        users = set(self.users)
        found: list[str] = []
        if names:
            by_name = {p.name: p for p in self.playbooks()}
            for name in names:
                playbook = by_name.get(name)
                if playbook is None:
                    continue
                listed = playbook_approvers(playbook)
                users.update(listed)
                if listed:
                    found.append(name)
        return Approvers(users=frozenset(users), usergroups=self.usergroups,
                         playbooks=tuple(found))

    def authorize(self, detail: IncidentDetail, actor: Actor) -> Authorization:
        """May `actor` decide `detail`'s incident now?"""
        return authorize(actor, self.approvers(detail), members=self.members)

    def standing(self) -> Approvers:
        """The approvers in force outside any incident: `slack.approvers` alone (no playbook
        names them)."""
        return Approvers(users=self.users, usergroups=self.usergroups)

    def authorize_standing(self, actor: Actor) -> Authorization:
        """May `actor` do what only an approver may outside an incident (start a sweep from
        Slack)? The one rule over `standing()`."""
        return authorize(actor, self.standing(), members=self.members)


def _constant(value: tuple[Playbook, ...]) -> Callable[[], Sequence[Playbook]]:
    def playbooks() -> Sequence[Playbook]:
        return value

    return playbooks


def refusal_note(actor: Actor, *, outcome: str, reason: str) -> Mapping[str, Any]:
    """The `note` event a refused decision leaves on the incident's timeline (the audit)."""
    return {"refused": outcome, "user": actor.id, "source": actor.source.value,
            "reason": reason, "audit": "not_approver"}

