"""`zonemedic playbooks check DIR`: validate a playbook directory the way the agent's start-up does.

Prints one line per playbook (name, triggers, actions) and one `FILE:LINE: FIELD: problem` line per
bad file on stderr; exit 0 when every file is good, 2 otherwise. Called by `agent.cli`. It loads
nothing but the playbook files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agent.parsing.printable import printable
from agent.playbook.loader import check_directory


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "playbooks", help="work with playbooks (check a directory)"
    )
    sub = parser.add_subparsers(dest="playbooks_command", metavar="SUBCOMMAND")
    sub.required = True
    check = sub.add_parser("check", help="validate every *.yaml playbook in DIR")
    check.add_argument("directory", metavar="DIR", type=Path)
    check.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    playbooks, errors = check_directory(args.directory)
    for playbook in playbooks:
        triggers = ",".join(t.kind.value for t in playbook.triggers)
        actions = ",".join(a.kind.value for a in playbook.actions)
        state = "" if playbook.enabled else " (disabled)"
        print(printable(f"ok  {playbook.name}{state}  triggers={triggers}  actions={actions}"))
    for error in errors:
        print(f"zonemedic: error: {printable(str(error))}", file=sys.stderr)
    if not playbooks and not errors:
        print(f"zonemedic: error: {args.directory}: no *.yaml playbooks found", file=sys.stderr)
        return 2
    return 2 if errors else 0
