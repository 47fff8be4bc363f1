"""Alembic environment for zonemedic: runs the scripts in versions/ against the incident schema.

Called by Alembic through `agent.store.migrate` (no alembic.ini): the caller passes an open
connection in `config.attributes["connection"]`; without one (the `alembic` command line with
`-x url=...` or `sqlalchemy.url`), an engine is built with the same setup the agent uses.
`render_as_batch=True` lets ALTERs work on SQLite; `compare_type=True` makes autogenerate see
type changes.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from agent.store.engine import make_engine
from agent.store.schema import metadata

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("migrations: pass -x url=DATABASE_URL (or use `zonemedic db upgrade`)")
    return url


if context.is_offline_mode():
    context.configure(
        url=_url(), target_metadata=metadata, literal_binds=True, render_as_batch=True
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    given = config.attributes.get("connection")
    if given is not None:
        _run(given)
    else:
        engine = make_engine(_url())
        with engine.begin() as conn:
            _run(conn)
        engine.dispose()
