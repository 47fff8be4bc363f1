"""Logs on stderr, in one of two forms: JSON lines for machines, or short readable lines for people.

Called once per process: by the CLI before any command runs (`agent.cli.main`), and again by
`zonemedic run` once it has read `log_level` from its settings (`configure_logging`).

- `LogFormat.JSON`: one JSON object per line (time, level, logger, message, extras). Fields passed
  with `extra={...}` are merged into the object, so `log.info("watching", extra={"resources":
  [...]})` stays machine-readable. The default of `zonemedic run` when stderr is not a terminal.
- `LogFormat.TEXT`: `zonemedic: warning: message (key=value, ...)`, the way the CLI prints its own
  errors; with `timestamps` the line starts with the UTC time instead (a long-running agent watched in
  a terminal). A traceback is shown only at debug level; otherwise the exception is one line.
  The message and every field are printable (`agent.parsing.printable`): a control character
  in outside text (a user name, a reason, a file name) is shown as its escape, so a log line
  a person reads is always one line, and never a sequence the terminal obeys.

`verbosity_level` maps the CLI's `-v` count to a level: warnings and errors only by default, info
with `-v`, debug with `-vv`. What it does not do: ship logs anywhere (the cluster's log collector
reads stderr).
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TextIO

import orjson

from agent.parsing.printable import printable, printable_lines

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_LEVELS = ("warning", "info", "debug")
NOISY_LIBRARIES = ("urllib3", "kubernetes", "apscheduler", "uvicorn.access", "alembic.runtime.plugins")


class LogFormat(StrEnum):
    JSON = "json"
    TEXT = "text"


def verbosity_level(verbose: int) -> str:
    """The level for `-v` given `verbose` times: warning, info, then debug."""
    return _LEVELS[min(max(verbose, 0), len(_LEVELS) - 1)]


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(_extras(record))
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """One line a person reads: `zonemedic: LEVEL: message (key=value, ...)`."""

    def __init__(self, *, timestamps: bool = False, tracebacks: bool = False) -> None:
        super().__init__()
        self.timestamps = timestamps
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        level = record.levelname.lower()
        if self.timestamps:
            when = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
            line = f"{when} {level:<7} {printable(record.getMessage())}"
        else:
            line = f"zonemedic: {level}: {printable(record.getMessage())}"
        extras = _extras(record)
        if extras:
            line += " (" + ", ".join(f"{printable(str(k))}={printable(_plain(v))}"
                                     for k, v in extras.items()) + ")"
        if record.exc_info and record.exc_info[1] is not None:
            if self.tracebacks:
                line += "\n" + printable_lines(self.formatException(record.exc_info))
            else:
                exc = record.exc_info[1]
                line += f": {type(exc).__name__}: {printable(str(exc))}"
        return line


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(str(v) for v in value)
    return str(value)


def configure_logging(
    level: str = "info",
    stream: TextIO | None = None,
    *,
    fmt: LogFormat = LogFormat.JSON,
    timestamps: bool = True,
) -> logging.Handler:
    """Route the root logger to one handler in `fmt` (replacing earlier handlers); returns it.

    `timestamps` applies to the text form only (JSON always carries the time)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt is LogFormat.JSON:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            TextFormatter(timestamps=timestamps, tracebacks=level.lower() == "debug")
        )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Libraries' chatter: their warnings in JSON (a collector filters), only their errors for a
    # person (urllib3's "Retrying ..." is ours to report, once), everything of theirs at debug.
    quiet = logging.WARNING if fmt is LogFormat.JSON else logging.ERROR
    if level.lower() == "debug":
        quiet = logging.DEBUG if fmt is LogFormat.TEXT else logging.WARNING
    for noisy in NOISY_LIBRARIES:
        logging.getLogger(noisy).setLevel(quiet)
    return handler
