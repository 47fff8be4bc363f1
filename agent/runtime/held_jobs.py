"""The jobs found in the watch cache's parsed mirror, kept up to date per mirror generation by
finding again only the jobs of the namespaces that changed.

Called by `agent.runtime.whatif.LiveWhatIf` with each view it answers on (the state, its facts and
the mirror's generation). The jobs of a namespace are read from its pods (the facts' pods by
namespace: the mirror's facts index keeps one tuple per namespace until one of its pods changes)
and from its training-job and owner objects; a namespace whose pod tuple and objects are the same
objects as in the generation the jobs were found for keeps its jobs, every other is found again
(`find_jobs` scoped to it). The jobs come out in `find_jobs`' order (Kubeflow jobs by kind,
namespace and name, then each group spec's jobs by namespace). What it does not do: lock (its caller
does), or read the cache itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.model.cluster import ClusterState
from agent.model.job import Job
from agent.settings import GroupSpec
from agent.topology.facts import ClusterFacts
from agent.topology.jobs import find_jobs, in_find_order

_Objects = dict[str, dict[tuple[Any, ...], object]]


def _by_namespace(objects: Mapping[tuple[Any, ...], object]) -> _Objects:
    out: _Objects = {}
    for key, obj in objects.items():
        out.setdefault(key[1], {})[key] = obj
    return out


def _same(a: Mapping[tuple[Any, ...], object] | None,
          b: Mapping[tuple[Any, ...], object] | None) -> bool:  # fmt: skip
    if not a or not b:
        return not a and not b
    return a.keys() == b.keys() and all(b[k] is v for k, v in a.items())


class HeldJobs:
    """The jobs of one state at a time, each namespace's found again only when it changed."""

    def __init__(self, groups: Sequence[GroupSpec]) -> None:
        self._groups = tuple(groups)
        self._pods_in: Mapping[str, object] = {}
        self._jobs_of: _Objects = {}
        self._owned_of: _Objects = {}
        self._found: dict[str, list[Job]] = {}  # namespace -> its jobs
        self.namespaces_found_last = 0  # namespaces found again by the last `update`

    def update(self, state: ClusterState, facts: ClusterFacts) -> tuple[Job, ...]:
        """The jobs of `state` (whose facts are `facts`)."""
        pods_in = facts.pods_in
        jobs_of = _by_namespace(state.job_objects)
        owned_of = _by_namespace(state.owned_objects)
        names = pods_in.keys() | self._pods_in.keys()
        changed = {ns for ns in names
                   if pods_in.get(ns) is not self._pods_in.get(ns)
                   or not _same(jobs_of.get(ns), self._jobs_of.get(ns))
                   or not _same(owned_of.get(ns), self._owned_of.get(ns))}  # fmt: skip
        changed |= {ns for ns in jobs_of.keys() ^ self._jobs_of.keys()}
        changed |= {ns for ns in owned_of.keys() ^ self._owned_of.keys()}
        for ns in changed:
            self._found.pop(ns, None)
        if changed:
            found = find_jobs(state, self._groups, namespaces=changed, pods_in=pods_in)
            for job in found:
                self._found.setdefault(job.ref.namespace, []).append(job)
        self._pods_in, self._jobs_of, self._owned_of = pods_in, jobs_of, owned_of
        self.namespaces_found_last = len(changed)
        return self.jobs()

    def jobs(self) -> tuple[Job, ...]:
        """Every job held, in `find_jobs`' order."""
        every = (j for ns in sorted(self._found) for j in self._found[ns])
        return tuple(in_find_order(every, self._groups))
