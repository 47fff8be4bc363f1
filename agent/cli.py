"""The `zonemedic` command line: parses arguments and dispatches to one module per sub-command.

Each command module exposes `register(subparsers) -> None`, which adds its parser and sets
`handler=run` (a `run(args) -> int`). Command modules keep heavy imports (SQLAlchemy, the twin,
the Kubernetes client) inside `run`, so that `zonemedic diagnose` does not pay for them. An
`InputError` becomes one line on stderr (a `ConfigError` one line per problem) and exit status 2; no
traceback reaches a user: any other exception (a bug) is one `internal error` line and exit 1, with
the traceback only when `ZONEMEDIC_TRACEBACK=1` is set. Those lines are printable
(`agent.parsing.printable`): a control character an error quotes is shown as its escape.

The cluster twin (`agent.twin`) ships in the wheel but not in the production image: where it is not
installed, the commands that run it are simply not offered (no import error at start-up).

What every command shares is added here, not in the command modules: `-v/--verbose` and
`--log-format json|text` on every command, `--json` as the alias of `--output json` on every
command whose machine output `--output` selects, an `examples:` epilog on every `--help`
(`agent.commands.examples`), `--version` from the installed package's metadata, and the logging
set-up before the command runs: readable lines on stderr, warnings and errors only unless `-v`
(`-vv`: debug), for the one-shot commands; JSON lines for the long-running ones (`run`) when stderr
is not a terminal, unless `--log-format` says otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import agent
from agent.commands.examples import epilog
from agent.errors import ConfigError, InputError, ZonemedicError
from agent.parsing.printable import printable
from agent.runtime.logging import (
    NOISY_LIBRARIES,
    LogFormat,
    configure_logging,
    verbosity_level,
)

# name -> module implementing it. Adding a command is one row.
COMMANDS: dict[str, str] = {
    "config": "agent.commands.config",
    "playbooks": "agent.commands.playbooks",
    "run": "agent.commands.run",
    "sweep": "agent.commands.sweep",
    "twin": "agent.twin.command",
    "incidents": "agent.commands.incidents",
    "db": "agent.commands.db",
    "admission": "agent.commands.admission",
    "admissions": "agent.commands.admissions",
    "diagnose": "agent.commands.diagnose",
    "explain": "agent.commands.explain",
    "whatif": "agent.commands.whatif",
    "demo": "agent.demo.command",
}

# Commands that run the cluster twin: offered only where `agent.twin` is installed.
NEEDS_TWIN = frozenset({"twin", "demo"})

# Long-running commands: their logs are for a log collector (JSON) unless stderr is a terminal.
LONG_RUNNING = frozenset({"run"})


def available_commands() -> dict[str, str]:
    """The commands this installation offers (name -> module)."""
    has_twin = importlib.util.find_spec("agent.twin") is not None
    return {name: module for name, module in COMMANDS.items() if has_twin or name not in NEEDS_TWIN}


def package_version() -> str:
    """The installed distribution's version (its metadata); the source tree's when not installed."""
    try:
        return importlib.metadata.version("zonemedic")
    except importlib.metadata.PackageNotFoundError:
        return agent.__version__


class _VersionAction(argparse.Action):
    """`--version`: reads the package metadata only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"zonemedic {package_version()}")
        parser.exit()


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps descriptions as usual but prints the `examples:` epilog line by line, as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "\n".join(indent + line for line in text.splitlines())
        return super()._fill_text(text, width, indent)


def _add_common_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # On sub-commands the defaults are SUPPRESS, so `zonemedic -v sweep` keeps the top-level value.
    parser.add_argument(
        "-v", "--verbose", action="count", default=0 if top else argparse.SUPPRESS,
        help="log more: -v info, -vv debug (default: warnings and errors only)",
    )
    parser.add_argument(
        "--log-format", choices=[f.value for f in LogFormat],
        default=None if top else argparse.SUPPRESS,
        help="log lines on stderr: text (for people) or json (for log collectors); default: "
        "json for `run` when stderr is not a terminal, text otherwise",
    )


def _add_json_alias(parser: argparse.ArgumentParser) -> None:
    """`--json` means `--output json`, on every command that has `--output` (one convention for
    machine output: either spelling, whichever comes last wins)."""
    output = parser._option_string_actions.get("--output")
    if output is None or "--json" in parser._option_string_actions:
        return
    alias = parser.add_argument("--json", dest=output.dest, action="store_const", const="json",
                                help="print JSON: the same as --output json")
    for actions in (parser._actions, *(g._group_actions for g in parser._action_groups)):
        if alias in actions and output in actions:  # listed right after --output
            actions.remove(alias)
            actions.insert(actions.index(output) + 1, alias)


def command_parsers(
    parser: argparse.ArgumentParser, path: str = ""
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser of the tree with its command path ("" for the top, "db upgrade", ...)."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # an alias names the same parser again
                    seen.add(id(sub))
                    yield from command_parsers(sub, f"{path} {name}".strip())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zonemedic",
        description="Find GPU training jobs split across zones and blocked or slowed by policy.",
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module_name in available_commands().values():
        importlib.import_module(module_name).register(subparsers)
    for path, sub in command_parsers(parser):
        sub.formatter_class = _HelpFormatter
        if sub.epilog is None:
            sub.epilog = epilog(path)
        _add_common_options(sub, top=path == "")
        _add_json_alias(sub)
    return parser


def _log_format(args: argparse.Namespace) -> LogFormat:
    if args.log_format:
        return LogFormat(args.log_format)
    if args.command in LONG_RUNNING and not sys.stderr.isatty():
        return LogFormat.JSON
    return LogFormat.TEXT


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # the command may configure logging again (`run` with its settings' level): it reads these
    args.log_format = _log_format(args)
    root = logging.getLogger()
    saved_handlers = list(root.handlers)
    saved_levels = {n: logging.getLogger(n).level for n in ("", *NOISY_LIBRARIES)}
    configure_logging(
        verbosity_level(args.verbose), fmt=args.log_format,
        timestamps=args.command in LONG_RUNNING,
    )
    try:
        result: int = args.handler(args)
    except InputError as exc:
        problems = exc.problems if isinstance(exc, ConfigError) else (str(exc),)
        for problem in problems or (str(exc),):
            print(f"zonemedic: error: {printable(problem)}", file=sys.stderr)
        return 2
    except ZonemedicError as exc:
        print(f"zonemedic: {printable(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the top level: a bug, told in one line; the traceback on request
        if os.environ.get("ZONEMEDIC_TRACEBACK"):
            raise
        print(
            f"zonemedic: internal error: {type(exc).__name__}: "
            f"{printable(' '.join(str(exc).split())[:200])} "
            "(a bug; set ZONEMEDIC_TRACEBACK=1 to see where)",
            file=sys.stderr,
        )
        return 1
    finally:  # in-process callers (tests) get their logging back
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
