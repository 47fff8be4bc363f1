"""`zonemedic config check FILE`: validate a configuration the way `zonemedic run` does, changing nothing.

Reads the file and the `ZONEMEDIC_` environment overrides (as `run` does), builds the typed settings
and loads the playbook directory they name. Exit 0 with one `ok` line (and a warning line on stderr
when the Alertmanager webhook takes alerts without credentials), or exit 2 with every problem
on its own line on stderr, each naming its key (`http.port: must be at most 65535, got 70000`) or
playbook file and line. `zonemedic run` calls `validated_settings` before it touches anything, so a
configuration `config check` accepts is one `run` starts with. Called by `agent.cli`. What it does
not do: reach the database, the cluster, Prometheus or Slack, or read the files the settings name.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.errors import ConfigError
from agent.parsing.printable import printable
from agent.playbook.loader import check_directory
from agent.playbook.model import Playbook
from agent.playbook.schema import PlaybookError
from agent.settings import Settings, load_settings


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "config", help="work with the agent's configuration (check a file)"
    )
    sub = parser.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    sub.required = True
    check = sub.add_parser(
        "check",
        help="validate FILE (and ZONEMEDIC_ overrides, and its playbooks) without touching anything",
    )
    check.add_argument("file", metavar="FILE", type=Path)
    check.set_defaults(handler=run)


def validated_settings(
    path: Path | None, environ: Mapping[str, str]
) -> tuple[Settings, list[Playbook]]:
    """The settings and playbooks `run` would use; `ConfigError` listing every problem otherwise."""
    settings = load_settings(path, environ)  # lists every bad key at once
    playbooks, errors = _playbooks(Path(settings.playbooks_dir))
    if errors:
        raise ConfigError(*(str(e) for e in errors))
    return settings, playbooks


def _playbooks(directory: Path) -> tuple[list[Playbook], list[PlaybookError]]:
    try:
        return check_directory(directory)
    except PlaybookError as exc:
        return [], [PlaybookError(f"playbooks_dir: {exc}")]


def run(args: argparse.Namespace) -> int:
    try:
        settings, playbooks = validated_settings(args.file, os.environ)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"zonemedic: error: {printable(problem)}", file=sys.stderr)
        return 2
    from agent.runtime.webhook_credentials import open_warning

    open_webhook = open_warning(settings.alertmanager)
    if open_webhook is not None:
        print(f"zonemedic: warning: alertmanager: {open_webhook}", file=sys.stderr)
    print(printable(
        f"ok  {args.file}: cluster {settings.cluster_name}, {len(playbooks)} playbook(s) "
        f"from {settings.playbooks_dir}"
    ))
    return 0
