"""The write probe: can the database take a write right now? (for readiness, not for data)

Called by the runtime's `/readyz` check (through `agent.runtime.pipeline`). A read check is not
enough: under WAL, SQLite answers reads while another connection holds the write lock, and a
PostgreSQL server may be read-only (a standby, `default_transaction_read_only`) or have the
incident table locked. The probe opens a write transaction and rolls it back, writing nothing:

- SQLite: `BEGIN IMMEDIATE` takes the database's write lock (what every write of the store does
  first), then ROLLBACK.
- PostgreSQL: `transaction_read_only` must be off, and `LOCK TABLE incidents IN ROW EXCLUSIVE MODE`
  (the lock an INSERT or UPDATE takes) must be granted, then ROLLBACK.

Everything runs inside a `deadline(timeout)` block, so the probe answers within about `timeout`
(plus one connection attempt when the server is away). What it does not do: retry, change the
store's readiness flag, or write anything.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc

from agent.store.engine import is_sqlite
from agent.store.errors import describe
from agent.store.resilience import deadline
from agent.store.schema import IncidentRow


def write_blocker(engine: Engine, *, timeout: timedelta) -> str | None:
    """None when a write transaction can start now; else the reason it cannot (one line)."""
    try:
        # SQLite: the engine's BEGIN is IMMEDIATE, which takes the write lock
        with deadline(timeout), engine.connect() as conn, conn.begin() as transaction:
            if not is_sqlite(engine):
                read_only = conn.exec_driver_sql("SHOW transaction_read_only").scalar()
                if read_only == "on":
                    transaction.rollback()
                    return "the database is read-only"
                table = IncidentRow.__tablename__
                conn.exec_driver_sql(f"LOCK TABLE {table} IN ROW EXCLUSIVE MODE")
            transaction.rollback()
    except sa_exc.SQLAlchemyError as exc:
        return describe(exc)
    return None
