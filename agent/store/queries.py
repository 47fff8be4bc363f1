"""History queries: listings, one incident in full, stats, open counts and what to resume.

Who calls it: `IncidentStore.list_incidents`, `get_incident`, `stats`, `open_counts` and
`incidents_to_resume` (the CLI's `incidents` commands, the HTTP API, the chat layer's replies, the
agent's gauge and its resume on gaining leadership), each inside one read transaction.

Rows that cannot be read are named, never fatal: a listing reports them in `problems`, one incident
raises `CorruptRecordError` naming it, the resume list skips them (the listing reports them).

What it does not do: write anything, or read a clock (`now` is passed in).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Float, String, and_, bindparam, column, func, select, text

from agent.model.incident import (
    EgressTotals,
    IncidentDetail,
    IncidentListing,
    IncidentQuery,
    IncidentStats,
    IncidentSummary,
    RecordProblem,
)
from agent.model.lifecycle import (
    OPEN_STATUSES,
    EventKind,
    IncidentStatus,
    ResumeAction,
    egress_saved,
    gpu_hours_recovered,
    resume_action,
)
from agent.store.errors import CorruptRecordError
from agent.store.rows import (
    SUMMARY_COLUMNS,
    UnreadableError,
    action,
    decision,
    document,
    event,
    message,
    summary,
    summary_by_id,
)
from agent.store.schema import ActionRow, DecisionRow, IncidentEventRow, IncidentRow, OutboxRow
from agent.store.types import UTCDateTime


def list_incidents(conn: Connection, query: IncidentQuery) -> IncidentListing:
    """Incidents matching `query`, newest first, with the rows that could not be read named."""
    conditions: list[Any] = []
    if query.cluster is not None:
        conditions.append(IncidentRow.cluster == query.cluster)
    if query.namespace is not None:
        conditions.append(IncidentRow.job_namespace == query.namespace)
    if query.name is not None:
        conditions.append(IncidentRow.job_name == query.name)
    if query.uid is not None:
        conditions.append(IncidentRow.job_uid == query.uid)
    if query.status is not None:
        conditions.append(IncidentRow.status == query.status.value)
    if query.verdict is not None:
        conditions.append(IncidentRow.verdict == query.verdict.value)
    if query.since is not None:
        conditions.append(IncidentRow.opened_at >= query.since)
    if query.open_only:
        conditions.append(IncidentRow.closed_at.is_(None))
    statement = (
        select(*SUMMARY_COLUMNS)
        .where(and_(True, *conditions))
        .order_by(IncidentRow.opened_at.desc(), IncidentRow.id.desc())
        .limit(max(0, query.limit))
    )
    incidents: list[IncidentSummary] = []
    problems: list[RecordProblem] = []
    for row in conn.execute(statement):
        try:
            incidents.append(summary(row))
        except UnreadableError as exc:
            problems.append(RecordProblem(row.id, str(exc)))
    if query.with_reverts and incidents:
        by = reverted_by(conn, [i.id for i in incidents])
        incidents = [replace(i, reverted_by=by.get(i.id)) for i in incidents]
    return IncidentListing(incidents, problems)


def reverted_by(conn: Connection, ids: Sequence[int]) -> dict[int, str]:
    """Each incident's latest `fix_reverted` event's actor (who undid its fix, or the fix it
    re-detects), for those that have one: one query."""
    statement = (
        select(IncidentEventRow.incident_id, IncidentEventRow.actor)
        .where(IncidentEventRow.kind == EventKind.FIX_REVERTED.value,
               IncidentEventRow.incident_id.in_(list(ids)))
        .order_by(IncidentEventRow.at, IncidentEventRow.id)
    )  # fmt: skip
    return {row.incident_id: str(row.actor or "") for row in conn.execute(statement)}


def open_counts(conn: Connection, *, cluster: str) -> dict[tuple[str, str], int]:
    """Open incidents of `cluster` counted by (verdict, status), in one grouped query."""
    statement = (
        select(IncidentRow.verdict, IncidentRow.status, func.count())
        .where(IncidentRow.cluster == cluster, IncidentRow.closed_at.is_(None))
        .group_by(IncidentRow.verdict, IncidentRow.status)
    )
    return {(str(v), str(s)): int(n) for v, s, n in conn.execute(statement)}


def get_incident(conn: Connection, incident_id: int) -> IncidentDetail:
    """One incident with its timeline, decisions, actions and messages."""
    head = summary_by_id(conn, incident_id)
    row = conn.execute(
        select(IncidentRow.diagnosis, IncidentRow.onset_at, IncidentRow.decided_at,
               IncidentRow.snoozed_until).where(IncidentRow.id == incident_id)
    ).one()
    try:
        diagnosis = document(row.diagnosis, "diagnosis")
        events = [event(e) for e in conn.execute(
            select(IncidentEventRow).where(IncidentEventRow.incident_id == incident_id)
            .order_by(IncidentEventRow.at, IncidentEventRow.id)
        )]
        decisions = [decision(d) for d in conn.execute(
            select(DecisionRow).where(DecisionRow.incident_id == incident_id)
            .order_by(DecisionRow.id)
        )]
        actions = [action(a) for a in conn.execute(
            select(ActionRow).where(ActionRow.incident_id == incident_id)
            .order_by(ActionRow.at, ActionRow.id)
        )]
        messages = [message(m) for m in conn.execute(
            select(OutboxRow).where(OutboxRow.incident_id == incident_id).order_by(OutboxRow.id)
        )]
    except UnreadableError as exc:
        raise CorruptRecordError(incident_id, str(exc)) from None
    undone = [e.actor for e in events if e.kind is EventKind.FIX_REVERTED]
    if undone:
        head = replace(head, reverted_by=undone[-1] or "")
    return IncidentDetail(
        incident=head, diagnosis=diagnosis, onset_at=row.onset_at, decided_at=row.decided_at,
        snoozed_until=row.snoozed_until, events=events, decisions=decisions, actions=actions,
        messages=messages,
    )


def stats(conn: Connection, *, since: datetime, now: datetime) -> IncidentStats:
    """Counts by verdict and outcome, mean times to detect/decide/resolve and GPU-hours recovered,
    over incidents opened in [since, now].

    Counts and durations come from one aggregate query grouped by verdict and status (served by the
    opened_at index). Time to detect: onset -> opened; to decide: opened -> first decision; to
    resolve: opened -> closed, for resolved incidents. GPU-hours: the figures of the resolved
    incidents, summed with the model's `gpu_hours_recovered` (its one definition). Egress: the
    incidents with an egress figure (`estimated_cost`, dollars per day), apart by the basis their
    diagnosis records (`waste.egress_source`, read by the database; none recorded: estimated):
    per day for the open ones, and the model's `egress_saved` for the resolved ones.
    """
    seconds = _seconds_between_sql(conn.dialect.name)
    window = (_dt("since", since), _dt("until", now))
    aggregate = text(
        "SELECT verdict, status, COUNT(*) AS n, "
        f"SUM({seconds('onset_at', 'opened_at')}) AS ttd_sum, COUNT(onset_at) AS ttd_n, "
        f"SUM({seconds('opened_at', 'decided_at')}) AS dec_sum, COUNT(decided_at) AS dec_n, "
        f"SUM(CASE WHEN status = :resolved THEN {seconds('opened_at', 'closed_at')} END) "
        "AS ttr_sum, "
        "SUM(CASE WHEN status = :resolved AND closed_at IS NOT NULL THEN 1 ELSE 0 END) AS ttr_n "
        "FROM incidents WHERE opened_at >= :since AND opened_at <= :until "
        "GROUP BY verdict, status"
    ).bindparams(*window, resolved=IncidentStatus.RESOLVED.value)
    by_verdict: dict[str, int] = {}
    by_outcome: dict[str, int] = {}
    sums = {"ttd": [0.0, 0], "dec": [0.0, 0], "ttr": [0.0, 0]}
    total = 0
    for row in conn.execute(aggregate):
        by_verdict[row.verdict] = by_verdict.get(row.verdict, 0) + row.n
        by_outcome[row.status] = by_outcome.get(row.status, 0) + row.n
        total += row.n
        for key, acc in sums.items():
            acc[0] += float(getattr(row, f"{key}_sum") or 0.0)
            acc[1] += int(getattr(row, f"{key}_n") or 0)
    means = {k: timedelta(seconds=v[0] / v[1]) if v[1] else None for k, v in sums.items()}
    return IncidentStats(
        since=since, until=now, total=total,
        by_verdict=dict(sorted(by_verdict.items())),
        by_outcome=dict(sorted(by_outcome.items())),
        mean_time_to_detect=means["ttd"], mean_time_to_decide=means["dec"],
        mean_time_to_resolve=means["ttr"],
        gpu_hours_recovered=_gpu_hours(conn, since=since, now=now),
        **_egress(conn, since=since, now=now),
    )


def _gpu_hours(conn: Connection, *, since: datetime, now: datetime) -> float:
    rows = conn.execute(
        select(IncidentRow.gpus, IncidentRow.utilization_before, IncidentRow.utilization_after,
               IncidentRow.closed_at)
        .where(IncidentRow.opened_at >= since, IncidentRow.opened_at <= now,
               IncidentRow.status == IncidentStatus.RESOLVED.value)
    )
    return sum(
        (gpu_hours_recovered(gpus=r.gpus, utilization_before=r.utilization_before,
                             utilization_after=r.utilization_after, resolved_at=r.closed_at,
                             until=now) for r in rows),
        0.0,
    )


def _egress(conn: Connection, *, since: datetime, now: datetime) -> dict[str, EgressTotals]:
    """The egress figures of the window's incidents that have one: dollars per day from
    `estimated_cost`, the basis and GB per day read from the diagnosis by the database (no
    document leaves it); a document that is not valid JSON reads as an estimate without GB."""
    source, gb_expr = _waste_fields_sql(conn.dialect.name)
    statuses = [*(s.value for s in OPEN_STATUSES), IncidentStatus.RESOLVED.value]
    statement = text(
        f"SELECT status, closed_at, estimated_cost, {source} AS basis, {gb_expr} AS gb "
        "FROM incidents WHERE opened_at >= :since AND opened_at <= :until "
        "AND estimated_cost IS NOT NULL AND status IN :statuses"
    ).bindparams(
        _dt("since", since), _dt("until", now), bindparam("statuses", statuses, expanding=True)
    ).columns(column("status", String()), column("closed_at", UTCDateTime()),
              column("estimated_cost", Float()), column("basis", String()),
              column("gb", Float()))  # fmt: skip
    sums: dict[str, dict[str, float]] = {"open": {}, "saved": {}}
    for r in conn.execute(statement):
        basis = "measured" if r.basis == "measured" else "estimated"
        gb = float(r.gb) if isinstance(r.gb, int | float) else None
        usd = float(r.estimated_cost)
        if r.status == IncidentStatus.RESOLVED.value:
            target = sums["saved"]
            usd = egress_saved(usd, resolved_at=r.closed_at, until=now)
            gb = egress_saved(gb, resolved_at=r.closed_at, until=now)
        else:
            target = sums["open"]
        target[f"{basis}_usd"] = target.get(f"{basis}_usd", 0.0) + usd
        target[f"{basis}_gb"] = target.get(f"{basis}_gb", 0.0) + (gb or 0.0)
        target[f"{basis}_incidents"] = target.get(f"{basis}_incidents", 0) + 1
    return {
        "egress_per_day_open": _totals(sums["open"]),
        "egress_saved": _totals(sums["saved"]),
    }


def _waste_fields_sql(dialect: str) -> tuple[str, str]:
    """SQL reading the diagnosis' `waste.egress_source` and numeric `waste.cross_zone_gb_per_day`,
    per backend (NULL when the document is not valid JSON or the field is not there)."""
    if dialect == "postgresql":
        number = "jsonb_typeof(diagnosis #> '{waste,cross_zone_gb_per_day}') = 'number'"
        return ("diagnosis #>> '{waste,egress_source}'",
                f"CASE WHEN {number} THEN (diagnosis #>> '{{waste,cross_zone_gb_per_day}}')::float "
                "END")  # fmt: skip
    valid = "json_valid(diagnosis)"
    gb = "json_extract(diagnosis, '$.waste.cross_zone_gb_per_day')"
    return (f"CASE WHEN {valid} THEN json_extract(diagnosis, '$.waste.egress_source') END",
            f"CASE WHEN {valid} AND json_type(diagnosis, '$.waste.cross_zone_gb_per_day') IN "
            f"('real', 'integer') THEN {gb} END")  # fmt: skip


def _totals(sums: dict[str, float]) -> EgressTotals:
    return EgressTotals(
        measured_usd=round(sums.get("measured_usd", 0.0), 4),
        measured_gb=round(sums.get("measured_gb", 0.0), 3),
        measured_incidents=int(sums.get("measured_incidents", 0)),
        estimated_usd=round(sums.get("estimated_usd", 0.0), 4),
        estimated_gb=round(sums.get("estimated_gb", 0.0), 3),
        estimated_incidents=int(sums.get("estimated_incidents", 0)),
    )


def incidents_to_resume(conn: Connection) -> list[tuple[IncidentSummary, ResumeAction]]:
    """Every open incident with what a (re)starting agent must do for it; unreadable rows are
    skipped here (the listing names them)."""
    statement = (
        select(*SUMMARY_COLUMNS)
        .where(IncidentRow.closed_at.is_(None),
               IncidentRow.status.in_([s.value for s in OPEN_STATUSES]))
        .order_by(IncidentRow.id)
    )
    out: list[tuple[IncidentSummary, ResumeAction]] = []
    for row in conn.execute(statement):
        try:
            found = summary(row)
        except UnreadableError:
            continue
        out.append((found, resume_action(found.status)))
    return out


def _dt(name: str, value: datetime) -> Any:
    return bindparam(name, value, type_=UTCDateTime())


def _seconds_between_sql(dialect: str) -> Callable[[str, str], str]:
    """SQL for the seconds from column/param `a` to `b`, per backend."""
    if dialect == "postgresql":
        return lambda a, b: f"EXTRACT(EPOCH FROM ({b} - {a}))"
    return lambda a, b: f"((julianday({b}) - julianday({a})) * 86400.0)"
