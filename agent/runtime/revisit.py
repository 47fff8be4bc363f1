"""The jobs a batch looks at again besides those it names: the changes a follower saw, and the
splits waiting for room.

Called by the pipeline (`agent.runtime.pipeline`) around each detector batch, and by the recorder
(`agent.runtime.recording`) as it records a finding:

- `FollowedChanges`: a follower remembers the jobs (and namespaces) of the last changes it saw (at
  most `FOLLOWED`); its first cluster-wide batch as the leader diagnoses and records those before
  the diagnosis of every job, so a split that appeared during the hand-over is recorded at the
  start of the new term, not after 150,000 pods are diagnosed.
- `WaitingRoom`: a split some zone would fix but none has room for (`Finding.awaits_room`) is
  remembered (at most `MAX_WAITING_ROOM`), and a change that may free capacity
  (`Change.capacity`) covers it, so it is diagnosed again in that batch.

Also `in_scope` and `job_scope`: which findings a change covers. What it does not do: diagnose or
record (the pipeline does), or read the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent.diagnosis.diagnose import JobScope
from agent.model.finding import Finding
from agent.model.job import JobRef
from agent.sources.change import Change

FOLLOWED = 500  # jobs (and namespaces) changed while following that a new term records first
MAX_WAITING_ROOM = 10_000  # jobs waiting for room that capacity changes re-diagnose


def in_scope(key: JobRef, change: Change) -> bool:
    return change.everything or key in change.jobs or key.namespace in change.namespaces


def job_scope(change: Change) -> JobScope:
    """The jobs a (not cluster-wide) change affects, as the core's scope."""
    return JobScope(jobs=change.jobs, namespaces=change.namespaces)


def _keep_latest(kept: dict[Any, None], keys: Iterable[Any]) -> None:
    """Add `keys` to `kept` as its most recent, keeping the latest `FOLLOWED`."""
    for key in keys:
        kept.pop(key, None)
        kept[key] = None
    while len(kept) > FOLLOWED:
        del kept[next(iter(kept))]


class FollowedChanges:
    """What changed last while this replica followed (most recent last)."""

    def __init__(self) -> None:
        self.jobs: dict[JobRef, None] = {}
        self.namespaces: dict[str, None] = {}
        self.batches = 0  # detector batches left to the leader

    def remember(self, change: Change) -> None:
        """A follower's batch: keep its jobs and namespaces, the latest `FOLLOWED` of each. A
        cluster-wide change (the start-up's, with everything the sync reported) leaves nothing to
        put first."""
        self.batches += 1
        if change.everything:
            self.jobs.clear()
            self.namespaces.clear()
            return
        _keep_latest(self.jobs, change.jobs)
        _keep_latest(self.namespaces, change.namespaces)

    def take(self) -> Change | None:
        """The change to record first at a new term (None: nothing remembered), forgotten."""
        if not self.jobs and not self.namespaces:
            return None
        recent = Change(jobs=frozenset(self.jobs), namespaces=frozenset(self.namespaces))
        self.jobs.clear()
        self.namespaces.clear()
        return recent


class WaitingRoom:
    """Split jobs some zone would fix, none of which has room (most recent last)."""

    def __init__(self) -> None:
        self.jobs: dict[JobRef, None] = {}

    def widen(self, change: Change) -> Change:
        """A change that may have freed capacity also covers the jobs waiting for room."""
        if not change.capacity or not self.jobs or change.everything:
            return change
        waiting = frozenset(self.jobs)
        return Change(jobs=change.jobs | waiting, namespaces=change.namespaces,
                      reasons=(*change.reasons, f"{len(waiting)} job(s) waiting for room"),
                      gang_complete=change.gang_complete, capacity=True)  # fmt: skip

    def note(self, key: JobRef, finding: Finding | None) -> None:
        """Remember (or forget) the job as waiting for room: a split some zone would fix, none
        of which has room now (re-diagnosed when capacity changes, not at the next resync)."""
        if finding is not None and finding.awaits_room:
            if key not in self.jobs and len(self.jobs) >= MAX_WAITING_ROOM:
                del self.jobs[next(iter(self.jobs))]
            self.jobs[key] = None
        else:
            self.jobs.pop(key, None)
