"""Recording many findings in one transaction: the new incidents of a cluster-wide batch with their
timeline, plan previews, approval requests and outbox messages, written together.

Who calls it: `IncidentStore.record_findings` (the pipeline's cluster-wide batches: start-up, a
new term, a node change), inside one transaction per chunk of findings; the facade owns the
transaction and its retries.

Guarantees, the same as `findings.record` one finding at a time: one open incident per job (the
unique partial index), each new incident with its `detected` event, and a finding whose job has
an open incident (or one opened by another writer while the batch runs) counted as a
re-detection, as `findings.record` counts it. One more: what a new incident's `FollowUp` names (its
plan preview, its approval request, its outbox messages, its notes) commits in the transaction
that opens the incident, so a crash never leaves an incident without its queued messages.

How: the open incidents of the chunk's jobs are read in one query; the new incidents are
inserted with one multi-row INSERT ... RETURNING, their `detected` events with one more, and read
back in one query; their messages go in one multi-row INSERT after one read of the dedupe keys
already queued. Re-detections update their incidents with one multi-row UPDATE per set of
columns (`findings.redetection`) and add or fold their `redetected` events as
`findings.record` does, after one read of the latest ones. A job twice in one chunk is recorded
one at a time after the first. A unique conflict (another writer opened one of the incidents, or queued one of
the dedupe keys, meanwhile) rolls that statement back to its savepoint and the chunk is recorded
one by one (`findings.record`, `outbox.enqueue`) in the same transaction. Plan previews, approval
requests and notes are written one by one (`timeline.record_action`,
`approval_deadlines.request_approval`, `timeline.insert_event`).

What it does not do: decide what a follow-up holds (the pipeline and its playbooks do, without I/O:
`follow` is called inside the transaction, again when a transaction is retried), or read a clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from agent.model.incident import (
    FindingOutcome,
    FindingRecord,
    FollowUp,
    IncidentSummary,
    MessageDraft,
)
from agent.model.lifecycle import EventKind
from agent.model.verdict import Verdict
from agent.store import approval_deadlines, findings, outbox, timeline
from agent.store.errors import CorruptRecordError
from agent.store.rows import SUMMARY_COLUMNS, UnreadableError, summary
from agent.store.schema import IncidentEventRow, IncidentRow, OutboxRow

Follow = Callable[[int, FindingOutcome], FollowUp | None]
DETECTOR = "detector"  # the actor of detection events, as `findings.record` writes them


Job = tuple[str, str, str, str]  # cluster, kind, namespace, name: one open incident each


def _job(record: FindingRecord) -> Job:
    return (record.cluster, record.kind, record.namespace, record.name)


def record_many(
    conn: Connection, records: Sequence[FindingRecord], *, follow: Follow | None
) -> list[FindingOutcome]:
    """Record `records` (see the module docstring); the outcomes in their order. `follow(i,
    outcome)` names what to write with the incident that `records[i]` opened."""
    jobs = [_job(r) for r in records]
    open_now = _open_incidents(conn, records)
    fresh: dict[Job, int] = {}  # job -> index of the record that opens its incident
    again: dict[Job, int] = {}  # job -> index of the first record that re-detects it
    for i, job in enumerate(jobs):
        chosen = again if job in open_now else fresh
        chosen.setdefault(job, i)
    outcomes: list[FindingOutcome | None] = [None] * len(records)
    opened = _open_all(conn, [records[i] for i in fresh.values()])
    if opened is not None:
        for i, incident in zip(fresh.values(), opened, strict=True):
            outcomes[i] = FindingOutcome(incident=incident, new=True)
    seen = _redetect_all(conn, [(records[i], open_now[job]) for job, i in again.items()])
    for i, (incident, previous) in zip(again.values(), seen, strict=True):
        outcomes[i] = FindingOutcome(incident=incident, new=False, previous_verdict=previous)
    for i, record in enumerate(records):
        if outcomes[i] is None:  # a repeat within the chunk, or a conflict: one at a time
            outcomes[i] = findings.record(conn, record)
    done = [o for o in outcomes if o is not None]
    if follow is not None:
        _follow_up(conn, [(o, follow(i, o)) for i, o in enumerate(done) if o.new])
    return done


def _open_incidents(conn: Connection, records: Sequence[FindingRecord]) -> dict[Job, Any]:
    """Job -> (id, status, verdict, opened_at, job_uid, onset_at) of its open incident (the oldest, as
    `findings.record` takes it), for the jobs of `records`."""
    wanted = {_job(r) for r in records}
    rows = conn.execute(
        select(IncidentRow.id, IncidentRow.cluster, IncidentRow.job_kind,
               IncidentRow.job_namespace, IncidentRow.job_name, IncidentRow.status,
               IncidentRow.verdict, IncidentRow.opened_at, IncidentRow.job_uid,
               IncidentRow.onset_at)
        .where(IncidentRow.job_name.in_(sorted({r.name for r in records})),
               IncidentRow.closed_at.is_(None))
        .order_by(IncidentRow.id)
    )  # fmt: skip
    out: dict[Job, Any] = {}
    for row in rows:
        job = (row.cluster, row.job_kind, row.job_namespace, row.job_name)
        if job in wanted and job not in out:
            out[job] = row
    return out


def _summaries(conn: Connection, ids: Sequence[int]) -> list[IncidentSummary]:
    read = {
        row.id: row
        for row in conn.execute(select(*SUMMARY_COLUMNS).where(IncidentRow.id.in_(ids)))
    }
    out = []
    for incident_id in ids:
        try:
            out.append(summary(read[incident_id]))
        except UnreadableError as exc:
            raise CorruptRecordError(incident_id, str(exc)) from None
    return out


def _open_all(conn: Connection, records: Sequence[FindingRecord]) -> list[IncidentSummary] | None:
    """Open an incident for each record (multi-row inserts); their summaries, or None when one
    conflicts with an incident opened meanwhile (nothing written then)."""
    if not records:
        return []
    try:
        with conn.begin_nested():
            rows = conn.execute(
                insert(IncidentRow).returning(IncidentRow.id, sort_by_parameter_order=True),
                [findings.incident_values(r, fp=r.fingerprint) for r in records],
            ).all()
            ids = [int(row.id) for row in rows]
            conn.execute(
                insert(IncidentEventRow),
                [{"incident_id": incident_id, "at": r.detected_at, "kind": EventKind.DETECTED.value,
                  "actor": DETECTOR, "detail": findings.detected_event(r)}
                 for incident_id, r in zip(ids, records, strict=True)],
            )
    except IntegrityError:
        return None
    return _summaries(conn, ids)


def _redetect_all(
    conn: Connection, items: Sequence[tuple[FindingRecord, Any]]
) -> list[tuple[IncidentSummary, Verdict | None]]:
    """Count a re-detection on each (record, its job's open incident row), as `findings.record`
    does (`findings.redetection`): the incident's columns (one multi-row UPDATE per set of
    columns), and its `redetected` event, a row of its own for a new verdict, else folded into
    the latest one within `timeline.FOLD_WINDOW` or added (one query for the latest events, one
    multi-row statement each way). The summaries, with each incident's verdict before."""
    if not items:
        return []
    columns = IncidentRow.__table__.c
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    seen = []
    for record, row in items:
        found = findings.redetection(record, status=row.status, verdict=row.verdict,
                                     opened_at=row.opened_at, uid=row.job_uid,
                                     onset_at=row.onset_at)  # fmt: skip
        seen.append(found)
        groups.setdefault(tuple(sorted(found.values)), []).append(
            {"b_id": row.id, **{f"v_{k}": v for k, v in found.values.items()}})
    for names, params in groups.items():
        conn.execute(
            update(IncidentRow)
            .where(IncidentRow.id == bindparam("b_id"))
            .values(detections=IncidentRow.detections + 1,
                    **{k: bindparam(f"v_{k}", type_=columns[k].type) for k in names}),
            params,
        )  # fmt: skip
    ids = [int(row.id) for _, row in items]
    latest_ids = (
        select(func.max(IncidentEventRow.id))
        .where(IncidentEventRow.incident_id.in_(ids),
               IncidentEventRow.kind == EventKind.REDETECTED.value,
               IncidentEventRow.actor == DETECTOR)
        .group_by(IncidentEventRow.incident_id)
    )  # fmt: skip
    latest = {
        int(row.incident_id): row
        for row in conn.execute(
            select(IncidentEventRow.id, IncidentEventRow.incident_id, IncidentEventRow.at,
                   IncidentEventRow.detail).where(IncidentEventRow.id.in_(latest_ids))
        )
    }  # fmt: skip
    added: list[dict[str, Any]] = []
    folded: list[dict[str, Any]] = []
    for (record, row), found in zip(items, seen, strict=True):
        incident_id = int(row.id)
        now, detail = record.detected_at, findings.detected_event(record)
        last = latest.get(incident_id)
        if not found.own_row and last is not None and timeline.folds(last.at, now=now):
            folded.append({"b_id": last.id,
                           "v_detail": timeline.folded_detail(last.detail, detail, now=now)})
        else:
            added.append({"incident_id": incident_id, "at": now,
                          "kind": EventKind.REDETECTED.value, "actor": DETECTOR, "detail": detail})
    if added:
        conn.execute(insert(IncidentEventRow), added)
    if folded:
        conn.execute(
            update(IncidentEventRow)
            .where(IncidentEventRow.id == bindparam("b_id"))
            .values(detail=bindparam("v_detail", type_=IncidentEventRow.__table__.c.detail.type)),
            folded,
        )
    return list(zip(_summaries(conn, ids), [f.previous for f in seen], strict=True))


def _follow_up(conn: Connection, ups: Sequence[tuple[FindingOutcome, FollowUp | None]]) -> None:
    """Write each new incident's follow-up: previews and approval requests one by one, every
    message in one multi-row insert, then the notes."""
    messages: list[tuple[int, MessageDraft, FollowUp]] = []
    for outcome, up in ups:
        if up is None:
            continue
        incident_id = outcome.incident.id
        if up.approval_deadline is not None:
            approval_deadlines.check_deadline(incident_id, deadline=up.approval_deadline, now=up.now)
        if up.action is not None:
            draft = up.action
            timeline.record_action(
                conn, incident_id, draft.kind, now=up.now, actor=draft.actor,
                succeeded=draft.succeeded, payload=dict(draft.payload), message=draft.message,
                event=draft.event,
            )
        if up.approval_deadline is not None:
            approval_deadlines.request_approval(
                conn, incident_id, deadline=up.approval_deadline, now=up.now,
                actor=up.approval_actor, token=str(uuid.uuid4()), attempt=1,
            )
        messages.extend((incident_id, m, up) for m in up.messages)
    _enqueue_all(conn, messages)
    for outcome, up in ups:
        if up is None:
            continue
        for note in up.notes:
            timeline.touch(conn, outcome.incident.id, updated_at=up.now)
            timeline.insert_event(conn, outcome.incident.id, kind=note.kind, now=up.now,
                                  actor=note.actor, detail=dict(note.detail))


def _enqueue_all(conn: Connection, messages: Sequence[tuple[int, MessageDraft, FollowUp]]) -> None:
    """Queue the messages (one multi-row insert; a dedupe key queued already is skipped, as
    `outbox.enqueue` skips it); one by one after a conflict."""
    keys = sorted({m.dedupe_key for _, m, _ in messages if m.dedupe_key is not None})
    queued: set[str] = set()
    if keys:
        found = conn.execute(
            select(OutboxRow.dedupe_key).where(OutboxRow.dedupe_key.in_(keys))
        ).scalars()
        queued = {key for key in found if key is not None}
    rows = []
    for incident_id, m, up in messages:
        if m.dedupe_key is not None:
            if m.dedupe_key in queued:
                continue
            queued.add(m.dedupe_key)
        rows.append(outbox.message_values(m.kind, payload=m.payload, now=up.now,
                                          incident_id=incident_id, channel=m.channel,
                                          dedupe_key=m.dedupe_key))  # fmt: skip
    if not rows:
        return
    try:
        with conn.begin_nested():
            conn.execute(insert(OutboxRow), rows)
    except IntegrityError:  # a key queued meanwhile by another writer
        for incident_id, m, up in messages:
            outbox.enqueue(conn, m.kind, payload=m.payload, now=up.now, incident_id=incident_id,
                           channel=m.channel, dedupe_key=m.dedupe_key)
