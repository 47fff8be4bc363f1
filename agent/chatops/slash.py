"""The `/zonemedic` slash command's grammar: text in, a parsed command or a `SlashError` out.

Who calls it: the Bolt handler in `agent.chatops.slack`, which then runs the command against the
store (the same queries as the `zonemedic incidents` CLI). Pure: no I/O; `now` is passed in.

Grammar (words in any order after the verb; ages like 7d, 12h, 30m):
  incidents [job NS/NAME] [since 7d] [status S]
  show ID
  stats [since 30d]
  sweep          (approvers only: checked by the caller)
  explain from NS/POD to NS/POD port PORT[/PROTO] [from-labels K=V,... [from-sa SA]]
                 [to-labels K=V,... [to-sa SA]]
                 (with from-labels/to-labels, from/to name the namespace only)
  whatif delete KIND/NS/NAME [KIND/NS/NAME ...]
                 (the objects are checked by the caller's what-if)
  help           (also: nothing at all)

What it does not do: check who may run a command, or query anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from agent.errors import ConfigError, ExplainError, InputError
from agent.model.incident import IncidentQuery
from agent.model.lifecycle import IncidentStatus
from agent.parsing.choices import parse_choice
from agent.policy.explanation import ExplainQuery, parse_query
from agent.settings import parse_duration

DEFAULT_SINCE = "7d"
DEFAULT_STATS_SINCE = "30d"
LISTING_LIMIT = 20
MAX_TEXT = 500


class SlashError(InputError):
    """The command text cannot be understood; the message says what is wrong and how to fix it."""


class Verb(StrEnum):
    INCIDENTS = "incidents"
    SHOW = "show"
    STATS = "stats"
    SWEEP = "sweep"
    EXPLAIN = "explain"
    WHATIF = "whatif"
    HELP = "help"


@dataclass(frozen=True)
class SlashCommand:
    verb: Verb
    query: IncidentQuery | None = None  # incidents
    filters: str = ""  # incidents: the filters in words, for the reply
    incident_id: int | None = None  # show
    since: datetime | None = None  # stats
    period: str = ""  # stats: the age as typed
    explain: ExplainQuery | None = None  # explain
    deletes: tuple[str, ...] = ()  # whatif: the objects to delete


def _age(value: str, now: datetime) -> datetime:
    try:
        age = parse_duration(value, key="since")
    except ConfigError as exc:
        raise SlashError(str(exc)) from None
    if age <= timedelta(0):
        raise SlashError(f"since: expected a positive age like 7d, got {value!r}")
    return now - age


def _pairs(words: list[str], allowed: set[str], verb: Verb) -> dict[str, str]:
    if len(words) % 2:
        raise SlashError(f"`{verb.value}`: expected pairs like `since 7d`, got {' '.join(words)!r}")
    out: dict[str, str] = {}
    for key, value in zip(words[::2], words[1::2], strict=True):
        if key not in allowed:
            known = ", ".join(sorted(allowed))
            raise SlashError(f"`{verb.value}`: unknown filter {key!r} (known: {known})")
        if key in out:
            raise SlashError(f"`{verb.value}`: {key!r} given twice")
        out[key] = value
    return out


def parse(text: str, *, now: datetime, cluster: str | None = None) -> SlashCommand:
    """Parse the text after `/zonemedic`."""
    if len(text) > MAX_TEXT:
        raise SlashError(f"the command is too long (at most {MAX_TEXT} characters)")
    words = text.split()
    if not words:
        return SlashCommand(Verb.HELP)
    head, rest = words[0].lower(), words[1:]
    try:
        verb = Verb(head)
    except ValueError:
        raise SlashError(f"unknown command {head!r}; try `/zonemedic help`") from None
    if verb in (Verb.HELP, Verb.SWEEP):
        if rest:
            raise SlashError(f"`{verb.value}` takes no arguments")
        return SlashCommand(verb)
    if verb is Verb.SHOW:
        if len(rest) != 1 or not rest[0].lstrip("#").isdigit() or int(rest[0].lstrip("#")) < 1:
            raise SlashError("`show`: expected one incident number, e.g. `show 42`")
        return SlashCommand(verb, incident_id=int(rest[0].lstrip("#")))
    if verb is Verb.EXPLAIN:
        pairs = _pairs(rest, {"from", "to", "port", "from-labels", "to-labels", "from-sa",
                              "to-sa"}, verb)
        try:
            flow = parse_query(source=pairs.get("from"), destination=pairs.get("to"),
                               port=pairs.get("port"), from_labels=pairs.get("from-labels"),
                               to_labels=pairs.get("to-labels"),
                               from_service_account=pairs.get("from-sa"),
                               to_service_account=pairs.get("to-sa"))  # fmt: skip
        except ExplainError as exc:
            raise SlashError(f"`explain`: {exc}") from None
        return SlashCommand(verb, explain=flow)
    if verb is Verb.WHATIF:
        if len(rest) < 2 or rest[0].lower() != "delete":
            raise SlashError("`whatif`: expected `whatif delete KIND/NS/NAME` (e.g. "
                             "`whatif delete CiliumNetworkPolicy/ml/zone-b-only`)")  # fmt: skip
        return SlashCommand(verb, deletes=tuple(rest[1:]))
    if verb is Verb.STATS:
        pairs = _pairs(rest, {"since"}, verb)
        period = pairs.get("since", DEFAULT_STATS_SINCE)
        return SlashCommand(verb, since=_age(period, now), period=period)
    pairs = _pairs(rest, {"job", "since", "status"}, verb)
    namespace = name = None
    if "job" in pairs:
        namespace, slash, name = pairs["job"].partition("/")
        if not slash or not namespace or not name or "/" in name:
            raise SlashError(f"job: expected NAMESPACE/NAME, got {pairs['job']!r}")
    try:
        status = parse_choice(IncidentStatus, pairs.get("status"), field="status")
    except InputError as e:
        raise SlashError(str(e)) from None
    since_text = pairs.get("since", DEFAULT_SINCE)
    query = IncidentQuery(cluster=cluster, namespace=namespace, name=name, status=status,
                          since=_age(since_text, now), limit=LISTING_LIMIT)
    words_out = [f"since {since_text}"]
    if "job" in pairs:
        words_out.insert(0, f"job {pairs['job']}")
    if status is not None:
        words_out.append(f"status {status.value}")
    return SlashCommand(verb, query=query, filters=", ".join(words_out))
