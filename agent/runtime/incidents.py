"""The incidents API over the store: reads (`GET /api/incidents`, `/api/incidents/{id}`),
decisions (`POST /api/incidents/{id}/decision`, through the one decision function), and the
store's part of `/readyz` (`database_readiness`).

Built by the composition root (`agent.runtime.root`, `StoreIncidents.of` over the store the
pipeline records into) and handed by the running agent to `agent.runtime.http.build_app` as its
`IncidentQueries` and `IncidentDecisions`; the pipeline itself serves no HTTP read. It maps the API's filters (the CLI's: job NS/NAME, namespace, status, verdict,
since, limit) to the store's `IncidentQuery` and returns plain JSON data (the store's
`to_jsonable`; an incident's detail adds `proposed_fix`, the latest plan or refusal recorded on
it, see `agent.model.proposal`; `/api/incidents/{id}/patch?format=` its hand-over, see
`agent.model.handover`). A bad filter value is an `InputError` (400); a database that is away is the
store's `StoreUnavailableError` (503). The only write is `decide`, which reads the clock (`now`)
and hands the request to `agent.approval.decision.decide` with the agent's authority (the
approvers in force now: a `by` who is not one is refused, 403). What it does not do: record
findings (the pipeline does) or write anything but a decision.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agent.approval.decision import Authorizer, DecisionRequest, DecisionResult, decide
from agent.model.admission import AdmissionOutcome, AdmissionQuery
from agent.model.handover import PatchFormat, document
from agent.model.incident import IncidentQuery
from agent.model.lifecycle import IncidentStatus, to_jsonable
from agent.model.proposal import proposed_fix
from agent.model.verdict import Verdict
from agent.parsing.choices import parse_choice
from agent.runtime.http import AdmissionFilter, IncidentFilter
from agent.runtime.parts import Parts
from agent.store.errors import IncidentNotFoundError
from agent.store.probe import write_blocker
from agent.store.repository import IncidentStore
from agent.store.resilience import deadline

log = logging.getLogger(__name__)


def database_readiness(store: IncidentStore | None, *, timeout: timedelta) -> dict[str, bool]:
    """`database`: a read round-trip; `database_writes`: a write transaction can start now
    (a write probe; reads alone pass while SQLite's write lock is held elsewhere). Each check
    is bounded by `timeout` (`http.database_timeout`). Without a store: `database` only, true."""
    if store is None:
        return {"database": True}
    with deadline(timeout):
        reachable = store.ping()
        blocker = (
            write_blocker(store.engine, timeout=timeout)
            if reachable
            else "the database is unreachable"
        )
    if blocker is not None:
        log.warning("not ready: the database takes no writes", extra={"reason": blocker})
    return {"database": reachable, "database_writes": blocker is None}


class StoreIncidents:
    def __init__(
        self, store: IncidentStore, *, cluster: str | None, now: Callable[[], datetime],
        authority: Authorizer,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.now = now
        self.authority = authority

    @classmethod
    def of(
        cls, store: IncidentStore, parts: Parts, *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> StoreIncidents:  # fmt: skip
        """The incidents API of an agent: its cluster, the clock, the approvers in force."""
        return cls(store, cluster=parts.settings.cluster_name, now=now, authority=parts.approvers)

    def list_incidents(self, filters: IncidentFilter) -> list[dict[str, Any]]:
        query = IncidentQuery(
            cluster=self.cluster,
            namespace=filters.job_namespace or filters.namespace,
            name=filters.job_name,
            status=parse_choice(IncidentStatus, filters.status, field="status"),
            verdict=parse_choice(Verdict, filters.verdict, field="verdict"),
            since=self.now() - filters.since if filters.since else None,
            limit=filters.limit,
            with_reverts=True,
        )
        listing = self.store.list_incidents(query)
        return [to_jsonable(i) for i in listing.incidents]

    def get_incident(self, incident_id: int) -> dict[str, Any] | None:
        try:
            detail = self.store.get_incident(incident_id)
        except IncidentNotFoundError:
            return None
        out: dict[str, Any] = to_jsonable(detail)
        fix = proposed_fix(detail.actions)
        out["proposed_fix"] = fix.to_dict() if fix is not None else None
        return out

    def list_admissions(self, filters: AdmissionFilter) -> dict[str, Any]:
        """The admission webhook's decisions (`GET /api/admissions`), and the week's summary."""
        now = self.now()
        query = AdmissionQuery(
            limit=filters.limit, since=now - filters.since if filters.since else None,
            outcome=parse_choice(AdmissionOutcome, filters.outcome, field="outcome"),
            namespace=filters.namespace,
        )  # fmt: skip
        records = self.store.list_admissions(query)
        week = self.store.admission_summary(since=now - timedelta(days=7), now=now)
        return {"admissions": [r.to_dict() for r in records],
                "week": {"placed": week.placed, "restarts_avoided": week.restarts_avoided,
                         "by_outcome": week.by_outcome}}  # fmt: skip
    def incident_patch(self, incident_id: int, fmt: str) -> dict[str, Any] | None:
        """The latest plan's hand-over in `fmt` (`agent.model.handover`), None when the incident
        does not exist or has no plan with a change."""
        chosen = parse_choice(PatchFormat, fmt, field="format")
        try:
            detail = self.store.get_incident(incident_id)
        except IncidentNotFoundError:
            return None
        fix = proposed_fix(detail.actions)
        if fix is None or not fix.handovers or chosen is None:
            return None
        return document(incident_id, fix.handovers, chosen)

    def decide(self, request: DecisionRequest) -> DecisionResult:
        return decide(self.store, request, now=self.now(), authority=self.authority)
