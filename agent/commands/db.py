"""`zonemedic db upgrade|current|purge`: the incident database's schema and retention by hand.

Also home of the database selection every database command shares (`add_database_arguments`,
`open_cli_store`): `--database URL` wins, else `--config FILE`'s `database.url` (with `ZONEMEDIC_`
environment overrides), else the default SQLite file `<data_dir>/zonemedic.db`.

Who calls it: `agent.cli` (through `register`) and `agent.commands.incidents`. What it does not do:
run at agent start (that is `agent.store.migrate.upgrade_on_start`, called by the runtime). It keeps
SQLAlchemy and Alembic imports inside the run path so that other commands stay light.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from agent.errors import InputError, ZonemedicError
from agent.settings import Settings, load_settings, parse_duration

if TYPE_CHECKING:
    from agent.store.repository import IncidentStore

CLI_RETRY = timedelta(seconds=5)  # a person waits this long for a database that is away


def add_database_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="the agent's configuration file (YAML)")
    parser.add_argument(
        "--database", metavar="URL",
        help="database URL (sqlite:///PATH or postgresql://...); overrides the config",
    )


def cli_settings(args: argparse.Namespace) -> Settings:
    """The settings named by `--config` (plus ZONEMEDIC_ environment overrides)."""
    return load_settings(Path(args.config) if args.config else None, os.environ)


def open_cli_store(
    args: argparse.Namespace, *, must_exist: bool = True
) -> tuple[Settings, IncidentStore]:
    """Open the store the flags select. With `must_exist`, a database without the schema (or a
    SQLite file that does not exist) is a clear error pointing at `zonemedic db upgrade`."""
    from agent.store.engine import database_url, normalise_url
    from agent.store.repository import open_store

    settings = cli_settings(args)
    url = database_url(settings, args.database)
    parsed = normalise_url(url)
    if must_exist and parsed.get_backend_name() == "sqlite" and parsed.database not in (
        None, "", ":memory:"
    ):
        path = Path(parsed.database or "").expanduser()
        if not path.exists():
            raise ZonemedicError(
                f"database file {path} does not exist: run `zonemedic db upgrade` first "
                "(the agent creates it at start)"
            )
    db = replace(settings.database, write_retry=min(settings.database.write_retry, CLI_RETRY),
                 start_timeout=min(settings.database.start_timeout, CLI_RETRY))
    store = open_store(db, url=url)
    try:
        store.wait_until_reachable(db.start_timeout)
        if must_exist:
            from agent.store.migrate import check_schema

            check_schema(store.engine, db)
    except BaseException:
        store.close()
        raise
    return replace(settings, database=db), store


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "db", help="manage the incident database (schema upgrade, retention purge)",
        description="Manage the incident database.",
    )
    actions = parser.add_subparsers(dest="db_action", metavar="ACTION")
    actions.required = True
    upgrade = actions.add_parser("upgrade", help="upgrade the schema to the latest revision")
    upgrade.add_argument("--revision", default="head", help="target revision (default: head)")
    current = actions.add_parser("current", help="show the schema revision")
    purge = actions.add_parser(
        "purge", help="delete closed incidents older than the retention (decisions are kept)"
    )
    purge.add_argument(
        "--older-than", metavar="AGE",
        help="closed before this age, e.g. 180d (default: database.retention)",
    )
    for sub in (upgrade, current, purge):
        add_database_arguments(sub)
        sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    action: str = args.db_action
    if action == "upgrade":
        return _upgrade(args)
    if action == "current":
        return _current(args)
    return _purge(args)


def _upgrade(args: argparse.Namespace) -> int:
    from agent.store.errors import safe_url
    from agent.store.migrate import upgrade

    settings, store = open_cli_store(args, must_exist=False)
    try:
        reached = upgrade(store.engine, settings.database, args.revision)
    finally:
        store.close()
    print(f"database {safe_url(store.target)} is at revision {reached}")
    return 0


def _current(args: argparse.Namespace) -> int:
    from agent.store.migrate import current_revision, head_revision

    settings, store = open_cli_store(args, must_exist=False)
    try:
        current = current_revision(store.engine)
    finally:
        store.close()
    head = head_revision(settings.database)
    state = "up to date" if current == head else "needs `zonemedic db upgrade`"
    print(f"revision {current or 'none'} (head {head}): {state}")
    return 0


def _purge(args: argparse.Namespace) -> int:
    from agent.store.retention import cutoff

    age = None
    if args.older_than is not None:
        age = parse_duration(args.older_than, key="--older-than")
        if age <= timedelta(0):
            raise InputError(f"--older-than: must be positive, got {args.older_than!r}")
    settings, store = open_cli_store(args)
    try:
        before = cutoff(datetime.now(UTC), age or settings.database.retention)
        result = store.purge(before=before)
    finally:
        store.close()
    print(
        f"purged {result.incidents} incident(s) closed before {before:%Y-%m-%d %H:%M} UTC "
        f"({result.events} events, {result.actions} actions, {result.messages} messages); "
        "decisions kept"
    )
    return 0
