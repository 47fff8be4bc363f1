"""The incident records (agent.model.incident): building a record from a diagnosis finding, its
fingerprint and severity, refusing bad findings, and naming unreadable rows."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent.model.incident import FindingRecord, RecordProblem
from agent.model.lifecycle import LifecycleError, Severity
from agent.model.verdict import Verdict

NOW = datetime(2026, 11, 1, tzinfo=UTC)


def test_fingerprint_ignores_the_diagnosis_text() -> None:
    finding = {"job": {"kind": "PyTorchJob", "namespace": "ml", "name": "resnet", "uid": "u1"},
               "verdict": "zone_split_blocked", "reasons": ["first wording"]}
    reworded = {**finding, "reasons": ["second wording"], "zones": {"zone-a": 2}}
    a = FindingRecord.from_finding(finding, cluster="prod", detected_at=NOW)
    b = FindingRecord.from_finding(reworded, cluster="prod", detected_at=NOW)
    assert a.fingerprint == b.fingerprint


def test_record_from_a_diagnosis_finding() -> None:
    finding = {
        "job": {"kind": "PyTorchJob", "namespace": "ml", "name": "resnet", "uid": "abc"},
        "verdict": "zone_split_blocked", "zones": {"zone-a": 3, "zone-b": 1},
        "coordinator": {"pod": "resnet-master-0", "zone": "zone-b"}, "denied_flows": [],
        "remediable": True, "target_zone": "zone-a", "reasons": [],
        "impact": {"gpus_outside_target": 1},
    }
    record = FindingRecord.from_finding(finding, cluster="prod", detected_at=NOW, gpus=4,
                                        utilization_now=41.0)
    assert (record.kind, record.namespace, record.name, record.uid) == (
        "PyTorchJob", "ml", "resnet", "abc")
    assert record.verdict is Verdict.ZONE_SPLIT_BLOCKED
    assert record.target_zone == "zone-a"
    assert record.effective_severity is Severity.CRITICAL
    assert record.diagnosis == finding


@pytest.mark.parametrize(
    ("finding", "message"),
    [
        ({"verdict": "healthy"}, "no 'job'"),
        ({"job": {"name": "x"}, "verdict": "exploded"}, "unknown verdict 'exploded'"),
    ],
)
def test_bad_findings(finding: dict[str, object], message: str) -> None:
    with pytest.raises(LifecycleError, match=message):
        FindingRecord.from_finding(finding, cluster="c", detected_at=NOW)


def test_record_problem_names_the_incident() -> None:
    problem = RecordProblem(7, "unknown status value 'x'")
    assert str(problem) == "incident 7: unknown status value 'x'"
