"""The typed incident document: its JSON has the keys the store, the API, the CLI and Slack read
(the same keys the pipeline's dict had), and the store's record is read off it, not parsed back."""

from __future__ import annotations

from datetime import UTC, datetime

from agent.model.document import (
    AlertFacts,
    IncidentDocument,
    Reading,
    UtilizationEvidence,
)
from agent.model.finding import Coordinator, Finding
from agent.model.incident import FindingRecord
from agent.model.job import JobRef
from agent.model.verdict import Verdict
from agent.model.waste import EgressBasis, Waste
from agent.model.workload import JobKind

AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
JOB = JobRef(JobKind.PYTORCH, "train", "gpt")
SPLIT = Finding(JOB, Verdict.ZONE_SPLIT_DEGRADED, {"zone-a": 3, "zone-b": 1},
                Coordinator("gpt-master-0", "zone-b"), remediable=True, target_zone="zone-a")
READING = UtilizationEvidence.of(Reading(now=30.0, baseline=90.0, dropped=True,
                                         drop_reason="below 70%"), at=AT)
WASTE = Waste(gpu_hours_per_day=57.6, gpu_hours_basis="4 GPU(s)", egress_usd_per_day=1.25,
              egress_basis="estimated", egress_source=EgressBasis.ESTIMATED)


def test_a_findings_document_is_the_finding_with_its_uid_evidence_and_waste() -> None:
    document = IncidentDocument.of_finding(SPLIT, uid="u-1", metrics=READING, waste=WASTE)
    expected = SPLIT.to_dict()
    expected["job"]["uid"] = "u-1"
    expected["metrics"] = {"status": "ok", "at": AT.isoformat(), "utilization_now": 30.0,
                           "utilization_baseline": 90.0, "dropped": True,
                           "drop_reason": "below 70%"}
    expected["waste"] = WASTE.to_dict()
    assert document.to_dict() == expected
    assert list(document.to_dict()) == list(expected)  # the same keys in the same order
    fixed = document.with_fix({"refusal": "no room"}).to_dict()
    assert list(fixed)[-1] == "proposed_fix" and fixed["proposed_fix"] == {"refusal": "no room"}


def test_a_drops_and_an_alerts_documents() -> None:
    why = UtilizationEvidence("no samples for this job yet", at=AT)
    assert IncidentDocument.of_drop(JOB, uid=None, metrics=why).to_dict() == {
        "job": {"kind": "PyTorchJob", "namespace": "train", "name": "gpt", "uid": None},
        "verdict": "gpu_utilization_drop",
        "metrics": {"status": "no samples for this job yet", "at": AT.isoformat()},
    }
    alert = AlertFacts("GPUDrop", labels={"severity": "warning"}, starts_at="t1", fingerprint="f")
    document = IncidentDocument.of_alert(JOB, alert, metrics=UtilizationEvidence("not configured"))
    assert document.to_dict() == {  # an alert's job has no uid (as it always had)
        "job": {"kind": "PyTorchJob", "namespace": "train", "name": "gpt"},
        "verdict": "alert",
        "alert": {"name": "GPUDrop", "labels": {"severity": "warning"}, "annotations": {},
                  "starts_at": "t1", "fingerprint": "f"},
        "metrics": {"status": "not configured"},
    }


def test_the_stores_record_is_read_off_the_document_as_from_its_json() -> None:
    document = IncidentDocument.of_finding(SPLIT, uid="u-1", metrics=READING, waste=WASTE)
    typed = FindingRecord.of(document, cluster="prod", detected_at=AT, gpus=4)
    parsed = FindingRecord.from_finding(
        document.to_dict(), cluster="prod", detected_at=AT, gpus=4, utilization_now=30.0,
        utilization_baseline=90.0, estimated_cost=1.25)
    assert typed.persisted_diagnosis() == parsed.persisted_diagnosis() == document.to_dict()
    assert (typed.kind, typed.uid, typed.verdict, typed.target_zone, typed.estimated_cost,
            typed.utilization_now, typed.fingerprint) == (
        parsed.kind, parsed.uid, parsed.verdict, parsed.target_zone, parsed.estimated_cost,
        parsed.utilization_now, parsed.fingerprint)
    assert typed.document is document
