"""The incidents that no diagnosis finds: a utilization drop, an Alertmanager alert.

Called by the pipeline (`agent.runtime.pipeline`): `drop` for each job of a metrics refresh,
`alert` for each job an alert names. A utilization drop and a firing alert open incidents of their
own (the job may be slow for reasons zonemedic cannot see), recorded through the recorder
(`agent.runtime.recording`) with the job's utilization evidence; a new one fires the matching
playbooks (`agent.runtime.playbooks`). A recovered utilization resolves the job's drop incidents,
a resolved alert its alert incidents.

What it does not do: fetch metrics or parse alerts (`agent.sources`), or diagnose.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from agent.model.document import AlertFacts, IncidentDocument
from agent.model.job import JobRef
from agent.model.lifecycle import VerdictClass
from agent.playbook.matching import Event
from agent.playbook.model import TriggerKind
from agent.runtime.evidence import UtilizationReadings, metrics_evidence
from agent.runtime.open_incidents import OpenIncidents
from agent.runtime.playbooks import PlaybookActions
from agent.runtime.recording import Recorder
from agent.sources.alertmanager import Alert, AlertStatus
from agent.sources.cache import ClusterCache
from agent.sources.prometheus import JobMetrics, MetricsReport


class Signals:
    """Records utilization drops and alerts as incidents."""

    def __init__(
        self, *, recorder: Recorder, open_incidents: OpenIncidents, evidence: UtilizationReadings,
        actions: PlaybookActions, cache: ClusterCache, now: Callable[[], datetime],
    ) -> None:  # fmt: skip
        self.recorder = recorder
        self.open = open_incidents
        self.evidence = evidence
        self.actions = actions
        self.cache = cache
        self.now = now

    def drop(self, key: JobRef, metrics: JobMetrics, report: MetricsReport) -> None:
        """A job's utilization in a refresh: a drop opens (or re-detects) its drop incident; a
        recovery resolves it."""
        if not metrics.drop.dropped:
            self.open.resolve(key, {VerdictClass.GPU_UTILIZATION_DROP}, reason="utilization recovered")
            return
        document = IncidentDocument.of_drop(key, uid=self.cache.job_uid(key),
                                            metrics=metrics_evidence(report, key))  # fmt: skip
        outcome = self.recorder.record_document(document, detected_at=report.at)
        if outcome is not None and outcome.new:
            self.actions.fire(
                Event(TriggerKind.GPU_UTILIZATION_DROP,
                      self.actions.subject(key, "gpu_utilization_drop")),
                outcome.incident,
                document,
            )  # fmt: skip

    def alert(self, alert: Alert, jobs: list[JobRef]) -> None:
        """An alert for its jobs: recorded (a firing), or their alert incidents resolved."""
        now = self.now()
        for key in jobs:
            if alert.status is AlertStatus.RESOLVED:
                self.open.resolve(key, {VerdictClass.ALERT}, reason=f"alert {alert.name} resolved")
                continue
            facts = AlertFacts(alert.name, labels=dict(alert.labels),
                               annotations=dict(alert.annotations), starts_at=alert.starts_at,
                               fingerprint=alert.fingerprint)  # fmt: skip
            diagnosis = IncidentDocument.of_alert(key, facts, metrics=self.evidence.of(key))
            outcome = self.recorder.record_document(diagnosis, detected_at=now)
            if outcome is not None and outcome.new:
                self.actions.fire(
                    Event(TriggerKind.ALERT, self.actions.subject(key, "alert"), alert.labels),
                    outcome.incident,
                    diagnosis,
                )
