"""The incident store's tables as SQLAlchemy 2.x typed ORM models.

Who uses it: the store's modules (`findings`, `transitions`, `timeline`, `outbox`, `queries`,
`retention`), `agent.store.migrate` and `migrations/env.py` (autogenerate comparison: the migrated
schema must equal these models). Nothing outside the store sees these rows: the store returns the
plain dataclasses of `agent.model.incident`.

What it does not do: enforce the lifecycle (that is the pure state machine plus the store's
conditional UPDATEs). Status, verdict and kinds are plain strings, not database enums or CHECKs, so
that a value written by a newer agent is readable (and reported) by an older one instead of failing
the whole query.

Tables: `incidents`; `incident_events` (the timeline); `decisions` (the audit trail: no foreign key,
kept when the incident is purged, with the job's name copied in); `remediation_actions`;
`outbox_messages` (Slack posts and updates to deliver, with attempts, next-attempt time and the
claim of the deliverer holding it); `admission_decisions` (what the admission webhook did with
each job created, no foreign key: a job placed at admission has no incident); `admission_groups`
(a generic group's kept admission decision, one per cluster, namespace and group: the first
object's zone, which every replica applies to the group's later objects);
`admission_certificates` (the webhook's serving certificate when the agent makes its own: one
per cluster, the first replica's, so every replica serves the one CA the webhook configuration
names).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedColumn, mapped_column

from agent.store.types import JSONDocument, UTCDateTime

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def _incident_ref() -> MappedColumn[Any]:
    """The `incident_id` of a row that belongs to an incident (deleted with it)."""
    return mapped_column(Integer, ForeignKey("incidents.id", ondelete="CASCADE"))


class IncidentRow(Base):
    __tablename__ = "incidents"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(253))
    job_kind: Mapped[str] = mapped_column(String(63))
    job_namespace: Mapped[str] = mapped_column(String(253))
    job_name: Mapped[str] = mapped_column(String(253))
    job_uid: Mapped[str | None] = mapped_column(String(128))
    verdict: Mapped[str] = mapped_column(String(32))
    fingerprint: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(32))
    status_by: Mapped[str | None] = mapped_column(String(253))
    # A random token written with every status change: a retried transition whose first COMMIT
    # succeeded (but whose answer was lost) recognises its own win by it.
    status_token: Mapped[str | None] = mapped_column(String(36))
    severity: Mapped[str] = mapped_column(String(16))
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    onset_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    decided_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    snoozed_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # When an unanswered approval request expires (the incident then becomes `expired`).
    approval_deadline: Mapped[datetime | None] = mapped_column(UTCDateTime())
    target_zone: Mapped[str | None] = mapped_column(String(63))
    diagnosis: Mapped[Any] = mapped_column(JSONDocument())
    utilization_before: Mapped[float | None] = mapped_column(Float)
    utilization_after: Mapped[float | None] = mapped_column(Float)
    estimated_cost: Mapped[float | None] = mapped_column(Float)
    gpus: Mapped[int | None] = mapped_column(Integer)
    detections: Mapped[int] = mapped_column(Integer, default=1)

    __table_args__ = (
        # One open incident per fingerprint (cluster, job, verdict class it opened with).
        Index(
            "uq_incidents_open_fingerprint",
            "fingerprint",
            unique=True,
            sqlite_where=text("closed_at IS NULL"),
            postgresql_where=text("closed_at IS NULL"),
        ),
        # One open incident per job (cluster, kind, namespace, name): the dedupe guarantee, so
        # two replicas (or a restart) never open a second incident for a job with one open.
        Index(
            "uq_incidents_open_job",
            "cluster",
            "job_kind",
            "job_namespace",
            "job_name",
            unique=True,
            sqlite_where=text("closed_at IS NULL"),
            postgresql_where=text("closed_at IS NULL"),
        ),
        Index("ix_incidents_job", "job_namespace", "job_name", "opened_at"),
        Index("ix_incidents_opened_at", "opened_at"),
        Index("ix_incidents_status_opened_at", "status", "opened_at"),
        Index("ix_incidents_verdict_opened_at", "verdict", "opened_at"),
        Index("ix_incidents_closed_at", "closed_at"),
    )


class IncidentEventRow(Base):
    __tablename__ = "incident_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    incident_id: Mapped[int] = _incident_ref()
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    kind: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str | None] = mapped_column(String(253))
    detail: Mapped[Any] = mapped_column(JSONDocument())

    __table_args__ = (Index("ix_incident_events_incident_at", "incident_id", "at"),)


class DecisionRow(Base):
    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # No foreign key on purpose: the audit trail outlives the incident (retention purge).
    incident_id: Mapped[int] = mapped_column(Integer)
    cluster: Mapped[str] = mapped_column(String(253))
    job_namespace: Mapped[str] = mapped_column(String(253))
    job_name: Mapped[str] = mapped_column(String(253))
    verdict: Mapped[str] = mapped_column(String(32))
    outcome: Mapped[str] = mapped_column(String(16))
    actor_id: Mapped[str] = mapped_column(String(253))
    actor_name: Mapped[str | None] = mapped_column(String(253))
    source: Mapped[str] = mapped_column(String(16))
    decided_at: Mapped[datetime] = mapped_column(UTCDateTime())
    comment: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_decisions_incident_id", "incident_id"),)


class ActionRow(Base):
    __tablename__ = "remediation_actions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    incident_id: Mapped[int] = _incident_ref()
    kind: Mapped[str] = mapped_column(String(16))
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    actor: Mapped[str | None] = mapped_column(String(253))
    succeeded: Mapped[bool | None] = mapped_column(Boolean)
    payload: Mapped[Any] = mapped_column(JSONDocument())
    message: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_remediation_actions_incident_id", "incident_id"),)


class OutboxRow(Base):
    __tablename__ = "outbox_messages"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    incident_id: Mapped[int | None] = _incident_ref()
    kind: Mapped[str] = mapped_column(String(16))
    channel: Mapped[str | None] = mapped_column(String(253))
    payload: Mapped[Any] = mapped_column(JSONDocument())
    dedupe_key: Mapped[str | None] = mapped_column(String(253), unique=True)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_error: Mapped[str | None] = mapped_column(Text)
    external_ref: Mapped[str | None] = mapped_column(String(253))
    # The deliverer holding the message: its random token, until when (NULL: nobody holds it).
    claim_token: Mapped[str | None] = mapped_column(String(36))
    claimed_until: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        Index("ix_outbox_messages_status_next_attempt_at", "status", "next_attempt_at"),
        Index("ix_outbox_messages_incident_id", "incident_id"),
    )


class AdmissionDecisionRow(Base):
    __tablename__ = "admission_decisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(253))
    request_uid: Mapped[str] = mapped_column(String(128))
    decided_at: Mapped[datetime] = mapped_column(UTCDateTime())
    job_kind: Mapped[str] = mapped_column(String(63))
    job_namespace: Mapped[str] = mapped_column(String(253))
    job_name: Mapped[str] = mapped_column(String(253))
    object_kind: Mapped[str] = mapped_column(String(63))
    object_name: Mapped[str] = mapped_column(String(253))
    outcome: Mapped[str] = mapped_column(String(16))
    zone: Mapped[str | None] = mapped_column(String(63))
    mode: Mapped[str] = mapped_column(String(16))
    kueue: Mapped[bool] = mapped_column(Boolean, default=False)
    kept: Mapped[bool] = mapped_column(Boolean, default=False)
    warning: Mapped[str] = mapped_column(Text)

    __table_args__ = (
        Index("ix_admission_decisions_decided_at", "decided_at"),
        Index("ix_admission_decisions_job", "job_namespace", "job_name", "decided_at"),
    )


class AdmissionGroupRow(Base):
    __tablename__ = "admission_groups"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(253))
    namespace: Mapped[str] = mapped_column(String(253))
    group_name: Mapped[str] = mapped_column(String(253))
    zone: Mapped[str] = mapped_column(String(63))
    decided_at: Mapped[datetime] = mapped_column(UTCDateTime())
    object_kind: Mapped[str] = mapped_column(String(63))
    object_name: Mapped[str] = mapped_column(String(253))

    __table_args__ = (
        Index("uq_admission_groups_group", "cluster", "namespace", "group_name", unique=True),
    )


class AdmissionCertificateRow(Base):
    __tablename__ = "admission_certificates"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(253), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    not_after: Mapped[datetime] = mapped_column(UTCDateTime())
    ca_pem: Mapped[str] = mapped_column(Text)
    cert_pem: Mapped[str] = mapped_column(Text)
    key_pem: Mapped[str] = mapped_column(Text)


metadata = Base.metadata
