"""The pipeline's store writes as work that can fail: their failure and retry counts, and the open
incidents gauge refreshed after them.

Called by the pipeline (`agent.runtime.pipeline`) around each piece of work that writes to the
store (`StoreWorkLedger.run`), and after it (`IncidentGauge.refresh_quietly`). The database refusing
writes makes the work raise `UnavailableError` instead of dropping anything; the work's caller
retries it (the detector its batch, Alertmanager its alert, the scheduler its sweep).
`zonemedic_store_write_failures_total` and `zonemedic_store_write_retries_total` count it by work.

What it does not do: retry anything itself.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from enum import StrEnum

from agent.errors import UnavailableError
from agent.runtime.metrics import AgentMetrics
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)

_MAX_FAILED_WORK = 10_000


class StoreWork(StrEnum):
    """The kinds of pipeline work that write to the store (the label of the write metrics)."""

    DETECTOR = "detector"
    ALERT = "alert"
    SWEEP = "sweep"
    METRICS = "metrics"


class StoreWorkLedger:
    """Which work's writes failed last, so that running it again counts as a retry."""

    def __init__(self, metrics: AgentMetrics) -> None:
        self.metrics = metrics
        self._failed: set[tuple[StoreWork, Hashable]] = set()

    @contextmanager
    def run(self, work: StoreWork, *, key: Hashable = None) -> Iterator[None]:
        """Count work whose store writes failed (`UnavailableError`) and work run again after
        such a failure (the same kind of work, or the same alert: `key`)."""
        marker = (work, key)
        if marker in self._failed:
            self.metrics.store_write_retries.labels(work=work.value).inc()
        try:
            yield
        except UnavailableError:
            self.metrics.store_write_failures.labels(work=work.value).inc()
            if len(self._failed) >= _MAX_FAILED_WORK:
                self._failed.clear()  # only the retry count would suffer
            self._failed.add(marker)
            raise
        self._failed.discard(marker)


class IncidentGauge:
    """`zonemedic_incidents{verdict,status}`: the open incidents of this cluster."""

    def __init__(self, store: IncidentStore | None, *, cluster: str, metrics: AgentMetrics) -> None:
        self.store = store
        self.cluster = cluster
        self.metrics = metrics

    def refresh(self) -> None:
        if self.store is None:
            return
        counts = self.store.open_counts(cluster=self.cluster)
        gauge = self.metrics.incidents
        gauge.clear()
        for (verdict, status), count in counts.items():
            gauge.labels(verdict=verdict, status=status).set(count)

    def refresh_quietly(self) -> None:
        """The gauge after recorded work: a failed read here must not fail (and so repeat) the
        work that was recorded; the next refresh catches up."""
        try:
            self.refresh()
        except UnavailableError as exc:
            log.warning("incident gauge not refreshed: %s", exc)
