"""The store's error types, and the one place that classifies SQLAlchemy/driver errors.

Who uses it: every module of `agent.store` wraps library errors here; callers (commands, the agent,
the HTTP API) only ever see these types, all `ZonemedicError`s. What it does not do: retry (that is
`agent.store.resilience`) or print anything.

- `StoreUnavailableError` (an `UnavailableError`): the database cannot be reached or went away; the
  operation did not happen (or its outcome is unknown and was retried until the budget ran out).
- `IncidentNotFoundError` (an `InputError`: exit 2): the id names no incident.
- `CorruptRecordError`: a stored row cannot be read (corrupt JSON, unknown status); names the incident.
- `SchemaOutOfDateError`: the database is not at this code's migration head.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from agent.errors import InputError, UnavailableError, ZonemedicError


class StoreError(ZonemedicError):
    """Base of the store's own errors."""


class StoreUnavailableError(UnavailableError):
    """The database cannot be reached (at start, or it went away and retries ran out)."""


class IncidentNotFoundError(InputError):
    def __init__(self, incident_id: int) -> None:
        super().__init__(f"incident {incident_id} not found")
        self.incident_id = incident_id


class InvalidRecordError(InputError):
    """A value the store cannot take (a name longer than its column, an approval deadline that is
    not after now, a claim lease that is not positive); names it. Nothing is written."""


class MessageNotFoundError(StoreError):
    def __init__(self, message_id: int) -> None:
        super().__init__(f"outbox message {message_id} not found")


class CorruptRecordError(StoreError):
    def __init__(self, incident_id: int, problem: str) -> None:
        super().__init__(f"incident {incident_id} cannot be read: {problem}")
        self.incident_id = incident_id
        self.problem = problem


class SchemaOutOfDateError(StoreError):
    """The database schema is not at the revision this code expects."""


# SQLite reports a missing table and a busy database alike as OperationalError: only these are
# worth waiting for.
_SQLITE_TRANSIENT = ("locked", "busy", "unable to open", "disk i/o")


def is_transient(error: BaseException) -> bool:
    """True for errors that mean "the database is (temporarily) not there": worth a retry."""
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError):
        if isinstance(error.orig, sqlite3.Error):
            return any(word in str(error.orig).lower() for word in _SQLITE_TRANSIENT)
        return True
    return isinstance(error, sa_exc.DisconnectionError | sa_exc.TimeoutError)


@contextmanager
def translated(target: str, what: str) -> Iterator[None]:
    """Turn SQLAlchemy/driver errors raised inside into the store's own errors, naming the
    database (password hidden) and the operation: transient ones into `StoreUnavailableError`,
    the rest into `StoreError`."""
    try:
        yield
    except sa_exc.SQLAlchemyError as exc:
        if is_transient(exc):
            raise StoreUnavailableError(
                f"database {target} unavailable: {what} failed: {describe(exc)}"
            ) from exc
        raise StoreError(f"database {target}: {what} failed: {describe(exc)}") from exc


def safe_url(url: str) -> str:
    """The URL with its password hidden, for error messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparsable database URL>"


def describe(error: BaseException) -> str:
    """A one-line reason from a driver error (no SQL, no traceback)."""
    orig = getattr(error, "orig", None) or error
    text = str(orig).strip().splitlines()
    return text[0] if text else type(orig).__name__
