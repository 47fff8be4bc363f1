"""Utilization evidence: what a finding says about the job's GPU utilization, and when a reading
is worth recording.

Called by the pipeline (`agent.runtime.pipeline`) at each metrics refresh (`report` is the last
`MetricsReport`), by the recorder (`agent.runtime.recording`) for the `metrics` of every finding it
records and the samples behind them, and by the signals (`agent.runtime.signals`) for a
utilization drop or an alert. A refresh attaches evidence to open split incidents once the job's
utilization is a steady reading (`steady_reading`), with the idle GPU-hours per day estimated
again from it (`gpu_hours_again`): a split found as its pods are bound has no utilization sample
when it is recorded.

What it does not do: query Prometheus (the pipeline fetches the report) or decide verdicts.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from agent.diagnosis.waste import idle_gpu_hours_per_day
from agent.model.document import Reading, UtilizationEvidence
from agent.model.finding import SPLIT_VERDICTS
from agent.model.incident import IncidentSummary
from agent.model.job import JobRef
from agent.model.lifecycle import TOPOLOGY_CLASSES, EventKind, LifecycleError, verdict_class
from agent.runtime.open_incidents import ACTOR, OpenIncidents
from agent.sources.prometheus import UNAVAILABLE, JobMetrics, MetricsReport
from agent.store.repository import IncidentStore

READING_SAMPLES = 3  # the latest samples that must agree before a reading becomes evidence
READING_SPREAD = 5.0  # percentage points between them
NOT_CONFIGURED = "metrics not configured (prometheus.url is null)"


def metrics_evidence(report: MetricsReport | None, key: JobRef) -> UtilizationEvidence:
    """What a finding says about utilization: numbers, or why there are none."""
    if report is None:
        return UtilizationEvidence(f"{UNAVAILABLE}: not fetched yet")
    if not report.available:
        return UtilizationEvidence(report.error or UNAVAILABLE)
    found = report.for_job(key)
    if found is None:
        return UtilizationEvidence("no samples for this job yet", at=report.at)
    reading = Reading(now=found.now, baseline=found.baseline, dropped=found.drop.dropped,
                      drop_reason=found.drop.reason)  # fmt: skip
    return UtilizationEvidence.of(reading, at=report.at)


def steady_reading(metrics: JobMetrics, *, now: float, window: timedelta) -> bool:
    """Whether a job's utilization is a reading worth recording as evidence: its latest
    `READING_SAMPLES` samples agree within `READING_SPREAD` points (a split found as its pods are
    bound reads 0% while they start), or its samples cover the whole `window` (utilization that
    never settles is recorded once it has been watched that long). A job with a baseline and no
    samples is recorded at once (there is nothing to wait for)."""
    samples = metrics.samples
    if not samples:
        return True
    recent = [v for _, v in samples[-READING_SAMPLES:]]
    if len(recent) == READING_SAMPLES and max(recent) - min(recent) <= READING_SPREAD:
        return True
    return samples[0][0] <= now - window.total_seconds() * 0.9


def gpu_hours_again(
    incident: IncidentSummary, evidence: UtilizationEvidence
) -> dict[str, Any] | None:
    """The split's idle GPU-hours per day from utilization evidence (None without a figure now):
    the part of the finding's `waste` that evidence changes."""
    now, baseline = evidence.utilization_now, evidence.utilization_baseline
    if incident.verdict not in SPLIT_VERDICTS or now is None:
        return None
    hours, basis = idle_gpu_hours_per_day(
        verdict=incident.verdict, gpus=incident.gpus or 0, utilization_now=float(now),
        utilization_baseline=float(baseline) if baseline is not None else None,
    )  # fmt: skip
    return {"gpu_hours_per_day": hours, "gpu_hours_basis": basis}


class UtilizationReadings:
    """The last metrics report, and the jobs whose evidence is recorded."""

    def __init__(
        self, *, configured: bool, store: IncidentStore | None, open_incidents: OpenIncidents,
        now: Callable[[], datetime],
    ) -> None:  # fmt: skip
        self.configured = configured  # prometheus.url is set
        self.store = store
        self.open = open_incidents
        self.now = now
        self.report: MetricsReport | None = None
        self.recorded: set[JobRef] = set()  # jobs with an "ok" reading recorded

    def of(self, key: JobRef) -> UtilizationEvidence:
        """The `metrics` of a document of this job."""
        if not self.configured:
            return UtilizationEvidence(NOT_CONFIGURED)
        return metrics_evidence(self.report, key)

    def samples(self, key: JobRef) -> tuple[tuple[float, float], ...]:
        """The job's utilization samples in the last metrics report (the store reads the
        incident's "utilization before" from those taken while it is open)."""
        if self.report is None or not self.report.available:
            return ()
        found = self.report.for_job(key)
        return found.samples if found is not None else ()

    def unrecorded_steady(self, window: timedelta) -> list[JobRef]:
        """The jobs of the report with a steady reading whose evidence is not recorded yet."""
        report = self.report
        if report is None:
            return []
        return [key for key in sorted(set(report.jobs) - self.recorded)
                if steady_reading(report.jobs[key], now=report.at.timestamp(), window=window)]  # fmt: skip

    def attach(self, key: JobRef) -> None:
        """Add the report's reading (and the idle GPU-hours it gives) to the job's open topology
        incidents, as a `redetected` event of the agent's."""
        if self.store is None or self.report is None:
            return
        for incident in self.open.of(key):
            try:
                topology = verdict_class(incident.verdict) in TOPOLOGY_CLASSES
            except LifecycleError:
                continue
            if topology:
                evidence = metrics_evidence(self.report, key)
                detail: dict[str, Any] = {"metrics": evidence.to_dict()}
                waste = gpu_hours_again(incident, evidence)
                if waste is not None:
                    detail["waste"] = waste
                self.store.add_event(
                    incident.id, EventKind.REDETECTED, now=self.now(), actor=ACTOR, detail=detail
                )
                self.recorded.add(key)
