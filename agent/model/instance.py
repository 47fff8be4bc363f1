"""Which instance of a job an incident is about: a job object may be bound to an incident whose
job uid is not known yet (the job's object reached the agent after its pods) only when it was
created no later than the incident's first evidence; a job created after that is another job of
the same name (deleted and recreated), never the one the incident found.

Who calls it: the recording of a re-detection (`agent.store.findings`: the uid filled in once the
job object is known), and the remediation's re-check (`agent.remediation.recheck`: the live job
bound, or the incident superseded). Pure: objects and times in, answers out; it reads and writes
nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


def creation_time(obj: Mapping[str, Any] | None) -> datetime | None:
    """The object's `metadata.creationTimestamp` (RFC 3339, UTC), or None when it has none or
    it cannot be read."""
    if obj is None:
        return None
    raw = (obj.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(raw, str) or not raw:
        return None
    try:
        found = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return found if found.tzinfo is not None else found.replace(tzinfo=UTC)


def first_evidence(opened_at: datetime, onset_at: datetime | None) -> datetime:
    """The incident's first evidence: when it opened, or the problem's onset when earlier."""
    return min(opened_at, onset_at) if onset_at is not None else opened_at


def binds(created: datetime | None, evidence: datetime) -> bool:
    """A job created at `created` may be the one an incident first evidenced at `evidence`
    found: created no later than that (the API server's creation time has whole seconds). An
    unknown creation time never binds."""
    return created is not None and created <= evidence
