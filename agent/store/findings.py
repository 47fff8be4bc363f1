"""Recording findings: open an incident for a new problem, or add a re-detection to the open one.

Who calls it: `IncidentStore.record_finding` (the detector, sweeps and the Alertmanager webhook),
inside one transaction. Dedupe is by job (cluster, kind, namespace, name): a job has at most one
open incident, whatever its verdicts. The unique partial index on the open incidents' job makes
two concurrent first detections (two replicas, a restart racing a retry) open one incident; the
loser of the insert race re-reads the winner's incident and counts a re-detection on it. Every
re-detection counts in `detections`; before a decision the incident takes the verdict seen when
`follows_verdict` says so (a verdict change is its own timeline row), other re-detections are
folded into the last one within `timeline.FOLD_WINDOW`. "Utilization before" is the latest
utilization sample taken while the incident is open (`FindingRecord.utilization_while_open`):
never one from before it opened, when the job may have been healthy or fixed.

What it does not do: move an incident through its lifecycle (`agent.store.transitions`), or decide
what counts as a finding (the detector does).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from agent.model.incident import FindingOutcome, FindingRecord
from agent.model.instance import binds, first_evidence
from agent.model.lifecycle import EventKind, IncidentStatus, follows_verdict
from agent.model.verdict import Verdict
from agent.store.errors import InvalidRecordError
from agent.store.rows import summary_by_id
from agent.store.schema import IncidentRow
from agent.store.timeline import fold_event, insert_event

# Statuses nothing is being done in (before a decision, or an approved fix refused before any
# write): a re-detection still refreshes the verdict, the diagnosis and "utilization before".
_PRE_REMEDIATION = frozenset(
    {IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL, IncidentStatus.SNOOZED,
     IncidentStatus.REFUSED}
)

MAX_STORED_INT = 2**31 - 1  # INTEGER columns (PostgreSQL: 32-bit)

_LIMITED_FIELDS = {
    "cluster": IncidentRow.cluster,
    "kind": IncidentRow.job_kind,
    "namespace": IncidentRow.job_namespace,
    "name": IncidentRow.job_name,
    "uid": IncidentRow.job_uid,
    "target_zone": IncidentRow.target_zone,
}


def check_lengths(record: FindingRecord) -> None:
    """Refuse values longer or larger than their column on every backend (SQLite would store them,
    PostgreSQL would fail with a driver error)."""
    for field_name, column in _LIMITED_FIELDS.items():
        value = getattr(record, field_name)
        limit = getattr(column.type, "length", None)
        if value is not None and limit is not None and len(value) > limit:
            raise InvalidRecordError(
                f"finding {record.namespace}/{record.name}: {field_name} is {len(value)} "
                f"characters, at most {limit} fit"
            )
    if record.gpus is not None and not 0 <= record.gpus <= MAX_STORED_INT:
        raise InvalidRecordError(
            f"finding {record.namespace}/{record.name}: gpus is {record.gpus}, "
            f"the column takes 0 to {MAX_STORED_INT}"
        )


def record(conn: Connection, finding: FindingRecord) -> FindingOutcome:
    """Open an incident for `finding`, or count a re-detection on the job's open one."""
    existing = _open_of_job(conn, finding)
    if existing is None:
        try:
            with conn.begin_nested():
                incident_id = _insert_incident(conn, finding, fp=finding.fingerprint)
        except IntegrityError:
            existing = _open_of_job(conn, finding)
            if existing is None:  # pragma: no cover - the winner closed it already
                raise
        else:
            return FindingOutcome(incident=summary_by_id(conn, incident_id), new=True)
    previous = _redetect(conn, existing, finding=finding)
    return FindingOutcome(incident=summary_by_id(conn, existing), new=False,
                          previous_verdict=previous)


def _open_of_job(conn: Connection, finding: FindingRecord) -> int | None:
    """The job's open incident (the oldest, were there several from before the job index)."""
    return conn.execute(
        select(IncidentRow.id)
        .where(IncidentRow.cluster == finding.cluster, IncidentRow.job_kind == finding.kind,
               IncidentRow.job_namespace == finding.namespace,
               IncidentRow.job_name == finding.name, IncidentRow.closed_at.is_(None))
        .order_by(IncidentRow.id)
        .limit(1)
    ).scalar()


def incident_values(finding: FindingRecord, *, fp: str) -> dict[str, Any]:
    """The columns of the incident a new finding opens (one row, or one of a multi-row insert)."""
    now = finding.detected_at
    return {
        "cluster": finding.cluster,
        "job_kind": finding.kind,
        "job_namespace": finding.namespace,
        "job_name": finding.name,
        "job_uid": finding.uid,
        "verdict": finding.verdict.value,
        "fingerprint": fp,
        "status": IncidentStatus.OPEN.value,
        "status_by": "detector",
        "severity": finding.effective_severity.value,
        "opened_at": now,
        "updated_at": now,
        "onset_at": finding.onset_at,
        "target_zone": finding.target_zone,
        "diagnosis": finding.persisted_diagnosis(),
        "utilization_before": finding.utilization_while_open(now),
        "estimated_cost": finding.estimated_cost,
        "gpus": finding.gpus,
        "detections": 1,
    }


def detected_event(finding: FindingRecord) -> dict[str, Any]:
    """The evidence of a finding's timeline event (`detected`, or a `redetected` one)."""
    return _evidence(finding)


def _insert_incident(conn: Connection, finding: FindingRecord, *, fp: str) -> int:
    incident_id: int = conn.execute(
        insert(IncidentRow).values(**incident_values(finding, fp=fp)).returning(IncidentRow.id)
    ).scalar_one()
    insert_event(conn, incident_id, kind=EventKind.DETECTED, now=finding.detected_at,
                 actor="detector", detail=_evidence(finding))
    return incident_id


@dataclass(frozen=True)
class Redetection:
    """What a re-detection writes: `values`, the incident's columns besides `detections`;
    `previous`, its verdict before (None: unreadable); `own_row`, a new verdict, whose timeline
    row is its own (never folded into the last)."""

    values: dict[str, Any]
    previous: Verdict | None
    own_row: bool


def redetection(
    finding: FindingRecord, *, status: str, verdict: str, opened_at: datetime,
    uid: str | None = None, onset_at: datetime | None = None,
) -> Redetection:
    """What a re-detection of the open incident in `status` with `verdict` (its job's `uid`,
    None when not known yet, and `onset_at`) writes. An incident recorded without its job's uid
    takes the uid this finding knows, when that job was created by the incident's first
    evidence (`agent.model.instance.binds`): a job of that name created later is another one."""
    try:
        previous: Verdict | None = Verdict(verdict)
    except ValueError:
        previous = None
    values: dict[str, Any] = {"updated_at": finding.detected_at}
    if uid is None and finding.uid and binds(finding.job_created_at,
                                             first_evidence(opened_at, onset_at)):
        values["job_uid"] = finding.uid
    # Before a decision the incident follows what is seen (a degraded split that starts being
    # blocked is the same incident, now blocked; a job whose split became a policy block is the
    # same job's problem). Once decided it keeps describing what was decided on: what a
    # remediation's own pod moves look like (an old pod still terminating in the other zone) is
    # a timeline event, never the incident's verdict.
    follows = status in _PRE_REMEDIATION and (
        previous is None or follows_verdict(previous, finding.verdict))
    if follows:
        values.update(
            verdict=finding.verdict.value,
            severity=finding.effective_severity.value,
            diagnosis=finding.persisted_diagnosis(),
            **_known(target_zone=finding.target_zone, estimated_cost=finding.estimated_cost,
                     gpus=finding.gpus,
                     utilization_before=finding.utilization_while_open(opened_at)),
        )
    return Redetection(values, previous, follows and previous is not finding.verdict)


def _redetect(conn: Connection, incident_id: int, *, finding: FindingRecord) -> Verdict | None:
    """Count a re-detection; returns the incident's verdict before it (None: unreadable)."""
    row = conn.execute(
        select(IncidentRow.status, IncidentRow.verdict, IncidentRow.opened_at,
               IncidentRow.job_uid, IncidentRow.onset_at)
        .where(IncidentRow.id == incident_id)
    ).one()
    seen = redetection(finding, status=row.status, verdict=row.verdict, opened_at=row.opened_at,
                       uid=row.job_uid, onset_at=row.onset_at)  # fmt: skip
    values: dict[str, Any] = {**seen.values, "detections": IncidentRow.detections + 1}
    conn.execute(update(IncidentRow).where(IncidentRow.id == incident_id).values(**values))
    if seen.own_row:
        # a new verdict is a row of its own (never folded away): the chat message is re-rendered
        insert_event(conn, incident_id, kind=EventKind.REDETECTED, now=finding.detected_at,
                     actor="detector", detail=_evidence(finding))
        return seen.previous
    # a flood of re-detections (one webhook body of 1,000 alerts) is one timeline row per window
    fold_event(conn, incident_id, kind=EventKind.REDETECTED, now=finding.detected_at,
               actor="detector", detail=_evidence(finding))
    return seen.previous


def _evidence(finding: FindingRecord) -> dict[str, Any]:
    return {"verdict": finding.verdict.value,
            **_known(target_zone=finding.target_zone, utilization_now=finding.utilization_now,
                     utilization_baseline=finding.utilization_baseline)}


def _known(**values: Any) -> dict[str, Any]:
    """The values that are not None (a re-detection never erases what an earlier one knew)."""
    return {key: value for key, value in values.items() if value is not None}


def bind_uid(conn: Connection, incident_id: int, uid: str, *, now: datetime,
             actor: str) -> str | None:
    """Record `uid` as the incident's job uid when it has none yet (a NOTE event says so); the
    job uid the incident holds afterwards (another one when it was already bound; None when the
    incident is not there)."""
    done = conn.execute(
        update(IncidentRow)
        .where(IncidentRow.id == incident_id, IncidentRow.job_uid.is_(None))
        .values(job_uid=uid, updated_at=now)
    )
    if done.rowcount:
        insert_event(conn, incident_id, kind=EventKind.NOTE, now=now, actor=actor,
                     detail={"note": f"bound to the job's object, uid {uid}", "uid": uid})
    found = conn.execute(select(IncidentRow.job_uid).where(IncidentRow.id == incident_id)).first()
    return None if found is None or found.job_uid is None else str(found.job_uid)
