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
- a training job object -> that job. Owner objects (batch Jobs, ReplicaSets) change nothing;
- the cilium-config ConfigMap (identity label filter) -> everything.

Objects are equal when their slim forms are equal, so status churn never reaches the detector.

A pod's job is its controller when that is a kind of the workload table (`agent.model.workload`),
else the job its job-name label names: the cached job object of that name, else the kind its
operator-name label names, else (owned by a batch Job) the kind whose launcher a batch Job owns.
A labelled pod whose kind none of these tell belongs to no job: its changes name its namespace,
as a generic group's do.

Gang completion: a job's expected pods are known in advance (the sum of a training job's replica
counts; for a configured generic group, the `replicas` of the Deployments and standalone
ReplicaSets and the `parallelism` (capped by `completions`) of the batch Jobs of its namespace
whose pod template matches the group's selector; the descriptors say where the counts are). A watch event that binds a pod and so brings
the job's bound, live (not finished, not deleting) pods up to that number is reported with
`gang_complete=True`: the detector hands it over without the debounce window. A relist never is
(it is bulk, not the last bind of a gang); a job whose expected count is unknown (no job object
cached, a workload missing) never is either, and keeps the debounce.
Readers that keep derived state (the runtime's parsed mirror) `track()` the cache: a `Tracker`
collects the keys of every object stored, replaced or deleted since its last `drain`, so they
update only what changed instead of rescanning 150,000 pods.
Thread-safe (one lock); callbacks run outside the lock on the caller's thread. No I/O.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable

from agent.model.job import JobRef
from agent.model.workload import (
    BATCH_JOB,
    KUBEFLOW_LABELS,
    JobKind,
    OwnerMove,
    launched_kind,
    workload,
    workload_named,
    workload_of_operator,
)
from agent.settings import GroupSpec, NamespaceFilter
from agent.sources.change import Change, EventType, merge_all
from agent.sources.podfacts import (
    FINISHED_PHASES,
    Obj,
    ObjKey,
    bound_live,
    controller_ref,
    labels_match,
    metadata_of,
    node_of,
    obj_key,
    only_live_phase_changed,
    phase,
    pod_gpus,
)
from agent.sources.resources import Resource, Role, job_resource_names, resource_name

GANG = KUBEFLOW_LABELS  # the labels naming a pod's job (every training kind's pods carry them)
BATCH_JOB_RESOURCE = resource_name(BATCH_JOB.group, BATCH_JOB.version, BATCH_JOB.plural)


class Tracker:
    """What changed in a cache since the last `ClusterCache.drain`: (resource name, key) pairs in
    the order first touched; `everything` until the first drain (read it all once)."""

    def __init__(self) -> None:
        self.touched: dict[tuple[str, ObjKey], None] = {}
        self.everything = True


class ClusterCache:
    def __init__(
        self,
        *,
        namespaces: NamespaceFilter | None = None,
        on_change: Callable[[Change], object] | None = None,
        groups: Iterable[GroupSpec] = (),
    ) -> None:
        self.namespace_filter = namespaces or NamespaceFilter()
        self.on_change = on_change
        self.groups = tuple(g for g in groups if g.selector)
        self._loose_pods: dict[str, set[ObjKey]] = defaultdict(set)  # pods of no job, by namespace
        self._bulk = False  # inside `replace`
        self._trackers: list[Tracker] = []
        self._lock = threading.RLock()
        self._objects: dict[str, dict[ObjKey, Obj]] = defaultdict(dict)
        self._resources: dict[str, Resource] = {}
        self._job_of_pod: dict[ObjKey, JobRef] = {}
        self._pods_of_job: dict[JobRef, set[ObjKey]] = defaultdict(set)
        # complete gangs whose pods still wait for a label (see `await_labels`); generic groups
        # (pods of no job object) are awaited by their namespace
        self._awaiting_labels: set[JobRef] = set()
        self._awaiting_groups: dict[str, set[JobRef]] = defaultdict(set)
        self._pods_on_node: dict[str, set[ObjKey]] = defaultdict(set)
        self._policies_in: dict[str, set[tuple[str, ObjKey]]] = defaultdict(set)
        self._synced: set[str] = set()
        self._expected: set[str] = set()

    # -- change tracking ---------------------------------------------------------------------

    def track(self) -> Tracker:
        """A new tracker of this cache's changes (keep it: each one costs every update a set add)."""
        with self._lock:
            tracker = Tracker()
            self._trackers.append(tracker)
            return tracker

    def drain(self, tracker: Tracker) -> tuple[bool, list[tuple[str, ObjKey]]]:
        """(everything, touched keys) since the last drain of `tracker`; resets it."""
        with self._lock:
            everything, touched = tracker.everything, list(tracker.touched)
            tracker.everything = False
            tracker.touched = {}
            return everything, touched

    def _touch(self, resource_name: str, key: ObjKey) -> None:
        for tracker in self._trackers:
            if not tracker.everything:
                tracker.touched[(resource_name, key)] = None

    # -- filters and readiness -------------------------------------------------------------

    def admits_namespace(self, namespace: str) -> bool:
        f = self.namespace_filter
        if not namespace:
            return True
        if f.include and namespace not in f.include:
            return False
        return namespace not in f.exclude

    def expect(self, resources: Iterable[Resource]) -> None:
        with self._lock:
            for r in resources:
                self._expected.add(r.name)
                self._resources[r.name] = r

    @property
    def synced(self) -> bool:
        with self._lock:
            return bool(self._expected) and self._expected <= self._synced

    def synced_resources(self) -> set[str]:
        with self._lock:
            return set(self._synced)

    # -- job identity ----------------------------------------------------------------------

    def _job_ref_of_pod(self, pod: Obj) -> JobRef | None:
        """The job the pod belongs to (see the module docstring); None: no job's."""
        meta = metadata_of(pod)
        namespace = str(meta.get("namespace") or "")
        labels = meta.get("labels") or {}
        controller = controller_ref(pod)
        owning = workload_named(str(controller.get("kind"))) if controller else None
        if controller and owning is not None:
            return JobRef(owning.kind, namespace, str(controller.get("name") or ""))
        name = labels.get(GANG.job_name)
        if not name:
            return None
        for r_name, r in self._resources.items():
            if r.job_kind is not None and (namespace, name) in self._objects.get(r_name, {}):
                return JobRef(r.job_kind, namespace, name)
        by_operator = workload_of_operator(labels.get(GANG.operator or "", ""))
        if by_operator is not None:
            return JobRef(by_operator.kind, namespace, name)
        if controller and controller.get("kind") == BATCH_JOB.kind:
            owner = self._objects.get(BATCH_JOB_RESOURCE, {}).get(
                (namespace, str(controller.get("name")))
            )
            owner_ctrl = controller_ref(owner) if owner else None
            found = (workload_named(str(owner_ctrl.get("kind"))) if owner_ctrl
                     else launched_kind())  # fmt: skip
            if found is not None:
                return JobRef(found.kind, namespace, name)
        return None

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
        jobs: set[JobRef] = set()
        namespaces: set[str] = set()
        for obj in items:
            key = obj_key(obj)
            if not self.admits_namespace(key[0]):
                continue
            store[key] = obj
            self._touch(resource.name, key)
            job = self._job_ref_of_pod(obj)
            if job is not None:
                self._job_of_pod[key] = job
                self._pods_of_job[job].add(key)
                jobs.add(job)
            else:
                self._loose_pods[key[0]].add(key)
                namespaces.add(key[0])
            node = node_of(obj)
            if node:
                self._pods_on_node[node].add(key)
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
            self._touch(resource.name, key)
            new = None
        else:
            if old == obj:
                return Change()
            store[key] = obj
            self._touch(resource.name, key)
            new = obj
            if (resource.role is Role.POD and old is not None and only_live_phase_changed(old, new)
                    and not self._awaited(key, new)):
                return Change()  # Pending -> Running: nothing the diagnosis looks at
        reason = f"{resource.kind} {key[0]}/{key[1]} {event.lower()}"
        return self._index(resource, key, old, new, reason)

    def _index(
        self, resource: Resource, key: ObjKey, old: Obj | None, new: Obj | None, reason: str
    ) -> Change:
        role = resource.role
        if role is Role.POD:
            return self._index_pod(key, old, new, reason)
        if role is Role.POLICY:
            if old is not None:
                self._policies_in[key[0]].discard((resource.name, key))
            if new is not None:
                self._policies_in[key[0]].add((resource.name, key))
            if not resource.namespaced:
                return Change(everything=True, reasons=(reason,))
            return Change(namespaces=frozenset({key[0]}), reasons=(reason,))
        if role is Role.NODE:
            pods = self._pods_on_node.get(key[1], set())
            change = self._pods_change(pods, reason)
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
            job = JobRef(resource.job_kind, key[0], key[1])
            # a job object arriving after its pods were all bound completes the gang as well
            complete = (
                not self._bulk and new is not None and old is None and self._job_complete(job, new)
            )
            return Change(jobs=frozenset({job}), reasons=(reason,), gang_complete=complete)
        return Change()

    def _pods_change(self, pods: Iterable[ObjKey], reason: str) -> Change:
        jobs: set[JobRef] = set()
        namespaces: set[str] = set()
        for pod in pods:
            job = self._job_of_pod.get(pod)
            if job is not None:
                jobs.add(job)
            else:
                namespaces.add(pod[0])
        if not jobs and not namespaces:
            return Change()
        return Change(jobs=frozenset(jobs), namespaces=frozenset(namespaces), reasons=(reason,))

    def _index_pod(self, key: ObjKey, old: Obj | None, new: Obj | None, reason: str) -> Change:
        old_job = self._job_of_pod.pop(key, None)
        if old_job is not None:
            members = self._pods_of_job.get(old_job)
            if members is not None:
                members.discard(key)
                if not members:
                    del self._pods_of_job[old_job]
        else:
            loose = self._loose_pods.get(key[0])
            if loose is not None:
                loose.discard(key)
                if not loose:
                    del self._loose_pods[key[0]]
        old_node = node_of(old) if old else None
        if old_node:
            self._pods_on_node[old_node].discard(key)
            if not self._pods_on_node[old_node]:
                del self._pods_on_node[old_node]
        new_job = None
        if new is not None:
            new_job = self._job_ref_of_pod(new)
            if new_job is not None:
                self._job_of_pod[key] = new_job
                self._pods_of_job[new_job].add(key)
            else:
                self._loose_pods[key[0]].add(key)
            node = node_of(new)
            if node:
                self._pods_on_node[node].add(key)
        if old_job is not None and old_job not in self._pods_of_job:
            self._awaiting_labels.discard(old_job)  # its last pod gone: nothing to await
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
            relabelled = settling and new_job in self._awaiting_labels
            complete = (newly_bound or relabelled) and new_job is not None and self._job_complete(new_job)
            return Change(jobs=jobs, reasons=(reason,), gang_complete=complete, capacity=freed)
        complete = (newly_bound and new is not None and self._group_complete(key[0], new)) or (
            settling and key[0] in self._awaiting_groups)
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
            for job in jobs:
                if job.kind is JobKind.GROUP:
                    self._awaiting_groups[job.namespace].add(job)
                else:
                    self._awaiting_labels.add(job)

    def labels_settled(self, jobs: Iterable[JobRef]) -> None:
        """These jobs' labels no longer need watching (see `await_labels`)."""
        with self._lock:
            for job in jobs:
                if job.kind is JobKind.GROUP:
                    waiting = self._awaiting_groups.get(job.namespace)
                    if waiting is not None:
                        waiting.discard(job)
                        if not waiting:
                            del self._awaiting_groups[job.namespace]
                else:
                    self._awaiting_labels.discard(job)

    def _awaited(self, key: ObjKey, pod: Obj) -> bool:
        """Whether the pod belongs to a job (or a namespace's group) awaiting its labels."""
        job = self._job_of_pod.get(key)
        if job is not None:
            return job in self._awaiting_labels
        return key[0] in self._awaiting_groups

    def _job_object(self, job: JobRef) -> Obj | None:
        for name in job_resource_names(job.kind):
            obj = self._objects.get(name, {}).get((job.namespace, job.name))
            if obj is not None:
                return obj
        return None

    def _job_complete(self, job: JobRef, job_obj: Obj | None = None) -> bool:
        """All the pods the job's object expects are bound and live (unknown: False)."""
        obj = job_obj if job_obj is not None else self._job_object(job)
        # the sum of the templates' counts; 0 (or unreadable) is unknown
        expected = workload(job.kind).templates.expected_pods(obj) if obj is not None else None
        if not expected:
            return False
        pods = self._objects.get("pods", {})
        bound = sum(1 for k in self._pods_of_job.get(job, ()) if bound_live(pods.get(k)))
        return bound >= expected

    def _group_complete(self, namespace: str, pod: Obj) -> bool:
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
            for k in self._loose_pods.get(namespace, ()):
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

    # -- reads ---------------------------------------------------------------------------------

    def get(self, resource_name: str, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._objects.get(resource_name, {}).get((namespace, name))

    def items(self, resource_name: str) -> list[Obj]:
        with self._lock:
            return list(self._objects.get(resource_name, {}).values())

    def items_by_key(self, resource_name: str) -> list[tuple[ObjKey, Obj]]:
        with self._lock:
            return list(self._objects.get(resource_name, {}).items())

    def resource(self, resource_name: str) -> Resource | None:
        with self._lock:
            return self._resources.get(resource_name)

    def resources(self) -> list[Resource]:
        """The resources the cache holds objects of (or expects), in a stable order."""
        with self._lock:
            names = sorted(set(self._objects) | self._expected)
            return [self._resources[n] for n in names if n in self._resources]

    def count(self, resource_name: str) -> int:
        with self._lock:
            return len(self._objects.get(resource_name, {}))

    def keys(self, resource_name: str) -> set[ObjKey]:
        with self._lock:
            return set(self._objects.get(resource_name, {}))

    def job_keys(self) -> set[JobRef]:
        with self._lock:
            keys = set(self._pods_of_job)
            for r_name, r in self._resources.items():
                if r.job_kind is not None:
                    kind = r.job_kind
                    keys.update(JobRef(kind, ns, n) for ns, n in self._objects.get(r_name, {}))
            return keys

    def jobs_named(self, namespace: str, name: str) -> list[JobRef]:
        with self._lock:
            return sorted(k for k in self.job_keys() if k.namespace == namespace and k.name == name)

    def job_of_pod(self, namespace: str, pod: str) -> JobRef | None:
        with self._lock:
            return self._job_of_pod.get((namespace, pod))

    def pods_of_job(self, job: JobRef) -> list[Obj]:
        with self._lock:
            store = self._objects.get("pods", {})
            return [store[k] for k in sorted(self._pods_of_job.get(job, ())) if k in store]

    # -- one job: its object and its pods (for findings and playbook conditions) ------------

    def job_object(self, job: JobRef) -> Obj | None:
        """The job's own object (at its kind's preferred version, else another), when cached;
        None for a generic group."""
        with self._lock:
            return self._job_object(job)

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
                for r_name, key in sorted(self._policies_in.get(ns, ())):
                    obj = self._objects.get(r_name, {}).get(key)
                    if obj is not None:
                        out.append(obj)
            return out

    def snapshot(self, namespaces: set[str] | None = None) -> list[Obj]:
        """Every cached object (namespaced ones limited to `namespaces` when given), for the core."""
        with self._lock:
            out: list[Obj] = []
            for r_name, store in self._objects.items():
                resource = self._resources.get(r_name)
                if resource is None:
                    continue
                if namespaces is None or not resource.namespaced:
                    out.extend(store.values())
                else:
                    out.extend(o for k, o in store.items() if k[0] in namespaces)
            return out
