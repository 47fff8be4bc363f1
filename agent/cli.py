"""The `zonemedic` command line: parses arguments and dispatches to one module per sub-command.

Each command module exposes `register(subparsers) -> None`, which adds its parser and sets
`handler=run` (a `run(args) -> int`). Command modules keep heavy imports (SQLAlchemy, the twin,
the Kubernetes client) inside `run`, so that `zonemedic diagnose` does not pay for them. An
`InputError` becomes one line on stderr (a `ConfigError` one line per problem) and exit status 2; no
traceback reaches a user: any other exception (a bug) is one `internal error` line and exit 1, with
the traceback only when `ZONEMEDIC_TRACEBACK=1` is set.

The cluster twin (`agent.twin`) ships in the wheel but not in the production image: where it is not
installed, the commands that run it are simply not offered (no import error at start-up).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

from agent import __version__
from agent.errors import ConfigError, InputError, ZonemedicError

# name -> module implementing it. Adding a command is one row.
COMMANDS: dict[str, str] = {
    "config": "agent.commands.config",
    "playbooks": "agent.commands.playbooks",
    "run": "agent.commands.run",
    "sweep": "agent.commands.sweep",
    "twin": "agent.twin.command",
    "incidents": "agent.commands.incidents",
    "db": "agent.commands.db",
    "diagnose": "agent.commands.diagnose",
}

# Commands that run the cluster twin: offered only where `agent.twin` is installed.
NEEDS_TWIN = frozenset({"twin", "demo"})


def available_commands() -> dict[str, str]:
    """The commands this installation offers (name -> module)."""
    has_twin = importlib.util.find_spec("agent.twin") is not None
    return {name: module for name, module in COMMANDS.items() if has_twin or name not in NEEDS_TWIN}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zonemedic",
        description="Find GPU training jobs split across zones and blocked or slowed by policy.",
    )
    parser.add_argument("--version", action="version", version=f"zonemedic {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module_name in available_commands().values():
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result: int = args.handler(args)
    except InputError as exc:
        problems = exc.problems if isinstance(exc, ConfigError) else (str(exc),)
        for problem in problems or (str(exc),):
            print(f"zonemedic: error: {problem}", file=sys.stderr)
        return 2
    except ZonemedicError as exc:
        print(f"zonemedic: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the top level: a bug, told in one line; the traceback on request
        if os.environ.get("ZONEMEDIC_TRACEBACK"):
            raise
        print(
            f"zonemedic: internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:200]} "
            "(a bug; set ZONEMEDIC_TRACEBACK=1 to see where)",
            file=sys.stderr,
        )
        return 1
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
