"""The in-memory cluster cache: slim objects by resource, indexes, and which jobs a change affects.

Fed by `agent.sources.kube` (relists via `replace`, watch events via `apply`); read by the detector
(pods of a job, policies of a namespace, the whole snapshot for a sweep), the pipeline (a job's uid,
labels and requested GPUs: `job_uid`, `job_labels`, `job_gpus`) and the Alertmanager mapping
(`jobs_named`, `job_of_pod`). Every change that alters what the diagnosis sees is reported to
`on_change` as a `Change` naming the affected jobs (or namespaces, or everything):

- a pod added/removed/rebound/relabelled -> its job (old and new, if relabelled);
  a pod of no job -> its namespace (generic groups are found there);
- a NetworkPolicy/CNP in namespace N -> namespace N (policies select endpoints of their own
  namespace, and a job's pods share one namespace); a CCNP or a namespace's labels -> everything;
- a node's labels, taints, GPUs or cordon -> the jobs with pods on it;
- a training job object -> that job (a JobSet a TrainJob owns -> the TrainJob, whose pods and
  templates it holds). Owner objects (batch Jobs, ReplicaSets) change nothing;
- the cilium-config ConfigMap (identity label filter) -> everything;
- a Kueue Workload -> the job it belongs to (its controller); Kueue's queues, flavors and
  topologies -> nothing (their status churns with every admission; a diagnosis reads them).

Objects are equal when their slim forms are equal, so status churn never reaches the detector.

A pod's job is found by the cache's indexes (`agent.sources.jobindex`: its controller, else its
job-name label); a labelled pod whose kind nothing tells belongs to no job: its changes name its
namespace, as a generic group's do.

Gang completion (`agent.sources.gangs`): a job's expected pods are known in advance (a training
job's replica counts, a configured group's workloads). A watch event that binds a pod and so brings
the job's bound, live (not finished, not deleting) pods up to that number is reported with
`gang_complete=True`: the detector hands it over without the debounce window. A relist never is
(it is bulk, not the last bind of a gang); a job whose expected count is unknown (no job object
cached, a workload missing) never is either, and keeps the debounce.
Readers that keep derived state (the runtime's parsed mirror) `track()` the cache: a `Tracker`
(`agent.sources.tracking`) collects the keys of every object stored, replaced or deleted since its
last `drain`, so they update only what changed instead of rescanning 150,000 pods.

This module applies lists and watch events and answers the reads of jobs; the objects and their
plain reads are its base (`agent.sources.objectstore`), the indexes (`jobindex`), the gang watch
(`gangs`) and the trackers (`tracking`) its collaborators, called under its lock. Thread-safe (one lock); callbacks run outside
the lock on the caller's thread. No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from agent.model.job import JobRef
from agent.model.workload import KueueKindName, workload, workload_named
from agent.settings import GroupSpec, NamespaceFilter
from agent.sources.change import Change, EventType, merge_all
from agent.sources.gangs import GangWatch
from agent.sources.jobindex import JobIndex
from agent.sources.objectstore import ObjectStore
from agent.sources.podfacts import (
    FINISHED_PHASES,
    Obj,
    ObjKey,
    bound_live,
    metadata_of,
    obj_key,
    only_live_phase_changed,
    phase,
    pod_gpus,
)
from agent.sources.resources import Resource, Role
from agent.sources.tracking import Tracker, Trackers

__all__ = ["ClusterCache", "Tracker"]


class ClusterCache(ObjectStore):
    """Slim objects by resource, with their indexes and what each update affects (see the module
    docstring)."""

    def __init__(
        self,
        *,
        namespaces: NamespaceFilter | None = None,
        on_change: Callable[[Change], object] | None = None,
        groups: Iterable[GroupSpec] = (),
    ) -> None:
        super().__init__()
        self.namespace_filter = namespaces or NamespaceFilter()
        self.on_change = on_change
        self.groups = tuple(g for g in groups if g.selector)
        self._bulk = False  # inside `replace`
        self._trackers = Trackers()
        self._index = JobIndex(objects=self._objects, resources=self._resources)
        self._gangs = GangWatch(objects=self._objects, resources=self._resources,
                                index=self._index, groups=self.groups)  # fmt: skip

    # -- change tracking ---------------------------------------------------------------------

    def track(self) -> Tracker:
        """A new tracker of this cache's changes (keep it: each one costs every update a set add)."""
        with self._lock:
            return self._trackers.track()

    def drain(self, tracker: Tracker) -> tuple[bool, list[tuple[str, ObjKey]]]:
        """(everything, touched keys) since the last drain of `tracker`; resets it."""
        with self._lock:
            return self._trackers.drain(tracker)

    # -- filters ---------------------------------------------------------------------------

    def admits_namespace(self, namespace: str) -> bool:
        f = self.namespace_filter
        if not namespace:
            return True
        if f.include and namespace not in f.include:
            return False
        return namespace not in f.exclude

    # -- updates -----------------------------------------------------------------------------

    def apply(self, resource: Resource, event: str, obj: Obj) -> Change:
        """Apply one watch event (object already slimmed); report and return what it affects."""
        with self._lock:
            change = self._apply(resource, event, obj)
        if change and self.on_change is not None:
            self.on_change(change)
        return change

    def replace(self, resource: Resource, items: list[Obj]) -> Change:
        """Apply a full (re)list: deletions of what vanished, upserts of what is new or changed."""
        with self._lock:
            self._resources[resource.name] = resource
            current = self._objects[resource.name]
            if not current and resource.role is Role.POD:
                change = self._first_pods(resource, items)
                self._synced.add(resource.name)
                if change and self.on_change is not None:
                    self.on_change(change)
                return change
            fresh = {obj_key(o): o for o in items}
            self._bulk = True  # no gang-completion checks: a relist is bulk (and they would be
            try:  # quadratic in a job's pods)
                parts = [
                    self._apply(resource, EventType.DELETED, current[key])
                    for key in list(current)
                    if key not in fresh
                ]
                parts += [self._apply(resource, EventType.MODIFIED, obj) for obj in fresh.values()]
            finally:
                self._bulk = False
            change = merge_all(parts, gang_complete=False)  # bulk: keeps the debounce
            self._synced.add(resource.name)
        if change and self.on_change is not None:
            self.on_change(change)
        return change

    def _first_pods(self, resource: Resource, items: list[Obj]) -> Change:
        """The first list of pods into an empty cache: the same indexes as `_apply`, without a
        `Change` per pod (150,000 of them at start-up)."""
        store = self._objects[resource.name]
        f = self.namespace_filter
        filtering = bool(f.include or f.exclude)
        touching = self._trackers.partial()
        stored: list[tuple[ObjKey, Obj]] = []
        for obj in items:
            key = obj_key(obj)
            if filtering and not self.admits_namespace(key[0]):
                continue
            store[key] = obj
            if touching:
                self._trackers.touch(resource.name, key)
            stored.append((key, obj))
        jobs, namespaces = self._index.add_pods(stored)
        if not jobs and not namespaces:
            return Change()
        return Change(
            jobs=frozenset(jobs),
            namespaces=frozenset(namespaces),
            reasons=(f"{len(store)} {resource.kind}s listed",),
        )

    def _apply(self, resource: Resource, event: str, obj: Obj) -> Change:
        self._resources[resource.name] = resource
        key = obj_key(obj)
        if resource.namespaced and resource.namespace is None and not self.admits_namespace(key[0]):
            return Change()
        store = self._objects[resource.name]
        old = store.get(key)
        if event == EventType.DELETED:
            if old is None:
                return Change()
            del store[key]
            self._trackers.touch(resource.name, key)
            new = None
        else:
            if old == obj:
                return Change()
            store[key] = obj
            self._trackers.touch(resource.name, key)
            new = obj
            if (resource.role is Role.POD and old is not None and only_live_phase_changed(old, new)
                    and not self._gangs.awaited(key)):
                return Change()  # Pending -> Running: nothing the diagnosis looks at
        reason = f"{resource.kind} {key[0]}/{key[1]} {event.lower()}"
        return self._index_change(resource, key, old, new, reason)

    def _index_change(
        self, resource: Resource, key: ObjKey, old: Obj | None, new: Obj | None, reason: str
    ) -> Change:
        role = resource.role
        if role is Role.POD:
            return self._index_pod(key, old, new, reason)
        if role is Role.POLICY:
            self._index.index_policy(resource.name, key, old=old, new=new)
            if not resource.namespaced:
                return Change(everything=True, reasons=(reason,))
            return Change(namespaces=frozenset({key[0]}), reasons=(reason,))
        if role is Role.NODE:
            pods = self._index.pods_on_node.get(key[1], set())
            change = self._index.pods_change(pods, reason)
            if new is None:
                return change  # a node removed frees no room
            return Change(jobs=change.jobs, namespaces=change.namespaces, reasons=(reason,),
                          capacity=True)  # fmt: skip
        if role is Role.NAMESPACE:
            if old is None or new is None:
                return Change()  # an empty new namespace, or one whose pods are gone already
            return Change(everything=True, reasons=(reason,))
        if role is Role.DATAPLANE:
            return Change(everything=True, reasons=(reason,))  # identities of every pod
        if role is Role.JOB and resource.job_kind is not None:
            job = self._index.job_of_object(resource.job_kind, key[0], key[1])
            # a JobSet (or its TrainJob) arriving, leaving or changing owner: pods indexed
            # under the JobSet before it said whose it is move to their job
            moved = (self._index.regroup(key[0], key[1])
                     if workload(resource.job_kind).labels.completion_index is not None
                     and (old is None or new is None
                          or metadata_of(old).get("ownerReferences")
                          != metadata_of(new).get("ownerReferences"))
                     else set())  # fmt: skip
            # a job object arriving after its pods were all bound completes the gang as well
            complete = (
                not self._bulk and new is not None and old is None
                and self._gangs.job_complete(job)
            )  # fmt: skip
            return Change(jobs=frozenset({job, *moved}), reasons=(reason,), gang_complete=complete)
        if role is Role.KUEUE and resource.kueue is not None:
            return self._kueue_change(resource, old, new, reason)
        return Change()

    def _kueue_change(self, resource: Resource, old: Obj | None, new: Obj | None,
                      reason: str) -> Change:  # fmt: skip
        """A Workload names its job (its controller ownerReference, a kind of the table);
        queues, flavors and topologies change no verdict by themselves: they are read when a
        job is diagnosed."""
        if resource.kueue is None or resource.kueue.kind is not KueueKindName.WORKLOAD:
            return Change()
        jobs = set()
        for obj in (old, new):
            for ref in metadata_of(obj or {}).get("ownerReferences") or []:
                found = workload_named(str(ref.get("kind")))
                if ref.get("controller") and found is not None:
                    namespace = str(metadata_of(obj or {}).get("namespace", ""))
                    jobs.add(self._index.job_of_object(found.kind, namespace, str(ref.get("name"))))
        return Change(jobs=frozenset(jobs), reasons=(reason,)) if jobs else Change()

    def _index_pod(self, key: ObjKey, old: Obj | None, new: Obj | None, reason: str) -> Change:
        old_job = self._index.remove_pod(key, old)
        new_job = self._index.add_pod(key, new) if new is not None else None
        if old_job is not None and old_job not in self._index.pods_of_job:
            self._gangs.forget(old_job)  # its last pod gone: nothing to await
        newly_bound = not self._bulk and bound_live(new) and not bound_live(old)
        # a pod that held GPUs and no longer counts (finished, deleting, deleted, unbound)
        freed = bound_live(old) and not bound_live(new) and pod_gpus(old) > 0
        jobs = frozenset(j for j in (old_job, new_job) if j is not None)
        # an awaited pod's labels or phase moved on: the verdict may be settled now
        settling = (
            not self._bulk and bound_live(new) and bound_live(old)
            and (metadata_of(old or {}).get("labels") != metadata_of(new or {}).get("labels")
                 or phase(old or {}) != phase(new or {}))
        )  # fmt: skip
        if jobs:
            relabelled = settling and self._gangs.awaits_job(new_job)
            complete = ((newly_bound or relabelled) and new_job is not None
                        and self._gangs.job_complete(new_job))  # fmt: skip
            return Change(jobs=jobs, reasons=(reason,), gang_complete=complete, capacity=freed)
        complete = (newly_bound and new is not None and self._gangs.group_complete(key[0], new)) or (
            settling and self._gangs.awaits_namespace(key[0]))
        return Change(namespaces=frozenset({key[0]}), reasons=(reason,), gang_complete=complete,
                      capacity=freed)  # fmt: skip

    # -- gang completion ----------------------------------------------------------------------

    def await_labels(self, jobs: Iterable[JobRef]) -> None:
        """Jobs whose pods do not carry their zone-mirroring labels yet (written after the bind,
        before the containers start): a label or phase change of one of their bound pods then
        completes the gang again (`gang_complete`: diagnosed at once), until `labels_settled`
        says it is done. A generic group (kind `Group`, pods of no job object) is awaited by its
        namespace."""
        with self._lock:
            self._gangs.await_labels(jobs)

    def labels_settled(self, jobs: Iterable[JobRef]) -> None:
        """These jobs' labels no longer need watching (see `await_labels`)."""
        with self._lock:
            self._gangs.labels_settled(jobs)

    # -- jobs and their pods ----------------------------------------------------------------

    def job_keys(self) -> set[JobRef]:
        with self._lock:
            return self._index.job_keys()

    def jobs_named(self, namespace: str, name: str) -> list[JobRef]:
        with self._lock:
            return sorted(k for k in self.job_keys() if k.namespace == namespace and k.name == name)

    def job_of_pod(self, namespace: str, pod: str) -> JobRef | None:
        with self._lock:
            return self._index.job_of_pod.get((namespace, pod))

    def pods_of_job(self, job: JobRef) -> list[Obj]:
        with self._lock:
            store = self._objects.get("pods", {})
            return [store[k] for k in sorted(self._index.pods_of_job.get(job, ())) if k in store]

    # -- reads ---------------------------------------------------------------------------------

    # -- one job: its object and its pods (for findings and playbook conditions) ------------

    def job_object(self, job: JobRef) -> Obj | None:
        """The job's own object (at its kind's preferred version, else another), when cached;
        None for a generic group."""
        with self._lock:
            return self._index.job_object(job)

    def job_uid(self, job: JobRef) -> str | None:
        """The uid of the job's object; None when it is not cached or has no uid."""
        obj = self.job_object(job)
        uid = metadata_of(obj).get("uid") if obj is not None else None
        return str(uid) if uid else None

    def job_pending_pods(self, job: JobRef) -> bool:
        """The job's own object is cached and not finished (none of its kind's finished
        conditions, Succeeded or Failed, True): whatever pods it has now, its operator keeps (or,
        once resumed, makes) its gang."""
        obj = self.job_object(job)
        if obj is None:
            return False
        return workload(job.kind).conditions.finished_as(obj) is None

    def job_labels(self, job: JobRef) -> dict[str, str]:
        """The labels of the job's object ({} when it is not cached)."""
        obj = self.job_object(job)
        labels = (metadata_of(obj).get("labels") if obj is not None else None) or {}
        return {str(k): str(v) for k, v in labels.items()}

    def job_gpus(self, job: JobRef) -> int:
        """GPUs the job's live pods request (a container's request, else its limit); finished
        pods and unreadable quantities count nothing."""
        return sum(pod_gpus(pod) for pod in self.pods_of_job(job)
                   if phase(pod) not in FINISHED_PHASES)  # fmt: skip

    def policies_in(self, namespace: str) -> list[Obj]:
        """Policies of a namespace plus the cluster-wide ones."""
        with self._lock:
            out = []
            for ns in (namespace, ""):
                for r_name, key in sorted(self._index.policies_in.get(ns, ())):
                    obj = self._objects.get(r_name, {}).get(key)
                    if obj is not None:
                        out.append(obj)
            return out
