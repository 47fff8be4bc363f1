"""Column types that behave the same on SQLite and PostgreSQL: UTC datetimes and JSON documents.

Who uses it: `agent.store.schema` (the models) and the initial migration. What it does not do: any
query; it only converts values at the database boundary.

- `UTCDateTime`: timezone-aware UTC in and out. PostgreSQL stores `timestamptz`; SQLite, which has no
  time zones, stores the naive UTC text SQLAlchemy writes (fixed width, so text order is time order
  and range scans use indexes). A naive datetime is refused on the way in (a bug, not data).
- `JSONDocument`: JSONB on PostgreSQL, TEXT on SQLite. Reading never raises: a value that is not
  valid JSON (SQLite) or not a JSON object where one is expected comes back as `CorruptValue`, so a
  single bad row cannot break a listing; the repository turns it into a named `RecordProblem`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import DateTime, Dialect, Text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator, TypeEngine


@dataclass(frozen=True)
class CorruptValue:
    """A stored JSON value that could not be read; `raw` is what the database held."""

    raw: str
    error: str


class UTCDateTime(TypeDecorator[datetime]):
    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()} given to the store: pass UTC")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class JSONDocument(TypeDecorator[Any]):
    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(JSONB())
        return dialect.type_descriptor(Text())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if dialect.name == "postgresql":
            return value
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode("utf-8")

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if value is None or dialect.name == "postgresql":
            return value
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            return CorruptValue(raw=str(value)[:200], error=str(exc))
