"""`zonemedic admissions`: what the admission webhook did with the jobs created, newest first.

`zonemedic admissions [--since AGE] [--outcome O] [--namespace NS] [--limit N] [--output
table|json] [--config FILE] [--database URL]` lists the recorded decisions (`admission_decisions`:
when, the job, the object created, the outcome, the zone, the warning line the API server passed
on) and ends with the week's summary line of the digest (jobs placed at admission, restarts
avoided). Bad flags are one line, exit 2. Reads the store only. Called by `agent.cli`.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from agent.commands.db import add_database_arguments, open_cli_store
from agent.errors import InputError
from agent.model.admission import AdmissionOutcome, AdmissionQuery
from agent.parsing.choices import parse_choice
from agent.parsing.numbers import parse_duration, parse_int

OUTPUTS = ("table", "json")
WEEK = timedelta(days=7)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "admissions", help="what the admission webhook did with new jobs (placed, passed and why)",
        description="List the admission webhook's recorded decisions, newest first.",
    )
    parser.add_argument("--since", metavar="AGE", help="decided within this age, e.g. 7d, 12h")
    parser.add_argument("--outcome", metavar="O",
                        help=f"one outcome: {', '.join(o.value for o in AdmissionOutcome)}")
    parser.add_argument("--namespace", metavar="NS", help="one namespace")
    parser.add_argument("--limit", metavar="N", default="50", help="at most N (default 50)")
    parser.add_argument("--output", metavar="FORMAT", default="table", help="table or json")
    add_database_arguments(parser)
    parser.set_defaults(handler=run)


def build_query(args: argparse.Namespace, now: datetime) -> AdmissionQuery:
    since = None
    if args.since is not None:
        age = parse_duration(args.since, field="--since")
        if age <= timedelta(0):
            raise InputError(f"--since: must be a positive age like 7d, got {args.since!r}")
        since = now - age
    return AdmissionQuery(
        limit=parse_int(args.limit, field="--limit", minimum=1, maximum=1000), since=since,
        outcome=parse_choice(AdmissionOutcome, args.outcome, field="--outcome"),
        namespace=args.namespace,
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if args.output not in OUTPUTS:
        raise InputError(f"--output: expected table or json, got {args.output!r}")
    now = datetime.now(UTC)
    query = build_query(args, now)
    _, store = open_cli_store(args)
    try:
        records = store.list_admissions(query)
        summary = store.admission_summary(since=now - WEEK, now=now)
    finally:
        store.close()
    if args.output == "json":
        print(json.dumps({"admissions": [r.to_dict() for r in records],
                          "week": {"placed": summary.placed,
                                   "restarts_avoided": summary.restarts_avoided,
                                   "by_outcome": summary.by_outcome}}, indent=2))  # fmt: skip
        return 0
    if not records:
        print("no admission decisions recorded")
    for r in records:
        when = r.decided_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        print(f"{when}  {r.outcome.value:<11}  {r.zone or '-':<8}  {r.object_kind} "
              f"{r.job_namespace}/{r.object_name}")
        print(f"    {r.warning}")
    print(summary.line())
    return 0
