"""The incident document: what the agent knows about one problem of one job, built once.

Built by the pipeline (`agent.runtime.recording` for a diagnosis's finding, `agent.runtime.signals`
for a utilization drop or an Alertmanager alert) and passed down as this one type: to the store's
record path (`agent.model.incident.FindingRecord.of`: the store persists `to_dict()` as the
incident's `diagnosis` column), to the playbooks' actions (`agent.runtime.playbooks`: the outbox
payload's `finding`, with the plan preview as `proposed_fix`), and to the approval step. It holds
the finding (the diagnosis of `agent.diagnosis.diagnose`, None for a drop or an alert), the job's
uid as the watch cache knows it, the utilization evidence (`UtilizationEvidence`), a split's
waste per day (`agent.model.waste.Waste`), an alert's facts (`AlertFacts`) and the proposed fix.

`to_dict()` is the JSON the database, the HTTP API (`GET /api/incidents/{id}`: `diagnosis`), the
CLI (`incidents show`), Slack's messages and the executor read: the keys are the finding's
(`Finding.to_dict()`) with `job.uid`, then `metrics`, `waste` (splits only) and `proposed_fix`
(outbox payloads only); an alert's document has `job` (without `uid`), `verdict`, `alert`,
`metrics`. What it does not do: compute anything (evidence, waste and verdicts are computed where
they are built), read the clock, or parse stored JSON back (its readers read the stored JSON as
`agent.model.stored.StoredDiagnosis`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from agent.model.finding import Finding
from agent.model.job import JobRef
from agent.model.verdict import Verdict
from agent.model.waste import Waste

STATUS_OK = "ok"


@dataclass(frozen=True)
class Reading:
    """A job's utilization in one metrics report: now, its pre-drop baseline, and the drop."""

    now: float | None
    baseline: float | None
    dropped: bool
    drop_reason: str | None


@dataclass(frozen=True)
class UtilizationEvidence:
    """What a document says about utilization: a reading (`status` "ok"), or why there is none
    (`status` says why; `at`, the report's time, when the report answered)."""

    status: str
    at: datetime | None = None
    reading: Reading | None = None

    @classmethod
    def of(cls, reading: Reading, *, at: datetime) -> UtilizationEvidence:
        return cls(STATUS_OK, at=at, reading=reading)

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK

    @property
    def utilization_now(self) -> float | None:
        return self.reading.now if self.reading is not None else None

    @property
    def utilization_baseline(self) -> float | None:
        return self.reading.baseline if self.reading is not None else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.at is not None:
            out["at"] = self.at.isoformat()
        if self.reading is not None:
            out.update(utilization_now=self.reading.now,
                       utilization_baseline=self.reading.baseline,
                       dropped=self.reading.dropped, drop_reason=self.reading.drop_reason)  # fmt: skip
        return out


@dataclass(frozen=True)
class AlertFacts:
    """What an incident opened by an Alertmanager alert keeps of it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    starts_at: str = ""
    fingerprint: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "labels": dict(self.labels),
                "annotations": dict(self.annotations), "starts_at": self.starts_at,
                "fingerprint": self.fingerprint}  # fmt: skip


@dataclass(frozen=True)
class IncidentDocument:
    """One problem of one job, as the pipeline records it (see the module docstring)."""

    job: JobRef
    verdict: Verdict
    metrics: UtilizationEvidence
    uid: str | None = None
    finding: Finding | None = None  # the diagnosis (None: a utilization drop, an alert)
    waste: Waste | None = None  # a split's waste per day
    alert: AlertFacts | None = None
    proposed_fix: Mapping[str, Any] | None = None  # the plan preview (outbox payloads)

    @classmethod
    def of_finding(
        cls, finding: Finding, *, uid: str | None, metrics: UtilizationEvidence,
        waste: Waste | None = None,
    ) -> IncidentDocument:  # fmt: skip
        return cls(finding.job, finding.verdict, metrics, uid=uid, finding=finding, waste=waste)

    @classmethod
    def of_drop(
        cls, job: JobRef, *, uid: str | None, metrics: UtilizationEvidence
    ) -> IncidentDocument:
        return cls(job, Verdict.GPU_UTILIZATION_DROP, metrics, uid=uid)

    @classmethod
    def of_alert(
        cls, job: JobRef, alert: AlertFacts, *, metrics: UtilizationEvidence
    ) -> IncidentDocument:
        return cls(job, Verdict.ALERT, metrics, alert=alert)

    def with_fix(self, proposed_fix: Mapping[str, Any]) -> IncidentDocument:
        """The document with the plan preview a playbook's message carries."""
        return replace(self, proposed_fix=proposed_fix)

    @property
    def target_zone(self) -> str | None:
        return (self.finding.target_zone or None) if self.finding is not None else None

    @property
    def estimated_cost(self) -> float | None:
        """The egress dollars per day of a split (the incident's `estimated_cost`)."""
        usd = self.waste.egress_usd_per_day if self.waste is not None else None
        return float(usd) if usd is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The document as JSON (the keys of the module docstring)."""
        if self.finding is not None:
            out = self.finding.to_dict()
            out["job"]["uid"] = self.uid
        else:
            job: dict[str, Any] = {"kind": self.job.kind.value, "namespace": self.job.namespace,
                                   "name": self.job.name}  # fmt: skip
            if self.alert is None:
                job["uid"] = self.uid
            out = {"job": job, "verdict": self.verdict.value}
            if self.alert is not None:
                out["alert"] = self.alert.to_dict()
        out["metrics"] = self.metrics.to_dict()
        if self.waste is not None:
            out["waste"] = self.waste.to_dict()
        if self.proposed_fix is not None:
            out["proposed_fix"] = dict(self.proposed_fix)
        return out
