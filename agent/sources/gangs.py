"""Gang completion for the cluster cache: whether a job's (or a configured group's) expected pods
are all bound and live now, and which jobs still await their zone-mirroring labels.

Owned by `agent.sources.cache.ClusterCache`, which calls it under its lock when a watch event binds
a pod, changes an awaited pod's labels or phase, or brings a job object; the cache's callers mark
jobs through the cache's `await_labels` and `labels_settled`.

A job's expected pods are known in advance: the sum of a training job's replica counts (its
descriptor says where they are; a TrainJob's are its JobSet's replicated jobs: `numNodes` nodes,
plus the MPI launcher), initializers (replicated jobs outside the gang) neither expected nor
counted as bound; for a configured generic group, the `replicas` of the
Deployments and standalone ReplicaSets and the `parallelism` (capped by `completions`) of the
batch Jobs of its namespace whose pod template matches the group's selector. An unknown count
(no job object cached, a workload missing, a count unreadable) is never complete.

What it does not do: lock, store objects, or decide what a relist reports (never complete).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from agent.model.descriptor import OwnerMove
from agent.model.job import JobRef
from agent.model.workload import JobKind, workload
from agent.settings import GroupSpec
from agent.sources.jobindex import JobIndex
from agent.sources.podfacts import (
    Obj,
    ObjKey,
    bound_live,
    controller_ref,
    labels_match,
    metadata_of,
)
from agent.sources.resources import Resource, Role


class GangWatch:
    """Expected and bound pods per job and group, and the jobs awaiting their labels."""

    def __init__(
        self,
        *,
        objects: Mapping[str, Mapping[ObjKey, Obj]],
        resources: Mapping[str, Resource],
        index: JobIndex,
        groups: tuple[GroupSpec, ...],
    ) -> None:
        self._objects = objects
        self._resources = resources
        self._index = index
        self.groups = groups
        # complete gangs whose pods still wait for a label (see `await_labels`); generic groups
        # (pods of no job object) are awaited by their namespace
        self._awaiting_labels: set[JobRef] = set()
        self._awaiting_groups: dict[str, set[JobRef]] = defaultdict(set)

    # -- jobs awaiting their labels ------------------------------------------------------------

    def await_labels(self, jobs: Iterable[JobRef]) -> None:
        """See `ClusterCache.await_labels`."""
        for job in jobs:
            if job.kind is JobKind.GROUP:
                self._awaiting_groups[job.namespace].add(job)
            else:
                self._awaiting_labels.add(job)

    def labels_settled(self, jobs: Iterable[JobRef]) -> None:
        """These jobs' labels no longer need watching."""
        for job in jobs:
            if job.kind is JobKind.GROUP:
                waiting = self._awaiting_groups.get(job.namespace)
                if waiting is not None:
                    waiting.discard(job)
                    if not waiting:
                        del self._awaiting_groups[job.namespace]
            else:
                self._awaiting_labels.discard(job)

    def awaited(self, key: ObjKey) -> bool:
        """Whether the pod belongs to a job (or a namespace's group) awaiting its labels."""
        job = self._index.job_of_pod.get(key)
        if job is not None:
            return job in self._awaiting_labels
        return key[0] in self._awaiting_groups

    def awaits_job(self, job: JobRef | None) -> bool:
        return job in self._awaiting_labels

    def awaits_namespace(self, namespace: str) -> bool:
        return namespace in self._awaiting_groups

    def forget(self, job: JobRef) -> None:
        """The job's last pod is gone: nothing to await."""
        self._awaiting_labels.discard(job)

    # -- completion ----------------------------------------------------------------------------

    def job_complete(self, job: JobRef) -> bool:
        """All the pods the job's templates expect are bound and live (unknown: False)."""
        obj = self._index.templates_object(job)
        found = workload(job.kind)
        # the sum of the gang templates' counts; 0 (or unreadable) is unknown
        expected = found.templates.expected_pods(obj) if obj is not None else None
        if not expected or obj is None:
            return False
        pods = self._objects.get("pods", {})
        members = self._index.pods_of_job.get(job, ())
        outside = {t.replica for t in found.templates.templates(obj) if not t.in_gang}
        if outside:
            replica = found.labels.replica_type
            bound = sum(1 for k in members if bound_live(pod := pods.get(k))
                        and (metadata_of(pod or {}).get("labels") or {}).get(replica) not in outside)
        else:
            bound = sum(1 for k in members if bound_live(pods.get(k)))
        return bound >= expected

    def group_complete(self, namespace: str, pod: Obj) -> bool:
        """The pod belongs to a configured group whose expected pods are now all bound."""
        labels = metadata_of(pod).get("labels")
        for group in self.groups:
            if group.namespace not in (None, namespace) or not labels_match(group.selector, labels):
                continue
            expected = self._group_expected(namespace, group)
            if expected is None:
                continue
            pods = self._objects.get("pods", {})
            bound = 0
            for k in self._index.loose_pods.get(namespace, ()):
                other = pods.get(k)
                if bound_live(other) and labels_match(group.selector, metadata_of(other or {}).get("labels")):
                    bound += 1
            if bound >= expected:
                return True
        return False

    def _group_expected(self, namespace: str, group: GroupSpec) -> int | None:
        """Pods the group's workloads expect: Deployments, ReplicaSets no Deployment owns, batch
        Jobs of the namespace whose template labels match the selector (None: none found, or a
        count unreadable)."""
        total = 0
        found = False
        for r_name, r in self._resources.items():
            owner = r.owner if r.role is Role.OWNER else None
            if owner is None:
                continue
            for (ns, _), obj in self._objects.get(r_name, {}).items():
                if ns != namespace:
                    continue
                if (owner.move is OwnerMove.THROUGH_OWNER
                        and (controller_ref(obj) or {}).get("kind") == owner.through):  # fmt: skip
                    continue  # counted through its Deployment
                template = owner.templates.container(obj) or {}
                if not labels_match(group.selector, (template.get("metadata") or {}).get("labels")):
                    continue
                count = owner.templates.expected_pods(obj)
                if count is None:
                    return None
                total += count
                found = True
        return total if found and total > 0 else None
