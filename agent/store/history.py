"""The incident store's history reads: listings, one incident, open counts, stats, and what a
(re)starting agent must resume (the SQL is `agent.store.queries`'s; this runs each on the read
engine).

A base of `agent.store.repository.IncidentStore`; called through it by the HTTP API, the CLI, the
agent's gauges and its start-up.

What it does not do: write anything, or read a clock.
"""

from __future__ import annotations

from datetime import datetime

from agent.model.incident import (
    MAX_INCIDENT_ID,
    IncidentDetail,
    IncidentListing,
    IncidentQuery,
    IncidentStats,
    IncidentSummary,
)
from agent.model.lifecycle import ResumeAction
from agent.store import queries
from agent.store.errors import IncidentNotFoundError
from agent.store.transactions import StoreTransactions


class HistoryReads(StoreTransactions):
    """The read-only half of the store's surface."""

    def list_incidents(self, query: IncidentQuery | None = None) -> IncidentListing:
        """Incidents matching `query`, newest first. Rows that cannot be read are reported in
        `problems` (naming the incident) instead of failing the listing."""
        chosen = query or IncidentQuery()
        return self._read("list incidents", lambda conn: queries.list_incidents(conn, chosen))

    def open_counts(self, *, cluster: str) -> dict[tuple[str, str], int]:
        """Open incidents of `cluster` counted by (verdict, status): one grouped query, for the
        agent's `zonemedic_incidents` gauge (no rows are materialized)."""
        return self._read("count open incidents",
                          lambda conn: queries.open_counts(conn, cluster=cluster))

    def get_incident(self, incident_id: int) -> IncidentDetail:
        """One incident with its timeline, decisions, actions and messages."""
        if not 1 <= incident_id <= MAX_INCIDENT_ID:  # no such row; PostgreSQL would overflow
            raise IncidentNotFoundError(incident_id)
        return self._read(f"read incident {incident_id}",
                          lambda conn: queries.get_incident(conn, incident_id))

    def stats(self, *, since: datetime, now: datetime) -> IncidentStats:
        """Counts by verdict and outcome, mean times to detect/decide/resolve and GPU-hours
        recovered, over incidents opened in [since, now] (see `agent.store.queries.stats`)."""
        return self._read("compute incident stats",
                          lambda conn: queries.stats(conn, since=since, now=now))

    def incidents_to_resume(self) -> list[tuple[IncidentSummary, ResumeAction]]:
        """Every open incident with what a (re)starting agent must do for it (see
        `agent.model.lifecycle.resume_action`). Unreadable rows are skipped here and reported
        by `list_incidents`."""
        return self._read("list incidents to resume", queries.incidents_to_resume)
