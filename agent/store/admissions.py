"""The admission webhook's records: every decision, and a generic group's kept decision.

A base of `agent.store.repository.IncidentStore`; called through it by the webhook
(`agent.admission.webhook`: `record_admission`, `kept_group_zone`, `keep_group_zone`), the
`zonemedic admissions` command and `GET /api/admissions` (`list_admissions`) and the digest
(`admission_summary`). Each operation is one transaction, retried as every store operation is.

A group's kept decision is one row per (cluster, namespace, group) in `admission_groups`: the
first writer wins (the unique index; a replica that loses the race reads the winner's zone), and a
row older than `memory` is replaced by the next decision (the group's objects of another run).
Restarts avoided (the digest): placed decisions (the patch returned) in the window whose job had no
incident opened at or after the decision. The serving certificate the agent makes when none is
mounted is kept in `admission_certificates` (`shared_certificate`), one per cluster, so every
replica serves the CA the webhook configuration names. What it does not do: decide anything, or read a clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Connection, Table, and_, delete, exists, func, insert, select
from sqlalchemy.exc import IntegrityError

from agent.model.admission import (
    MAX_WARNING,
    AdmissionOutcome,
    AdmissionQuery,
    AdmissionRecord,
    AdmissionSummary,
)
from agent.store.errors import InvalidRecordError
from agent.store.schema import (
    AdmissionCertificateRow,
    AdmissionDecisionRow,
    AdmissionGroupRow,
    IncidentRow,
)
from agent.store.transactions import StoreTransactions

DECISIONS = cast(Table, AdmissionDecisionRow.__table__)
GROUPS = cast(Table, AdmissionGroupRow.__table__)
INCIDENTS = cast(Table, IncidentRow.__table__)
CERTIFICATES = cast(Table, AdmissionCertificateRow.__table__)
RENEW_BEFORE = timedelta(days=30)  # a kept certificate closer to its end than this is replaced
MAX_LIMIT = 1000

_LENGTHS = {"cluster": 253, "request_uid": 128, "job_kind": 63, "job_namespace": 253,
            "job_name": 253, "object_kind": 63, "object_name": 253, "zone": 63, "mode": 16}  # fmt: skip


@dataclass(frozen=True)
class StoredCertificate:
    """A serving certificate as PEM text: the CA that signed it, it, its key, its end."""

    ca_pem: str
    cert_pem: str
    key_pem: str
    not_after: datetime


def _check(record: AdmissionRecord) -> None:
    for name, most in _LENGTHS.items():
        value = getattr(record, name)
        if value is not None and len(value) > most:
            raise InvalidRecordError(f"admission record: {name} is longer than {most} characters")


def _record_of(row: Any) -> AdmissionRecord | None:
    try:
        outcome = AdmissionOutcome(row.outcome)
    except ValueError:
        return None  # written by a newer agent: not listed
    return AdmissionRecord(
        id=row.id, cluster=row.cluster, request_uid=row.request_uid,
        decided_at=row.decided_at, job_kind=row.job_kind,
        job_namespace=row.job_namespace, job_name=row.job_name,
        object_kind=row.object_kind, object_name=row.object_name,
        outcome=outcome, zone=row.zone, mode=row.mode, kueue=bool(row.kueue),
        kept=bool(row.kept), warning=row.warning,
    )


class AdmissionOperations(StoreTransactions):
    """The admission half of the store's surface."""

    def record_admission(self, record: AdmissionRecord) -> int:
        """Record one decision; its id."""
        _check(record)
        values = {
            "cluster": record.cluster, "request_uid": record.request_uid,
            "decided_at": record.decided_at, "job_kind": record.job_kind,
            "job_namespace": record.job_namespace, "job_name": record.job_name,
            "object_kind": record.object_kind, "object_name": record.object_name,
            "outcome": record.outcome.value, "zone": record.zone, "mode": record.mode,
            "kueue": record.kueue, "kept": record.kept, "warning": record.warning[:MAX_WARNING],
        }  # fmt: skip

        def body(conn: Connection, _attempt: int) -> int:
            found = conn.execute(insert(DECISIONS).values(**values).returning(DECISIONS.c.id))
            return int(found.scalar_one())

        return self._write("record an admission decision", body)

    def list_admissions(self, query: AdmissionQuery | None = None) -> list[AdmissionRecord]:
        """Recorded decisions matching `query`, newest first."""
        chosen = query or AdmissionQuery()
        limit = max(1, min(chosen.limit, MAX_LIMIT))
        stmt = select(DECISIONS)
        if chosen.since is not None:
            stmt = stmt.where(DECISIONS.c.decided_at >= chosen.since)
        if chosen.outcome is not None:
            stmt = stmt.where(DECISIONS.c.outcome == chosen.outcome.value)
        if chosen.namespace is not None:
            stmt = stmt.where(DECISIONS.c.job_namespace == chosen.namespace)
        stmt = stmt.order_by(DECISIONS.c.decided_at.desc(), DECISIONS.c.id.desc()).limit(limit)

        def body(conn: Connection) -> list[AdmissionRecord]:
            return [r for row in conn.execute(stmt) if (r := _record_of(row)) is not None]

        return self._read("list admission decisions", body)

    def admission_summary(self, *, since: datetime, now: datetime) -> AdmissionSummary:
        """Decisions in [since, now] by outcome, and the restarts they avoided."""
        window = and_(DECISIONS.c.decided_at >= since, DECISIONS.c.decided_at <= now)
        counts = select(DECISIONS.c.outcome, func.count()).where(window).group_by(DECISIONS.c.outcome)
        later_incident = exists().where(
            INCIDENTS.c.cluster == DECISIONS.c.cluster, INCIDENTS.c.job_kind == DECISIONS.c.job_kind,
            INCIDENTS.c.job_namespace == DECISIONS.c.job_namespace,
            INCIDENTS.c.job_name == DECISIONS.c.job_name,
            INCIDENTS.c.opened_at >= DECISIONS.c.decided_at,
        )  # fmt: skip
        avoided = (select(func.count()).select_from(DECISIONS)
                   .where(window, DECISIONS.c.outcome == AdmissionOutcome.PLACED.value, ~later_incident))  # fmt: skip

        def body(conn: Connection) -> AdmissionSummary:
            by = {str(row[0]): int(row[1]) for row in conn.execute(counts)}
            return AdmissionSummary(placed=by.get(AdmissionOutcome.PLACED.value, 0),
                                    restarts_avoided=int(conn.execute(avoided).scalar_one()),
                                    by_outcome=by)  # fmt: skip

        return self._read("summarise admission decisions", body)

    def kept_group_zone(
        self, *, cluster: str, namespace: str, group: str, now: datetime, memory: timedelta
    ) -> str | None:
        """The zone the group's first object was placed in, while younger than `memory`."""
        stmt = select(GROUPS.c.zone).where(
            GROUPS.c.cluster == cluster, GROUPS.c.namespace == namespace,
            GROUPS.c.group_name == group, GROUPS.c.decided_at > now - memory,
        )  # fmt: skip

        def body(conn: Connection) -> str | None:
            found = conn.execute(stmt).scalar_one_or_none()
            return str(found) if found is not None else None

        return self._read("read a group's admission decision", body)

    def keep_group_zone(
        self, *, cluster: str, namespace: str, group: str, zone: str, object_kind: str,
        object_name: str, now: datetime, memory: timedelta,
    ) -> str:  # fmt: skip
        """Keep `zone` as the group's decision unless another (younger than `memory`) is kept
        already; the zone kept (the first writer's)."""
        where = (GROUPS.c.cluster == cluster, GROUPS.c.namespace == namespace,
                 GROUPS.c.group_name == group)  # fmt: skip

        def body(conn: Connection, _attempt: int) -> str:
            conn.execute(delete(GROUPS).where(*where, GROUPS.c.decided_at <= now - memory))
            try:
                with conn.begin_nested():
                    conn.execute(insert(GROUPS).values(
                        cluster=cluster, namespace=namespace, group_name=group, zone=zone,
                        decided_at=now, object_kind=object_kind, object_name=object_name))  # fmt: skip
            except IntegrityError:
                pass  # another replica kept its decision first: that one holds
            return str(conn.execute(select(GROUPS.c.zone).where(*where)).scalar_one())

        return self._write("keep a group's admission decision", body)

    def shared_certificate(
        self, *, cluster: str, now: datetime, make: Callable[[], StoredCertificate],
        renew_before: timedelta = RENEW_BEFORE,
    ) -> StoredCertificate:
        """The cluster's serving certificate: the one kept (while it is valid for another
        `renew_before`), else `make()`'s, kept for every replica (the first writer's wins)."""
        where = CERTIFICATES.c.cluster == cluster
        columns = (CERTIFICATES.c.ca_pem, CERTIFICATES.c.cert_pem, CERTIFICATES.c.key_pem,
                   CERTIFICATES.c.not_after)  # fmt: skip

        def read(conn: Connection) -> StoredCertificate | None:
            row = conn.execute(select(*columns).where(where)).one_or_none()
            if row is None:
                return None
            return StoredCertificate(row.ca_pem, row.cert_pem, row.key_pem, row.not_after)

        def body(conn: Connection, _attempt: int) -> StoredCertificate:
            kept = read(conn)
            if kept is not None and kept.not_after > now + renew_before:
                return kept
            made = make()
            conn.execute(delete(CERTIFICATES).where(where, CERTIFICATES.c.not_after <= now + renew_before))
            try:
                with conn.begin_nested():
                    conn.execute(insert(CERTIFICATES).values(
                        cluster=cluster, created_at=now, not_after=made.not_after,
                        ca_pem=made.ca_pem, cert_pem=made.cert_pem, key_pem=made.key_pem))  # fmt: skip
            except IntegrityError:
                pass  # another replica kept one first: serve that one
            found = read(conn)
            assert found is not None, "a certificate was just kept"
            return found

        return self._write("keep the admission serving certificate", body)
