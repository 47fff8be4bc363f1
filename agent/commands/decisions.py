"""`zonemedic incidents approve|reject|snooze ID`: a person's decision from the command line.

Who calls it: `agent.commands.incidents` adds these parsers to `incidents`; `agent.cli` dispatches.
Every flag is checked before anything is opened: a bad ID (not a positive number), an empty `--by`,
a bad `--for` duration or `--output` is one line on stderr and exit 2, nothing read or written. The
decision goes through the one decision function (`agent.approval.decision.decide`), with the
actor `--by` (default: the operating-system user) and source `cli`, and the approvers in force
in the configuration given (`--config`: its `slack.approvers`, and the playbooks of its
`playbooks_dir`, read only when the incident names the playbook that proposed its fix; a user
group's members are asked of Slack when Slack is enabled there). When approvers are configured
for the incident, `--by` must name one of them (a Slack user id).

Exit status: 0 when this call recorded the decision; 1 when it did not because the incident was
already decided (the line names who decided and when), expired or is no longer current; 2 on bad
input, an unknown incident included; 3 when `--by` is not an approver in force (the refusal is a
`note` on the incident's timeline). `--output json` prints the result as one JSON object.

What it does not do: touch the cluster. An approval only records `approved`; the leader's executor
(a background job of `zonemedic run`) picks it up and remediates.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from agent.commands.db import add_database_arguments, open_cli_store
from agent.errors import ConfigError, InputError
from agent.model.incident import Actor, parse_incident_id
from agent.model.lifecycle import DecisionOutcome, DecisionSource, to_jsonable
from agent.parsing.printable import printable
from agent.settings import Settings, parse_duration

if TYPE_CHECKING:  # the decision module pulls in the store (SQLAlchemy): imported when run
    from agent.approval.approvers import Authority, Members
    from agent.approval.decision import DecisionRequest, DecisionResult
    from agent.playbook.model import Playbook

NOT_AN_APPROVER = 3

OUTPUTS = ("text", "json")

_VERBS: dict[str, tuple[DecisionOutcome, str]] = {
    "approve": (DecisionOutcome.APPROVE, "approve the proposed co-location (the leader executes it)"),
    "reject": (DecisionOutcome.REJECT, "reject the proposed co-location"),
    "snooze": (DecisionOutcome.SNOOZE, "ask again later (default in 24h)"),
}


def add_parsers(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `approve`, `reject` and `snooze` to the `incidents` sub-commands."""
    for verb, (_, help_text) in _VERBS.items():
        sub = actions.add_parser(verb, help=help_text, description=help_text)
        sub.add_argument("id", metavar="ID", help="the incident id")
        sub.add_argument("--by", metavar="NAME",
                         help="who decides (default: the operating-system user)")
        sub.add_argument("--reason", metavar="TEXT", help="why (kept in the audit trail)")
        if verb == "snooze":
            sub.add_argument("--for", dest="snooze_for", metavar="DURATION", default="24h",
                             help="how long to snooze, e.g. 30m, 24h, 7d (default 24h)")
        sub.add_argument("--output", metavar="FORMAT", default="text", help="text or json")
        add_database_arguments(sub)
        sub.set_defaults(handler=run)


def os_user() -> str:
    """The operating-system user running the command (its uid when it has no name)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid-{os.getuid()}"


def _incident_id(value: str) -> int:
    return parse_incident_id(value, field="ID")


def _snooze_for(value: str) -> timedelta:
    duration = parse_duration(value, key="--for")
    if duration <= timedelta(0):
        raise InputError(f"--for: expected a positive duration like 24h, got {value!r}")
    return duration


def build_request(args: argparse.Namespace) -> DecisionRequest:
    """The decision the flags describe; `InputError` names the bad flag."""
    from agent.approval.decision import DecisionRequest, validate

    outcome, _ = _VERBS[args.incidents_action]
    by = os_user() if args.by is None else args.by.strip()
    if not by:
        raise InputError("--by: expected a name, got an empty one")
    snooze = getattr(args, "snooze_for", None)
    request = DecisionRequest(
        incident_id=_incident_id(args.id),
        outcome=outcome,
        actor=Actor(id=by, name=None, source=DecisionSource.CLI),
        reason=args.reason or None,
        snooze_for=_snooze_for(snooze) if snooze is not None else None,
    )
    validate(request)
    return request


def exit_status(result: DecisionResult) -> int:
    from agent.approval.decision import DecisionReason

    if result.recorded:
        return 0
    if result.reason is DecisionReason.NOT_FOUND:
        return 2
    if result.reason is DecisionReason.NOT_AUTHORIZED:
        return NOT_AN_APPROVER
    return 1


def slack_members(settings: Settings) -> Members | None:
    """User group lookups through Slack when the configuration enables it (the client is built
    on the first lookup); None otherwise: a group's members cannot be read, so only users listed
    by id may decide."""
    slack = settings.slack
    if not slack.enabled or not slack.approvers.usergroups:
        return None
    from agent.chatops.credentials import load_credentials
    from agent.chatops.directory import ApproverDirectory

    directory: list[ApproverDirectory] = []

    def members(group: str) -> frozenset[str] | None:
        if not directory:
            from slack_sdk import WebClient

            credentials = load_credentials(slack, settings.secrets)
            kwargs: dict[str, object] = {"token": credentials.bot_token, "timeout": 10}
            if slack.api_url:
                kwargs["base_url"] = slack.api_url.rstrip("/") + "/"
            directory.append(ApproverDirectory(
                WebClient(**kwargs), ttl=slack.usergroup_cache_ttl))  # type: ignore[arg-type]
        return directory[0].members(group)

    return members


def cli_authority(settings: Settings) -> Authority:
    """The approvers in force for the CLI: the given configuration's, its playbooks read from
    `playbooks_dir` (unset: the shipped ones) only when an incident names the playbook that proposed
    its fix."""
    from agent.approval.approvers import Authority
    from agent.playbook.loader import load_playbooks, playbooks_directory
    from agent.playbook.schema import PlaybookError

    def playbooks() -> list[Playbook]:
        try:
            return load_playbooks(playbooks_directory(settings.playbooks_dir))
        except PlaybookError as exc:
            raise ConfigError(f"playbooks_dir: {exc} (the approvers in force are read from the "
                              "playbooks; --config names the agent's configuration)") from None

    return Authority.of(settings, playbooks, members=slack_members(settings))


def run(args: argparse.Namespace) -> int:
    if args.output not in OUTPUTS:
        raise InputError(f"--output: expected text or json, got {args.output!r}")
    from agent.approval.decision import decide

    request = build_request(args)
    settings, store = open_cli_store(args)
    try:
        result = decide(store, request, now=datetime.now(UTC), authority=cli_authority(settings))
    finally:
        store.close()
    status = exit_status(result)
    if args.output == "json":
        print(json.dumps(to_jsonable(result), indent=2))
    elif status == 0:
        print(printable(result.message))
    elif status in (2, NOT_AN_APPROVER):
        print(f"zonemedic: error: {printable(result.message)}", file=sys.stderr)
    else:
        print(f"zonemedic: {printable(result.message)}", file=sys.stderr)
    return status
