"""The incident records (agent.model.incident): building a record from a diagnosis finding, its
fingerprint and severity, refusing bad findings, and naming unreadable rows."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent.model.incident import FindingRecord, RecordProblem, reading_since
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


OPENED = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
T = OPENED.timestamp()


@pytest.mark.parametrize(
    ("samples", "reading"),
    [
        # the job fixed (85%) before this incident opened, blocked (~0%) since: only the latter
        ([(T - 60, 85.0), (T - 30, 63.0), (T + 10, 2.0), (T + 20, 1.0)], 1.0),
        ([(T - 60, 85.0), (T - 1, 63.0)], None),  # nothing since it opened yet
        ([(T, 40.0)], 40.0),  # at the opening itself
        ([], None),
    ],
)
def test_reading_since_the_incident_opened(samples: list[tuple[float, float]],
                                          reading: float | None) -> None:  # fmt: skip
    assert reading_since(samples, OPENED) == reading


def test_utilization_before_comes_from_the_samples_while_open() -> None:
    record = FindingRecord(cluster="c", kind="PyTorchJob", namespace="ml", name="j", uid=None,
                           verdict=Verdict.ZONE_SPLIT_BLOCKED, detected_at=OPENED,
                           utilization_now=63.0,
                           utilization_samples=((T - 30, 63.0),))  # fmt: skip
    assert record.utilization_while_open(OPENED) is None  # the 63% is from before it opened
    without = FindingRecord(cluster="c", kind="PyTorchJob", namespace="ml", name="j", uid=None,
                            verdict=Verdict.GPU_UTILIZATION_DROP, detected_at=OPENED,
                            utilization_now=30.0)  # fmt: skip
    assert without.utilization_while_open(OPENED) == 30.0  # a reading given as is
