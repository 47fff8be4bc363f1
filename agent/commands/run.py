"""`zonemedic run [--config FILE]`: the in-cluster agent (watch, detect, sweep, serve).

Reads the settings once (YAML file + `ZONEMEDIC_` environment overrides) and the playbooks, and
validates them as `zonemedic config check` does (every bad key, value or playbook stops start-up,
each named, before anything is touched), configures logging, reaches and migrates the database
(`database.migrate_on_start`), builds the agent (`agent.runtime.app.Agent`) over the composition root (`agent.runtime.root`: the
pipeline, the leader's remediation executor and approval expiry, the chat layer, as
`zonemedic demo` builds them), and runs it until
SIGTERM/SIGINT, then shuts down gracefully. A webhook without credentials (`alertmanager`) is a
warning line at start-up. Called by `agent.cli`. Heavy imports stay inside `run`.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from agent.commands.config import validated_settings

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "run", help="run the agent: watch the cluster, detect, sweep, serve HTTP"
    )
    parser.add_argument("--config", metavar="FILE", type=Path, help="configuration file (YAML)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from agent.runtime.app import Agent
    from agent.runtime.logging import configure_logging, verbosity_level
    from agent.runtime.root import Root
    from agent.store.migrate import upgrade_on_start

    # the same validation as `zonemedic config check`, before anything is touched
    settings, playbooks = validated_settings(args.config, os.environ)
    level = verbosity_level(args.verbose) if args.verbose else settings.log_level  # -v wins
    configure_logging(level, fmt=args.log_format)
    store = upgrade_on_start(settings)
    from agent.runtime.webhook_credentials import open_warning

    open_webhook = open_warning(settings.alertmanager)
    if open_webhook is not None:  # said once the database is there, as the agent starts
        log.warning(open_webhook)
    try:  # the executor, the expiry and Slack, built as `zonemedic demo` builds them
        agent = Agent(Root(settings, store=store, playbooks=playbooks))
        agent.run_until_signalled()
    finally:
        store.close()
    return 0
