"""Small builders shared by the store and command tests (findings with sensible defaults)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from agent.model.incident import FindingRecord, Verdict

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def finding(
    name: str = "resnet",
    *,
    namespace: str = "ml",
    verdict: Verdict = Verdict.ZONE_SPLIT_BLOCKED,
    at: datetime = T0,
    cluster: str = "prod",
    uid: str | None = None,
    **extra: Any,
) -> FindingRecord:
    diagnosis = {
        "job": {"kind": "PyTorchJob", "namespace": namespace, "name": name},
        "verdict": verdict.value,
        "zones": {"zone-a": 3, "zone-b": 1},
        "target_zone": "zone-a",
        "remediable": True,
    }
    return FindingRecord(
        cluster=cluster,
        kind="PyTorchJob",
        namespace=namespace,
        name=name,
        uid=uid if uid is not None else f"uid-{namespace}-{name}",
        verdict=verdict,
        detected_at=at,
        diagnosis=diagnosis,
        target_zone="zone-a",
        **extra,
    )


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


# The migration revisions, oldest first (one line, one head).
CHAIN = ["0001", "0002_approval_deadline", "0003_outbox_claims", "0004_one_open_incident_per_job",
         "0005_admission_decisions"]
HEAD = CHAIN[-1]
