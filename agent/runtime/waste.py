"""A split finding's waste per day, with its egress measured where the meter can, and the split
jobs' egress gauges.

Called by the recorder (`agent.runtime.recording`): `estimate` for the `waste` of a split
finding it records (`agent.diagnosis.waste`: idle GPU-hours, cross-zone egress dollars), `show`
once it is recorded, `forget` when the job is no longer split; and by the pipeline at each metrics
refresh (`refresh`: the egress meter's one query, `agent.sources.egress`). The egress is measured
where the meter's last answer attributes cross-zone flows to the job's pods
(`agent.diagnosis.egress`), else estimated, labelled as such. A refresh that starts (or stops)
measuring a split job returns it, to be diagnosed and recorded again at once; a recorded figure
that moved (another basis, or beyond `EGRESS_MOVE_SHARE`) adds a `redetected` event of its own to
the timeline (`detail.egress`), so its chat message is re-rendered.

What it does not do: record findings or query Prometheus for utilization.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from agent.diagnosis.egress import EgressIndex, job_ends
from agent.diagnosis.waste import estimate_waste
from agent.model.document import UtilizationEvidence
from agent.model.egress import MeasuredEgress
from agent.model.finding import Finding
from agent.model.job import Job, JobRef
from agent.model.lifecycle import EventKind
from agent.model.waste import EgressBasis, Waste
from agent.runtime.evidence import NOT_CONFIGURED
from agent.runtime.metrics import AgentMetrics
from agent.runtime.open_incidents import ACTOR
from agent.settings import DiagnosisSettings
from agent.sources.egress import EgressMeter
from agent.sources.prometheus import UNAVAILABLE
from agent.store.repository import IncidentStore

# a split job's egress figure is recorded again when the measurement moves this much (or its
# basis changes): the finding, its chat message and the dashboard follow the measurement
EGRESS_MOVE_SHARE = 0.2
EGRESS_MOVE_USD = 0.01


def egress_moved(
    before: tuple[EgressBasis, float | None], after: tuple[EgressBasis, float | None]
) -> bool:
    """A split job's egress figure changed enough to record again: another basis, a figure
    appearing or vanishing, or a move beyond `EGRESS_MOVE_SHARE` of it (and `EGRESS_MOVE_USD`)."""
    if before[0] is not after[0] or (before[1] is None) != (after[1] is None):
        return True
    if before[1] is None or after[1] is None:
        return False
    return abs(after[1] - before[1]) > max(EGRESS_MOVE_USD, EGRESS_MOVE_SHARE * abs(before[1]))


class SplitWaste:
    """The egress meter's last answer, and the egress figure each split job last showed."""

    def __init__(
        self, *, meter: EgressMeter | None, configured: bool, metrics: AgentMetrics,
        store: IncidentStore | None, settings: DiagnosisSettings,
        job: Callable[[JobRef], Job | None], now: Callable[[], datetime],
    ) -> None:  # fmt: skip
        self.meter = meter
        self.configured = configured  # prometheus.url is set
        self.metrics = metrics
        self.store = store
        self.settings = settings
        self.job = job  # the job in the last diagnosis
        self.now = now
        self.index: EgressIndex | None = None  # the last answer of the egress meter
        self.shown: dict[JobRef, tuple[EgressBasis, float | None]] = {}  # as recorded

    def estimate(self, finding: Finding, metrics: UtilizationEvidence) -> Waste:
        """The split finding's waste per day, from its utilization evidence `metrics`."""
        now, baseline = metrics.utilization_now, metrics.utilization_baseline
        settings = self.settings
        measured, unmeasured = self.measured(finding.job)
        return estimate_waste(
            verdict=finding.verdict, impact=finding.impact,
            utilization_now=float(now) if now is not None else None,
            utilization_baseline=float(baseline) if baseline is not None else None,
            steps_per_day=settings.steps_per_day, price_per_gb=settings.price_per_gb,
            measured=measured, unmeasured=unmeasured,
        )  # fmt: skip

    def measured(self, ref: JobRef) -> tuple[MeasuredEgress | None, str | None]:
        """The job's measured cross-zone bytes, or why there is no measurement."""
        if not self.configured:
            return None, NOT_CONFIGURED
        if self.meter is None:
            return None, "egress.source is none"
        if self.index is None:
            return None, "not measured yet (the first egress query is pending)"
        report = self.index.report
        if not report.available:
            return None, report.error or UNAVAILABLE
        if not report.measured:
            if self.meter.settings.query is not None:
                return None, "egress.query answered no series"
            return None, ("no cross-zone byte counter in Prometheus (Beyla's or OBI's "
                          "*_network_inter_zone_bytes_total, or *_network_flow_bytes_total "
                          "with src_zone)")  # fmt: skip
        job = self.job(ref)
        if job is None:
            return None, "the job's pods are not known"
        found = self.index.job(job_ends(ref.namespace, job.pods))
        if found is None:
            by = ", ".join(sorted(e.label for e in report.exporters))
            return None, f"no cross-zone flow between the job's pods measured (by {by})"
        return found, None

    def fetch(self) -> EgressIndex | None:
        """The egress meter's one query for all jobs (None: no meter, or nothing answered).
        Call it outside the pipeline's lock; `take` it under the lock."""
        if self.meter is None:
            return None
        report = self.meter.fetch(self.now())
        return EgressIndex(report) if report is not None else None

    def take(self, index: EgressIndex) -> frozenset[JobRef]:
        """Use the meter's new answer; the split jobs it starts (or stops) measuring, to be
        diagnosed and recorded again at once, so their findings say so. A measured figure that
        moves is recorded with the job's next diagnosis (`detection.resync` at the latest): a
        rate over a window longer than the job's traffic grows until the window is full, and
        each refresh must not re-record it."""
        self.index = index
        return frozenset(key for key, shown in sorted(self.shown.items())
                         if self._measured_now(key) != (shown[0] is EgressBasis.MEASURED))  # fmt: skip

    def _measured_now(self, key: JobRef) -> bool:
        return self.measured(key)[0] is not None

    def show(self, key: JobRef, waste: Waste, *, incident: int, new: bool) -> None:
        """Set the job's gauges, and add a timeline event when the figure moved from the one last
        shown (a change of basis, or beyond `EGRESS_MOVE_SHARE`): a `redetected` event of the
        agent's own (never folded into the detector's), after which its chat message is
        re-rendered; that figure is then the one shown."""
        source = waste.egress_source
        usd = float(waste.egress_usd_per_day) if waste.egress_usd_per_day is not None else None
        before = self.shown.get(key)
        moved = before is not None and not new and egress_moved(before, (source, usd))
        self._gauges(key, source, usd, waste.cross_zone_gb_per_day, before)
        if before is None or new or moved:  # else small moves add up against the last shown
            self.shown[key] = (source, usd)
        if moved:
            assert self.store is not None
            self.store.add_event(incident, EventKind.REDETECTED, now=self.now(), actor=ACTOR,
                                 detail={"egress": {
                                     "source": source.value, "usd_per_day": usd,
                                     "gb_per_day": waste.cross_zone_gb_per_day,
                                     "basis": waste.egress_basis,
                                 }})  # fmt: skip

    def _gauges(
        self, key: JobRef, source: EgressBasis, usd: float | None, gb: float | None,
        before: tuple[EgressBasis, float | None] | None,
    ) -> None:  # fmt: skip
        labels = {"namespace": key.namespace, "kind": key.kind, "job": key.name}
        metrics = self.metrics
        if before is not None and (before[0] is not source or usd is None or
                                   source is EgressBasis.UNKNOWN):  # fmt: skip
            for gauge in (metrics.job_cross_zone_bytes, metrics.job_egress_cost):
                gauge.remove(key.namespace, key.kind, key.name, before[0].value)
        if usd is None or source is EgressBasis.UNKNOWN:
            return
        metrics.job_egress_cost.labels(**labels, source=source.value).set(usd)
        per_second = float(gb) * 1e9 / 86_400 if gb is not None else 0.0
        metrics.job_cross_zone_bytes.labels(**labels, source=source.value).set(per_second)

    def forget(self, key: JobRef) -> None:
        """The job is no longer split (or gone): its gauges go."""
        before = self.shown.pop(key, None)
        if before is not None:
            for gauge in (self.metrics.job_cross_zone_bytes, self.metrics.job_egress_cost):
                gauge.remove(key.namespace, key.kind, key.name, before[0].value)
