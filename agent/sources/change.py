"""What a cache update affects, as the detector reads it: a `Change` names the jobs, namespaces
(generic groups are found there) or everything to diagnose again, and says whether the update
completed a gang or may have freed room; `merge_all` folds many into one. Watch event types too.

Made by `agent.sources.cache`, read by the detector, the pipeline and the runtime's start-up.
Pure data; what changes map to which jobs is the cache's rule, not this module's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from agent.model.job import JobRef


class EventType:
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True)
class Change:
    """What a cache update affects; `everything` means re-diagnose all jobs. `gang_complete`:
    the update bound the last expected pod of the jobs (or generic groups of the namespaces) it
    names, so it should be diagnosed at once rather than after the debounce window. `capacity`:
    the update may have freed room for a job elsewhere (a node added or changed, a pod holding
    GPUs finished, deleted or unbound), so jobs waiting for room are diagnosed again."""

    jobs: frozenset[JobRef] = frozenset()
    namespaces: frozenset[str] = frozenset()
    everything: bool = False
    reasons: tuple[str, ...] = field(default=(), compare=False)
    gang_complete: bool = False
    capacity: bool = False

    def __bool__(self) -> bool:
        return bool(self.jobs or self.namespaces or self.everything or self.capacity)

    def merge(self, other: Change) -> Change:
        return Change(
            jobs=self.jobs | other.jobs,
            namespaces=self.namespaces | other.namespaces,
            everything=self.everything or other.everything,
            reasons=self.reasons + other.reasons,
            gang_complete=self.gang_complete or other.gang_complete,
            capacity=self.capacity or other.capacity,
        )

    def without(self, covered: Change) -> Change:
        """This change minus what `covered` (a batch handled meanwhile) diagnoses anyway: its
        jobs, and jobs of its namespaces. Cluster-wide changes and other namespaces stay."""
        if self.everything or covered.everything:
            return self if not covered.everything else Change()
        jobs = frozenset(
            j for j in self.jobs if j not in covered.jobs and j.namespace not in covered.namespaces
        )
        namespaces = self.namespaces - covered.namespaces
        capacity = self.capacity and not covered.capacity
        if jobs == self.jobs and namespaces == self.namespaces and capacity == self.capacity:
            return self
        return Change(jobs=jobs, namespaces=namespaces, reasons=self.reasons, capacity=capacity)


def merge_all(
    changes: Iterable[Change], *, max_reasons: int = 20, gang_complete: bool | None = None
) -> Change:
    """One Change for many (linear, unlike repeated `merge`); `gang_complete` overrides the flag
    (None: set when any change sets it)."""
    jobs: set[JobRef] = set()
    namespaces: set[str] = set()
    everything = False
    complete = False
    capacity = False
    reasons: list[str] = []
    for c in changes:
        if not c:
            continue
        jobs |= c.jobs
        namespaces |= c.namespaces
        everything = everything or c.everything
        complete = complete or c.gang_complete
        capacity = capacity or c.capacity
        if len(reasons) < max_reasons:
            reasons.extend(c.reasons)
    return Change(
        frozenset(jobs),
        frozenset(namespaces),
        everything,
        tuple(reasons[:max_reasons]),
        gang_complete=complete if gang_complete is None else gang_complete,
        capacity=capacity,
    )
