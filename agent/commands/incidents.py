"""`zonemedic incidents list|show|stats`: the incident history for people (table) and scripts (JSON).

The decisions `incidents approve|reject|snooze` live in `agent.commands.decisions`; this module
only adds their parsers.

Who calls it: `agent.cli`. It validates flags itself (a bad `--since`, `--job`, `--status`,
`--verdict`, `--limit` or `--output` is one line on stderr and exit 2, nothing read), opens the store
the database flags select (`agent.commands.db`), calls the repository and prints. Rows the store
cannot read are listed as warnings on stderr naming the incident; the listing goes on. Lines fit the
output's width: `COLUMNS` when set, else the terminal's; output to a pipe or a file is not cut.
Every line is printable (`agent.parsing.printable`): a control character in an actor's name, a
comment or any other recorded text is shown as its escape, never obeyed by the terminal nor a
line of its own. `now` is read here, at the edge, once per command. `show` says when a queued message is not sent
because the configuration read (`--config`, or a `ZONEMEDIC_SLACK__ENABLED` override) has Slack off,
instead of a message that looks pending for ever, and why no playbook posted an incident (the
note the agent records when a playbook's conditions exclude it).

What it does not do: change anything (decisions go through `agent.commands.decisions`, Slack or
the API).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from agent.commands import decisions, incident_patch
from agent.commands.db import add_database_arguments, open_cli_store
from agent.errors import InputError
from agent.model.incident import (
    EgressTotals,
    IncidentDetail,
    IncidentListing,
    IncidentQuery,
    IncidentStats,
    parse_incident_id,
)
from agent.model.lifecycle import EventKind, IncidentStatus, MessageStatus, to_jsonable
from agent.model.proposal import proposed_fix
from agent.model.stored import StoredDocumentError, StoredWaste
from agent.model.verdict import Verdict
from agent.parsing.choices import parse_choice
from agent.parsing.numbers import parse_duration, parse_int
from agent.parsing.printable import printable
from agent.playbook.matching import NOT_POSTED

MIN_WIDTH = 40  # narrower than this, lines are not cut (a table would be unreadable anyway)
MAX_LIMIT = 10_000
OUTPUTS = ("table", "json")
SLACK_OVERRIDE = "ZONEMEDIC_SLACK__ENABLED"


class SlackState(StrEnum):
    """Whether the configuration read has Slack on (UNKNOWN: no configuration was given)."""

    ON = "on"
    OFF = "off"
    UNKNOWN = "unknown"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "incidents", help="incident history (list, show, stats) and decisions (approve, reject, "
        "snooze)",
        description="Query the incident history; approve, reject or snooze a proposed fix.",
    )
    actions = parser.add_subparsers(dest="incidents_action", metavar="ACTION")
    actions.required = True

    listing = actions.add_parser("list", help="list incidents, newest first")
    listing.add_argument("--job", metavar="NS/NAME", help="one job")
    listing.add_argument("--namespace", metavar="NS", help="one namespace")
    listing.add_argument("--status", metavar="S",
                         help=f"one status: {', '.join(s.value for s in IncidentStatus)}")
    listing.add_argument("--verdict", metavar="V",
                         help=f"one verdict: {', '.join(v.value for v in Verdict)}")
    listing.add_argument("--since", metavar="AGE", help="opened within this age, e.g. 7d, 12h")
    listing.add_argument("--limit", metavar="N", default="50", help="at most N (default 50)")

    show = actions.add_parser("show", help="one incident: timeline, decisions, actions")
    show.add_argument("id", metavar="ID", help="the incident id")

    stats = actions.add_parser("stats", help="counts and mean times over a period")
    stats.add_argument("--since", metavar="AGE", default="30d", help="period (default 30d)")

    for sub in (listing, show, stats):
        sub.add_argument("--output", metavar="FORMAT", default="table", help="table or json")
        add_database_arguments(sub)
        sub.set_defaults(handler=run)
    decisions.add_parsers(actions)
    incident_patch.add_parser(actions)


# --------------------------------------------------------------------------------------------
# flag validation (before anything is opened)


def _output(value: str) -> str:
    if value not in OUTPUTS:
        raise InputError(f"--output: expected table or json, got {value!r}")
    return value


def _since(value: str, now: datetime) -> datetime:
    age = parse_duration(value, field="--since")
    if age <= timedelta(0):
        raise InputError(f"--since: must be a positive age like 7d, got {value!r}")
    return now - age


def _job(value: str) -> tuple[str, str]:
    namespace, slash, name = value.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise InputError(f"--job: expected NAMESPACE/NAME, got {value!r}")
    return namespace, name


def _limit(value: str) -> int:
    return parse_int(value, field="--limit", minimum=1, maximum=MAX_LIMIT)


def _incident_id(value: str) -> int:
    return parse_incident_id(value, field="ID")


def build_query(args: argparse.Namespace, now: datetime) -> IncidentQuery:
    namespace: str | None = args.namespace
    name: str | None = None
    if args.job is not None:
        job_namespace, name = _job(args.job)
        if namespace is not None and namespace != job_namespace:
            raise InputError(f"--namespace {namespace!r} contradicts --job {args.job!r}")
        namespace = job_namespace
    return IncidentQuery(
        namespace=namespace,
        name=name,
        status=parse_choice(IncidentStatus, args.status, field="--status"),
        verdict=parse_choice(Verdict, args.verdict, field="--verdict"),
        since=_since(args.since, now) if args.since is not None else None,
        limit=_limit(args.limit),
        with_reverts=True,
    )


# --------------------------------------------------------------------------------------------
# run


def run(args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    output = _output(args.output)
    action: str = args.incidents_action
    if action == "list":
        query = build_query(args, now)
        _, store = open_cli_store(args)
        try:
            listing = store.list_incidents(query)
        finally:
            store.close()
        _warn(str(p) for p in listing.problems)
        print(_json({"incidents": listing.incidents, "problems": [str(p) for p in listing.problems]})
              if output == "json" else render_list(listing, width=output_width()))
        return 0
    if action == "show":
        incident_id = _incident_id(args.id)
        settings, store = open_cli_store(args)
        try:
            detail = store.get_incident(incident_id)
        finally:
            store.close()
        slack = SlackState.UNKNOWN
        if args.config is not None or SLACK_OVERRIDE in os.environ:
            slack = SlackState.ON if settings.slack.enabled else SlackState.OFF
        if output == "json":  # the stored JSON as it is
            print(_json(detail_document(detail)))
            return 0
        try:
            text = render_detail(detail, width=output_width(), slack=slack)
        except StoredDocumentError as exc:
            # the store's error types import SQLAlchemy: only when a record is corrupt
            from agent.store.errors import CorruptRecordError

            raise CorruptRecordError(incident_id, f"column diagnosis: {exc}") from None
        print(text)
        return 0
    since = _since(args.since, now)
    _, store = open_cli_store(args)
    try:
        stats = store.stats(since=since, now=now)
    finally:
        store.close()
    print(_json(stats) if output == "json"
          else render_stats(stats, args.since, width=output_width()))
    return 0


def _warn(lines: Iterable[str]) -> None:
    for line in lines:
        print(f"zonemedic: warning: {printable(line)}", file=sys.stderr)


def _json(value: Any) -> str:
    return json.dumps(to_jsonable(value), indent=2, sort_keys=False)


def output_width() -> int | None:
    """How wide lines may be: `COLUMNS` when it is a number, else the terminal's width when
    stdout is a terminal, else None (a pipe or a file gets whole lines)."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isascii() and columns.isdigit():
        width = int(columns)
    elif sys.stdout.isatty():
        try:
            width = os.get_terminal_size(sys.stdout.fileno()).columns
        except OSError:
            return None
    else:
        return None
    return width if width >= MIN_WIDTH else None


# --------------------------------------------------------------------------------------------
# rendering (pure string building; every line at most `width` columns, None: not cut)


def _fit(text: str, width: int | None) -> str:
    if width is None or len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "…"


def _time(value: datetime | None, *, seconds: bool = False) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def _duration(value: timedelta | None) -> str:
    if value is None:
        return "-"
    total = round(value.total_seconds())
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{days}d" if days else "", f"{hours}h" if hours else "",
             f"{minutes}m" if minutes else "", f"{seconds}s" if seconds or total == 0 else ""]
    return " ".join(p for p in parts if p)


_LIST_COLUMNS = (("ID", 7), ("OPENED (UTC)", 17), ("STATUS", 18), ("VERDICT", 21))


def render_list(listing: IncidentListing, *, width: int | None = None) -> str:
    if not listing.incidents:
        return "no incidents"
    job_width = None if width is None else max(12, width - sum(w + 1 for _, w in _LIST_COLUMNS))
    header = " ".join(f"{title:<{w}}" for title, w in _LIST_COLUMNS) + " JOB"
    lines = [header]
    for i in listing.incidents:
        cells = (str(i.id), _time(i.opened_at), i.status.value, i.verdict.value)
        row = " ".join(f"{_fit(c, w):<{w}}" for c, (_, w) in zip(cells, _LIST_COLUMNS, strict=True))
        job = f"{i.namespace}/{i.name}" + (f"  fix reverted by {i.reverted_by}"
                                           if i.reverted_by is not None else "")
        lines.append(f"{row} {_fit(job, job_width)}")
    return "\n".join(printable(line.rstrip()) for line in lines)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _detail_text(detail: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in detail.items() if v is not None)


def render_detail(
    d: IncidentDetail, *, width: int | None = None, slack: SlackState = SlackState.UNKNOWN
) -> str:
    i = d.incident
    lines = [
        f"Incident {i.id}: {i.verdict.value} [{i.status.value}]"
        + (f"  fix reverted by {i.reverted_by}" if i.reverted_by is not None else ""),
        f"Job:         {i.kind} {i.namespace}/{i.name}  uid {i.uid or '-'}  cluster {i.cluster}",
        f"Opened:      {_time(i.opened_at, seconds=True)}  updated {_time(i.updated_at, seconds=True)}"
        f"  closed {_time(i.closed_at, seconds=True)}",
        f"Severity:    {i.severity.value}  target zone {i.target_zone or '-'}  detections "
        f"{i.detections}  status by {i.status_by or '-'}",
        f"GPU:         {i.gpus if i.gpus is not None else '-'} GPUs  utilization before "
        f"{_pct(i.utilization_before)}, after {_pct(i.utilization_after)}"
        + (f"  egress ${i.estimated_cost:,.2f}/day" if i.estimated_cost is not None else ""),
    ]
    if i.approval_deadline is not None:
        lines.append(f"Approval:    deadline {_time(i.approval_deadline, seconds=True)}")
    if d.snoozed_until is not None:
        lines.append(f"Snoozed:     until {_time(d.snoozed_until, seconds=True)}")
    unposted = [e.detail[NOT_POSTED] for e in d.events
                if e.kind is EventKind.NOTE and e.detail.get(NOT_POSTED)]
    if unposted:
        lines.append(f"Not posted:  no playbook posts it: {unposted[-1]}")
    lines.append("")
    lines.append("Timeline:")
    for e in d.events:
        lines.append(f"  {_time(e.at, seconds=True)}  {e.kind.value:<20} {(e.actor or '-'):<14} "
                     f"{_detail_text(e.detail)}")
    lines.append("Decisions:" if d.decisions else "Decisions:   none")
    for dec in d.decisions:
        who = f"{dec.actor_name} ({dec.actor_id})" if dec.actor_name else dec.actor_id
        comment = f'  "{dec.comment}"' if dec.comment else ""
        lines.append(f"  {_time(dec.decided_at, seconds=True)}  {dec.outcome.value:<8} {who} "
                     f"via {dec.source.value}{comment}")
    lines.append("Actions:" if d.actions else "Actions:     none")
    for a in d.actions:
        ok = {True: "ok", False: "FAILED", None: "-"}[a.succeeded]
        lines.append(f"  {_time(a.at, seconds=True)}  {a.kind.value:<9} {ok:<7} {a.message or ''}")
    if d.messages:
        lines.append("Messages:" if slack is not SlackState.OFF else
                     "Messages:    Slack is off (slack.enabled: false): nothing is sent")
        for m in d.messages:
            if slack is SlackState.OFF and m.status is MessageStatus.PENDING:
                lines.append(f"  #{m.id} {m.kind.value} not sent: Slack is off; it waits in the "
                             f"outbox  {m.channel or ''}")
                continue
            lines.append(f"  #{m.id} {m.kind.value} {m.status.value} attempts {m.attempts}"
                         f"  {m.channel or ''}  {m.last_error or ''}")
    waste = d.stored.waste
    if waste is not None:
        lines.append(f"Waste/day:   {_waste(waste)}")
    out = [_fit(printable(line.rstrip()), width) for line in lines]
    # the fix's diff is printed whole: a cut patch line would misstate the patch
    out.extend(printable(line.rstrip()) for line in _fix_lines(d))
    return "\n".join(out)


def _waste(waste: StoredWaste) -> str:
    hours, dollars = waste.gpu_hours_per_day, waste.egress_usd_per_day
    gpu = (f"~{hours:,.1f} GPU-hours ({waste.gpu_hours_basis})"
           if hours is not None else f"GPU-hours {waste.gpu_hours_basis}")
    egress = (f"egress ${dollars:,.2f} ({waste.egress_basis})"
              if dollars is not None else f"egress {waste.egress_basis}")
    return f"{gpu}; {egress}"


def detail_document(d: IncidentDetail) -> dict[str, Any]:
    """`incidents show --output json`: the incident with everything recorded, plus
    `proposed_fix`, the latest plan (preview or executed) or refusal, or null."""
    out: dict[str, Any] = to_jsonable(d)
    fix = proposed_fix(d.actions)
    out["proposed_fix"] = fix.to_dict() if fix is not None else None
    return out


def _fix_lines(d: IncidentDetail) -> list[str]:
    """The proposed fix: words, preconditions and the whole diff (never cut), or the refusal."""
    fix = proposed_fix(d.actions)
    if fix is None:
        return []
    what = "preview, before approval" if fix.preview else "the plan being executed"
    lines = ["", f"Proposed fix ({what}):"]
    if fix.refusal is not None:
        lines.append(f"  CANNOT BE APPLIED: {fix.refusal}")
        return lines
    lines.append(f"  {fix.summary}")
    if fix.reverted is not None:
        lines.append(f"  Reverted:      {fix.reverted.sentence()}")
    pre = fix.preconditions
    if pre:
        lines.append(f"  Preconditions: uid {pre.get('uid') or '-'}  resourceVersion "
                     f"{pre.get('resource_version') or '-'}  verdict {pre.get('verdict') or '-'}")
        placement = pre.get("placement")
        if isinstance(placement, Mapping) and placement:
            lines.append("  Placement:     " + ", ".join(
                f"{pod}@{zone or 'unbound'}" for pod, zone in sorted(placement.items())))
    if fix.diff:
        lines.append("  Diff:")
        lines.extend(f"    {line}" for line in fix.diff.splitlines())
    if fix.owners:
        lines.append("  Owners:")
        lines.extend(f"    {o.sentence()}" for o in fix.owners)
    return lines


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _egress_lines(title: str, totals: EgressTotals, *, per_day: bool) -> list[str]:
    unit = "/day" if per_day else ""
    out = []
    for basis, usd, gb, n in (
        ("measured", totals.measured_usd, totals.measured_gb, totals.measured_incidents),
        ("estimated", totals.estimated_usd, totals.estimated_gb, totals.estimated_incidents),
    ):
        if n:
            out.append(f"${usd:,.2f}{unit} {basis} ({gb:,.1f} GB{unit}, {n} incident"
                       f"{'s' if n != 1 else ''})")  # fmt: skip
    first, *rest = out or ["-"]
    return [f"{title:<24}{first}", *(f"{'':<24}{line}" for line in rest)]


def render_stats(s: IncidentStats, period: str, *, width: int | None = None) -> str:
    lines = [
        f"Incidents opened since {_time(s.since)} UTC ({period}): {s.total}",
        f"By verdict:             {_counts(s.by_verdict) or '-'}",
        f"By outcome:             {_counts(s.by_outcome) or '-'}",
        f"Mean time to detect:    {_duration(s.mean_time_to_detect)}",
        f"Mean time to decide:    {_duration(s.mean_time_to_decide)}",
        f"Mean time to resolve:   {_duration(s.mean_time_to_resolve)}",
        f"GPU-hours recovered:    {s.gpu_hours_recovered:.1f} (estimate: GPUs x utilization gain"
        " x hours since the fix)",
        *_egress_lines("Egress while split:", s.egress_per_day_open, per_day=True),
        *_egress_lines("Egress saved by fixes:", s.egress_saved, per_day=False),
    ]
    if s.egress_saved.measured_incidents or s.egress_saved.estimated_incidents:
        lines.append(f"{'':<24}(the egress rate before each fix x the time since)")
    return "\n".join(_fit(printable(line), width) for line in lines)
