"""A job's open incidents as the pipeline reads them, and their closing (resolved, superseded).

Called by the pipeline's pieces (`agent.runtime.pipeline`, `recording`, `evidence`, `drops`,
`signals`): `of(key)` for the job's open incidents, `resolve` to close those of some verdict
classes that have not started remediation. A cluster-wide batch (and a sweep) reads the cluster's
open incidents once (`batch`, not once per job: a job found healthy with none open costs no
query); while that read is held, `of` answers from it (writes by then are conditional on the
status read, so a stale entry changes nothing) and `recording_order` puts the problems that open
a new incident first, then re-detections, then the healthy jobs.

What it does not do: record findings (`agent.runtime.recording`) or decide approvals.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from enum import IntEnum

from agent.model.finding import Finding
from agent.model.incident import IncidentQuery, IncidentSummary
from agent.model.job import JobRef
from agent.model.lifecycle import (
    IncidentStatus,
    LifecycleError,
    VerdictClass,
    check_transition,
    verdict_class,
)
from agent.store.repository import IncidentStore

ACTOR = "zonemedic"  # the timeline actor of what the pipeline writes
# what a re-diagnosis (healthy) or the job's going closes: the incidents nothing is being done to
_RESOLVABLE = (IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL, IncidentStatus.SNOOZED,
               IncidentStatus.REFUSED)
LISTING_LIMIT = 10_000  # open incidents read in one listing


class Order(IntEnum):
    """Where a finding goes in a cluster-wide batch's recording."""

    NEW = 0  # a problem of a job with no open incident (a new incident)
    AGAIN = 1  # a re-detection
    NO_INCIDENT = 2  # healthy or pending (a resolve at most)


class OpenIncidents:
    """The open incidents of one cluster in the store, by job."""

    def __init__(
        self, store: IncidentStore | None, *, cluster: str, now: Callable[[], datetime]
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.now = now
        # a cluster-wide batch's one read of the open incidents, by job (None: query per job)
        self.held: dict[JobRef, list[IncidentSummary]] | None = None

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Hold one read of the cluster's open incidents while a cluster-wide batch records."""
        self.held = self._by_job()
        try:
            yield
        finally:
            self.held = None

    def _by_job(self) -> dict[JobRef, list[IncidentSummary]] | None:
        """The cluster's open incidents by job, in one query; None when there are too many for
        one listing (the batch then asks per job)."""
        if self.store is None:
            return None
        listing = self.store.list_incidents(
            IncidentQuery(cluster=self.cluster, open_only=True, limit=LISTING_LIMIT)
        )
        if len(listing.incidents) + len(listing.problems) >= LISTING_LIMIT:
            return None
        out: dict[JobRef, list[IncidentSummary]] = {}
        for incident in listing.incidents:
            ref = incident.job_ref
            if ref is not None:
                out.setdefault(ref, []).append(incident)
        return out

    def recording_order(self, finding: Finding) -> Order:
        """`Order.NEW`, `Order.AGAIN` or `Order.NO_INCIDENT` (healthy or pending)."""
        try:
            verdict_class(finding.verdict)
        except LifecycleError:  # healthy, pending
            return Order.NO_INCIDENT
        return Order.AGAIN if (self.held or {}).get(finding.job) else Order.NEW

    def of(self, key: JobRef) -> list[IncidentSummary]:
        """The job's open incidents: from the held read while a batch records, else one query."""
        if self.store is None:
            return []
        if self.held is not None:
            return list(self.held.get(key, ()))
        listing = self.store.list_incidents(
            IncidentQuery(
                cluster=self.cluster,
                namespace=key.namespace,
                name=key.name,
                open_only=True,
                limit=50,
            )
        )
        return [i for i in listing.incidents if i.kind == key.kind]

    def forget(self, key: JobRef, incident_id: int) -> None:
        """Drop a closed incident from the held read (a batch goes on recording the job)."""
        if self.held is not None and key in self.held:
            self.held[key] = [i for i in self.held[key] if i.id != incident_id]

    def gone(self, present: set[JobRef]) -> list[JobRef]:
        """The jobs with open incidents that are not among `present` (the jobs found), sorted."""
        if self.store is None:
            return []
        listing = self.store.list_incidents(
            IncidentQuery(cluster=self.cluster, open_only=True, limit=LISTING_LIMIT)
        )
        return sorted(
            {ref for i in listing.incidents if (ref := i.job_ref) is not None and ref not in present}
        )

    def resolve(
        self,
        key: JobRef,
        classes: set[VerdictClass],
        *,
        reason: str,
        to: IncidentStatus = IncidentStatus.RESOLVED,
    ) -> int:
        """Close the job's open incidents of these classes that no remediation is under way on
        (undecided, or `refused`)."""
        closed = 0
        for incident in self.of(key):
            try:
                if verdict_class(incident.verdict) not in classes:
                    continue
                check_transition(incident.status, to)
            except LifecycleError:
                continue
            if incident.status not in _RESOLVABLE:
                continue
            result = self.store.transition(  # type: ignore[union-attr]
                incident.id, incident.status, to, actor=ACTOR, now=self.now(),
                detail={"reason": reason},
            )  # fmt: skip
            closed += 1 if result.applied else 0
        return closed
