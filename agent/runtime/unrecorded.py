"""The splits a follower diagnosed that may never have been recorded, and their recording at a
new term.

Called by the pipeline (`agent.runtime.pipeline`): a follower's (not cluster-wide) detector batch
is diagnosed, as the leader's would be, and its findings noted here (`FollowedProblems.note`);
the first cluster-wide batch of a new term, after its catch-up diagnosis is recorded, records
what the leader may have missed (`record_missed`).

Why: when no replica records for a while (the leader stuck in the store's retries, then paused,
until its lease expires), the new leader's catch-up diagnoses only the current state, so a job
that was split during that window and deleted (or healed) before the hand-over would get no
incident (guarantee 4). A follower keeps, by job, the latest split it saw (at most
`MAX_FOLLOWED_PROBLEMS`, the oldest forgotten first); a job seen healthy again is kept, marked
healed (its split was real, and may not have been recorded either). On taking over, each kept
split whose job is no longer split, has no open incident, and of which the store holds no
zone-split incident open at or after the split was first seen is recorded as an incident (only the incident and its detection:
no playbook fires, no approval is asked for a job that is gone) and closed at once as
`superseded`, with the reason (the job deleted, or no longer split, before it was recorded). A
kept split whose job is split now is the catch-up's to record, and is forgotten.

What it does not do: diagnose (the pipeline does), decide, or post anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from agent.model.document import IncidentDocument
from agent.model.finding import SPLIT_VERDICTS, Finding
from agent.model.incident import FindingRecord, IncidentQuery
from agent.model.job import JobRef
from agent.model.lifecycle import IncidentStatus, LifecycleError, VerdictClass, verdict_class
from agent.model.verdict import Verdict
from agent.runtime.evidence import UtilizationReadings
from agent.runtime.open_incidents import ACTOR
from agent.sources.cache import ClusterCache
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)

MAX_FOLLOWED_PROBLEMS = 500  # splits a follower keeps until it leads (the latest, by job)


class MissedReason(StrEnum):
    """Why a split a follower saw is closed as soon as it is recorded."""

    DELETED = "the job was deleted before its split was recorded (seen by a follower while no replica recorded)"
    HEALED = "the job was no longer split when its split could be recorded (seen by a follower while no replica recorded)"


@dataclass(frozen=True)
class FollowedSplit:
    """A split a follower diagnosed: the latest finding, the job's uid then, when it was first
    and last seen split, and whether the job was seen healthy since."""

    finding: Finding
    uid: str | None
    first: datetime
    last: datetime
    healed: bool = False


class FollowedProblems:
    """The splits this replica saw while following, by job (most recent last)."""

    def __init__(self, *, cache: ClusterCache, now: Callable[[], datetime]) -> None:
        self.cache = cache
        self.now = now
        self.kept: dict[JobRef, FollowedSplit] = {}

    def note(self, findings: Iterable[Finding]) -> None:
        """A follower's diagnosed findings: a split (whose zone labels are settled) is kept as
        the job's latest, since its first sighting; a job found otherwise is marked healed."""
        now = self.now()
        for finding in findings:
            key = finding.job
            if finding.awaiting_labels or finding.verdict is Verdict.PENDING:
                continue
            seen = self.kept.get(key)
            if finding.verdict in SPLIT_VERDICTS:
                first = seen.first if seen is not None and not seen.healed else now
                self.kept.pop(key, None)
                self.kept[key] = FollowedSplit(finding, self.cache.job_uid(key) or
                                               (seen.uid if seen else None), first, now)  # fmt: skip
                while len(self.kept) > MAX_FOLLOWED_PROBLEMS:
                    del self.kept[next(iter(self.kept))]
            elif seen is not None and not seen.healed:
                self.kept[key] = replace(seen, healed=True)

    def forget(self, key: JobRef) -> None:
        self.kept.pop(key, None)


def _recorded(store: IncidentStore, cluster: str, key: JobRef, split: FollowedSplit) -> bool:
    """Whether the store holds a zone-split incident of the job open at or after the split
    was first seen (the leader recorded it), or any open incident of the job (one open incident
    per job: a stale split must not fold into it)."""
    listing = store.list_incidents(IncidentQuery(cluster=cluster, namespace=key.namespace,
                                                 name=key.name, limit=50))  # fmt: skip
    for incident in listing.incidents:
        if incident.kind != key.kind:
            continue
        if incident.closed_at is None:
            return True
        try:
            if verdict_class(incident.verdict) is not VerdictClass.ZONE_SPLIT:
                continue
        except LifecycleError:
            continue
        if incident.closed_at >= split.first:
            return True
    return False


def record_missed(
    problems: FollowedProblems, *, store: IncidentStore | None, cluster: str,
    found: dict[JobRef, Finding], evidence: UtilizationReadings,
) -> int:  # fmt: skip
    """At a new term, after the catch-up diagnosis (`found`: its findings by job) is recorded:
    record each kept split the leader did not, closed at once as superseded with the reason.
    How many. Raises `UnavailableError` when the store refuses (the batch is retried, and what
    is not recorded yet is still kept)."""
    if store is None:
        problems.kept.clear()
        return 0
    recorded = 0
    for key, split in list(problems.kept.items()):
        now_seen = found.get(key)
        if now_seen is not None and now_seen.verdict in SPLIT_VERDICTS:
            problems.forget(key)  # split now: the catch-up recorded it
            continue
        if _recorded(store, cluster, key, split):
            problems.forget(key)
            continue
        reason = MissedReason.HEALED if now_seen is not None or split.healed else MissedReason.DELETED
        document = IncidentDocument.of_finding(split.finding, uid=split.uid,
                                               metrics=evidence.of(key))  # fmt: skip
        gpus = sum(split.finding.gpus.values()) if split.finding.gpus else None
        outcome = store.record_finding(FindingRecord.of(document, cluster=cluster,
                                                        detected_at=split.first, gpus=gpus))  # fmt: skip
        incident = outcome.incident
        if outcome.new:
            store.transition(incident.id, incident.status, IncidentStatus.SUPERSEDED, actor=ACTOR,
                             now=problems.now(), detail={"reason": reason.value})  # fmt: skip
            recorded += 1
        log.info("a split seen while following recorded at the new term",
                 extra={"job": str(key), "incident": incident.id, "new": outcome.new,
                        "reason": reason.value})  # fmt: skip
        problems.forget(key)
    return recorded
