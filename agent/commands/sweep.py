"""`zonemedic sweep --once [--config FILE] [--output table|json]`: one health sweep, then exit.

For CronJobs and for people: lists the cluster once (into the same slim cache the agent uses),
diagnoses every job, refreshes utilization (at most two Prometheus queries), reconciles open
incidents in the database (records new ones, resolves healed, supersedes gone), purges old ones,
prints a summary; it queues the digest of the playbooks that have a digest action (`--no-digest`
to skip). No leader election (it is one process, run on purpose) and no HTTP server. Exit
status 0 whatever the verdicts; 2 on bad config; 1 when the cluster or database cannot be reached.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import orjson

from agent.commands.config import validated_settings
from agent.errors import InputError
from agent.parsing.numbers import parse_float
from agent.parsing.printable import printable

MAX_SYNC_TIMEOUT = 86_400.0  # --sync-timeout: a day at most (inf or nan would wait forever)


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sweep", help="run one health sweep over every job and exit"
    )
    parser.add_argument("--once", action="store_true", help="run one sweep and exit (required)")
    parser.add_argument("--config", metavar="FILE", type=Path, help="configuration file (YAML)")
    parser.add_argument("--output", choices=("table", "json"), default="table")
    parser.add_argument(
        "--no-digest", action="store_true",
        help="do not queue the digest of the playbooks that have a digest action",
    )
    parser.add_argument(
        "--sync-timeout", default="120", metavar="SECONDS",
        help="how long to wait for the initial list of the cluster (default 120)",
    )
    parser.set_defaults(handler=run)


def _table(summary: dict[str, Any]) -> str:
    lines = [
        f"sweep of {summary['cluster']} at {summary['at']}: {summary['jobs']} job(s); "
        f"metrics: {summary['metrics']}",
        "verdicts: " + (", ".join(f"{k} {v}" for k, v in summary["by_verdict"].items()) or "none"),
        f"incidents: {summary['incidents_opened']} opened, {summary['incidents_closed']} closed, "
        f"{summary['purged']} purged",
    ]
    for finding in summary["findings"]:
        job = finding["job"]
        zones = ", ".join(f"{z}:{n}" for z, n in finding["zones"].items())
        target = f" -> {finding['target_zone']}" if finding.get("target_zone") else ""
        lines.append(
            f"  {job['kind']:<11} {job['namespace']}/{job['name']:<30} {finding['verdict']:<20}"
            f" {zones}{target}"
        )
    return "\n".join(printable(line) for line in lines)


def run(args: argparse.Namespace) -> int:
    if not args.once:
        raise InputError("sweep: only --once is supported (the agent schedules its own sweeps)")
    from agent.runtime.root import Root
    from agent.store.migrate import upgrade_on_start

    sync_timeout = parse_float(
        args.sync_timeout, field="--sync-timeout", minimum=0.001, maximum=MAX_SYNC_TIMEOUT
    )
    # the same validation as `zonemedic config check` (every problem named): exit 2 first
    settings, playbooks = validated_settings(args.config, os.environ)
    root = Root(settings, playbooks=playbooks)
    root.clients().list_once(timeout=sync_timeout)
    store = upgrade_on_start(settings)
    try:
        pipeline = root.sweep_pipeline(store)
        summary = pipeline.sweep(None)
        if not args.no_digest:
            summary["digests"] = sum(
                pipeline.post_digest(p, summary) for p in root.playbooks if p.enabled
            )
    finally:
        store.close()
    if args.output == "json":
        sys.stdout.write(orjson.dumps(summary).decode() + "\n")
    else:
        print(_table(summary))
    return 0
