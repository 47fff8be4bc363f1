"""Admission decisions as data: what the webhook did with one job being created, as recorded.

Who uses it: `agent.admission.decision` (the `AdmissionOutcome` of a decision), the webhook, which
records an `AdmissionRecord` for every request that is not a dry run, the store
(`agent.store.admissions`: the `admission_decisions` table, and the group decisions kept in
`admission_groups`), the `zonemedic admissions` command, `GET /api/admissions` and the digest
(`AdmissionSummary`). Plain data: it decides and stores nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class AdmissionOutcome(StrEnum):
    """What the webhook did (`zonemedic_admission_decisions_total{outcome}`)."""

    PLACED = "placed"  # the patch was returned: the job starts in one zone
    WARNED = "warned"  # admission.mode warn: it would have been placed; no patch
    CONSTRAINED = "constrained"  # the job is already kept in one zone
    NOT_NEEDED = "not_needed"  # nothing to co-locate: one pod, or one zone
    NO_ZONE = "no_zone"  # no zone has room for the gang with every flow allowed
    DEFERRED = "deferred"  # a TrainJob: placed when its JobSet is created
    SKIPPED = "skipped"  # not placed on purpose (protected namespace, unreadable, cache not synced)


PLACING = frozenset({AdmissionOutcome.PLACED, AdmissionOutcome.WARNED})
MAX_WARNING = 1000  # characters of a recorded warning


@dataclass(frozen=True)
class AdmissionRecord:
    """One recorded decision: the request, the job (kind, namespace, name: a generic group's
    name for its objects), the object created, the outcome, the zone, whether it went through
    Kueue's annotations or followed the group's kept decision, the mode, the warning."""

    cluster: str
    request_uid: str
    decided_at: datetime
    job_kind: str
    job_namespace: str
    job_name: str
    object_kind: str
    object_name: str
    outcome: AdmissionOutcome
    zone: str | None
    mode: str
    warning: str
    kueue: bool = False
    kept: bool = False
    id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "cluster": self.cluster, "request_uid": self.request_uid,
            "decided_at": self.decided_at.isoformat(),
            "job": {"kind": self.job_kind, "namespace": self.job_namespace, "name": self.job_name},
            "object": {"kind": self.object_kind, "name": self.object_name},
            "outcome": self.outcome.value, "zone": self.zone, "mode": self.mode,
            "kueue": self.kueue, "kept": self.kept, "warning": self.warning,
        }  # fmt: skip


@dataclass(frozen=True)
class AdmissionQuery:
    """Which recorded decisions to list: newest first, at most `limit`, since `since`, of one
    outcome and namespace when given."""

    limit: int = 50
    since: datetime | None = None
    outcome: AdmissionOutcome | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class AdmissionSummary:
    """The digest's line: jobs placed at admission in a window, and of them those no incident
    was opened for afterwards (restarts avoided: the fix would have restarted each)."""

    placed: int
    restarts_avoided: int
    by_outcome: dict[str, int]

    def line(self, window: str = "this week") -> str:
        return (f"{self.placed} job(s) placed at admission {window}, "
                f"{self.restarts_avoided} restart(s) avoided")  # fmt: skip
