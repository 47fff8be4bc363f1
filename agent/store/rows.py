"""Row mappers: database rows of the incident tables -> the plain dataclasses of `agent.model`.

Who calls it: the store's modules (`findings`, `transitions`, `timeline`, `outbox`, `queries`) after
each SELECT or UPDATE ... RETURNING. A stored value the code cannot interpret (an unknown status
written by a newer agent, JSON that is not an object) raises `UnreadableError`, which the callers
turn into a named `RecordProblem` (listings) or `CorruptRecordError` (one incident).

What it does not do: run statements of its own, except `summary_by_id`, the one-row read every
writer returns its answer with; or decide anything about the lifecycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, TypeVar

from sqlalchemy import Connection, select

from agent.model.incident import (
    Decision,
    IncidentSummary,
    OutboxMessage,
    RemediationAction,
    TimelineEvent,
)
from agent.model.lifecycle import (
    DecisionOutcome,
    DecisionSource,
    EventKind,
    IncidentStatus,
    MessageKind,
    MessageStatus,
    RemediationActionKind,
    Severity,
)
from agent.model.verdict import Verdict
from agent.store.errors import CorruptRecordError, IncidentNotFoundError
from agent.store.schema import IncidentRow
from agent.store.types import CorruptValue

E = TypeVar("E", bound=StrEnum)

SUMMARY_COLUMNS = (
    IncidentRow.id,
    IncidentRow.cluster,
    IncidentRow.job_kind,
    IncidentRow.job_namespace,
    IncidentRow.job_name,
    IncidentRow.job_uid,
    IncidentRow.verdict,
    IncidentRow.status,
    IncidentRow.severity,
    IncidentRow.fingerprint,
    IncidentRow.target_zone,
    IncidentRow.opened_at,
    IncidentRow.updated_at,
    IncidentRow.closed_at,
    IncidentRow.status_by,
    IncidentRow.utilization_before,
    IncidentRow.utilization_after,
    IncidentRow.estimated_cost,
    IncidentRow.gpus,
    IncidentRow.detections,
    IncidentRow.approval_deadline,
)
"""The columns every `IncidentSummary` is built from (select these, then call `summary`)."""


class UnreadableError(Exception):
    """A stored value the code cannot interpret (becomes RecordProblem or CorruptRecordError)."""


def enum(enum_type: type[E], value: Any, *, column: str) -> E:
    """`enum_type(value)`, or `UnreadableError` naming the column and the value."""
    try:
        return enum_type(value)
    except ValueError:
        raise UnreadableError(f"unknown {column} value {value!r}") from None


def document(value: Any, column: str) -> Mapping[str, Any]:
    """A stored JSON object (NULL reads as empty); anything else is `UnreadableError`."""
    if value is None:
        return {}
    if isinstance(value, CorruptValue):
        raise UnreadableError(f"column {column} holds invalid JSON ({value.error}): {value.raw[:60]!r}")
    if not isinstance(value, dict):
        raise UnreadableError(f"column {column} holds JSON {type(value).__name__}, not an object")
    return value


_SUMMARY_AS_STORED = (
    "id", "cluster", "fingerprint", "target_zone", "opened_at", "updated_at", "closed_at",
    "status_by", "utilization_before", "utilization_after", "estimated_cost", "gpus", "detections",
    "approval_deadline",
)
_MESSAGE_AS_STORED = (
    "id", "incident_id", "channel", "dedupe_key", "attempts", "next_attempt_at", "created_at",
    "delivered_at", "last_error", "external_ref",
)


def summary(row: Any) -> IncidentSummary:
    """An incident summary from a row holding `SUMMARY_COLUMNS`."""
    return IncidentSummary(
        **{name: getattr(row, name) for name in _SUMMARY_AS_STORED},
        kind=row.job_kind,
        namespace=row.job_namespace,
        name=row.job_name,
        uid=row.job_uid,
        verdict=enum(Verdict, row.verdict, column="verdict"),
        status=enum(IncidentStatus, row.status, column="status"),
        severity=enum(Severity, row.severity, column="severity"),
    )


def decision(row: Any) -> Decision:
    """A decision from a `decisions` row."""
    return Decision(
        id=row.id,
        incident_id=row.incident_id,
        outcome=enum(DecisionOutcome, row.outcome, column="decision outcome"),
        actor_id=row.actor_id,
        actor_name=row.actor_name,
        source=enum(DecisionSource, row.source, column="decision source"),
        decided_at=row.decided_at,
        comment=row.comment,
        job=f"{row.job_namespace}/{row.job_name}",
    )


def event(row: Any) -> TimelineEvent:
    """A timeline event from an `incident_events` row."""
    return TimelineEvent(
        id=row.id, incident_id=row.incident_id, at=row.at,
        kind=enum(EventKind, row.kind, column="event kind"), actor=row.actor,
        detail=document(row.detail, f"detail of event {row.id}"),
    )


def action(row: Any) -> RemediationAction:
    """A remediation step from a `remediation_actions` row."""
    return RemediationAction(
        id=row.id, incident_id=row.incident_id, at=row.at,
        kind=enum(RemediationActionKind, row.kind, column="action kind"), actor=row.actor,
        succeeded=row.succeeded, payload=document(row.payload, f"payload of action {row.id}"),
        message=row.message,
    )


def message(row: Any) -> OutboxMessage:
    """An outbox message from an `outbox_messages` row."""
    return OutboxMessage(
        **{name: getattr(row, name) for name in _MESSAGE_AS_STORED},
        kind=enum(MessageKind, row.kind, column="message kind"),
        payload=document(row.payload, "payload"),
        status=enum(MessageStatus, row.status, column="message status"),
    )


def summary_by_id(conn: Connection, incident_id: int) -> IncidentSummary:
    """Read one incident's summary: `IncidentNotFoundError` or `CorruptRecordError` naming it."""
    row = conn.execute(select(*SUMMARY_COLUMNS).where(IncidentRow.id == incident_id)).first()
    if row is None:
        raise IncidentNotFoundError(incident_id)
    try:
        return summary(row)
    except UnreadableError as exc:
        raise CorruptRecordError(incident_id, str(exc)) from None
