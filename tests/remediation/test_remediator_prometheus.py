"""End to end with a real Prometheus scraping the twin: an approved remediation takes the split job
from its degraded (35-45%) or blocked (~0%) GPU utilization to >= 80%, and the incident records
utilization before and after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.model.lifecycle import IncidentStatus, RemediationActionKind
from agent.sources.prometheus import job_utilization_expr
from tests.remediation.harness import approved_incident, migrated_template, new_store, running_lab
from tests.support.prometheus import requires_prometheus

pytestmark = [pytest.mark.prometheus, requires_prometheus]

JOB = "llm-finetune"


def job_value(result: list[dict[str, Any]]) -> float | None:
    for sample in result:
        if sample["metric"].get("created_by_name") == JOB:
            return float(sample["value"][1])
    return None


@pytest.mark.parametrize(
    ("scenario", "low", "high"), [("seed-degraded", 35.0, 45.0), ("seed-blocked", 0.0, 5.0)]
)
def test_remediation_recovers_gpu_utilization_and_records_it(
    tmp_path: Path, scenario: str, low: float, high: float
) -> None:
    with running_lab(tmp_path, scenario, prometheus=True) as lab:
        assert lab.prometheus is not None
        store, _ = new_store(migrated_template(tmp_path), tmp_path)
        try:
            result = lab.prometheus.wait_for(
                job_utilization_expr(),
                lambda r: (v := job_value(r)) is not None and low <= v <= high,
                timeout=30,
            )
            before = job_value(result)
            incident_id = approved_incident(lab, store, utilization=before)
            status = lab.remediator(store).run(incident_id)
            detail = store.get_incident(incident_id)
            assert status is IncidentStatus.RESOLVED, [dict(e.detail) for e in detail.events]
            summary = detail.incident
            assert summary.utilization_before is not None
            assert low <= summary.utilization_before <= high
            assert summary.utilization_after is not None and summary.utilization_after >= 80.0
            verify = [a for a in detail.actions if a.kind is RemediationActionKind.VERIFY]
            assert verify[-1].succeeded is True
            assert verify[-1].payload["utilization_before"] == summary.utilization_before
            assert ">= 80.0%" in (verify[-1].message or "")
        finally:
            store.close()
