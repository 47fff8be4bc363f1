"""The cluster cache's indexes: which job each pod belongs to, the pods of each job (and of no job,
by namespace), the pods on each node, the policies of each namespace.

Owned by `agent.sources.cache.ClusterCache`, which shares its object and resource maps with it
and calls it under its lock for every pod or policy it stores or deletes; the gang watch
(`agent.sources.gangs`) counts a job's pods through it.

A pod's job is its controller when that is a kind of the workload table (`agent.model.workload`),
else, for a pod labelled `jobset.sigs.k8s.io/jobset-name`, the JobSet of that name or the kind
materialised as it (a TrainJob) when the cached JobSet's controller is one (or, the JobSet not
cached yet, a cached TrainJob of that name is); else the job its job-name label names: the cached
job object of that name, else the kind its operator-name label names, else (owned by a batch Job)
the kind whose launcher a batch Job owns. A labelled pod whose kind none of these tell belongs to
no job. A JobSet a TrainJob owns is no job of its own: its changes name the TrainJob, and the
pods indexed under the JobSet before it arrived move to the TrainJob.

What it does not do: lock, decide what a change affects beyond the pods it names, or store objects.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from agent.model.job import JobRef
from agent.model.workload import (
    BATCH_JOB,
    KUBEFLOW_LABELS,
    WORKLOADS,
    JobKind,
    launched_kind,
    materialising,
    workload,
    workload_named,
    workload_of_operator,
)
from agent.sources.change import Change
from agent.sources.podfacts import Obj, ObjKey, controller_ref, metadata_of, node_of
from agent.sources.resources import Resource, job_resource_names, resource_name

GANG = KUBEFLOW_LABELS  # the labels naming a pod's job (every training kind's pods carry them)
BATCH_JOB_RESOURCE = resource_name(BATCH_JOB.group, BATCH_JOB.version, BATCH_JOB.plural)
JOBSET_NAME = workload(JobKind.JOBSET).labels.job_name


class JobIndex:
    """Pods by job, node and namespace, and policies by namespace, over the cache's objects."""

    def __init__(
        self, *, objects: Mapping[str, Mapping[ObjKey, Obj]], resources: Mapping[str, Resource]
    ) -> None:
        self._objects = objects
        self._resources = resources
        self.job_of_pod: dict[ObjKey, JobRef] = {}
        self.pods_of_job: dict[JobRef, set[ObjKey]] = defaultdict(set)
        self.loose_pods: dict[str, set[ObjKey]] = defaultdict(set)  # pods of no job, by namespace
        self.pods_on_node: dict[str, set[ObjKey]] = defaultdict(set)
        self.policies_in: dict[str, set[tuple[str, ObjKey]]] = defaultdict(set)

    # -- job identity ----------------------------------------------------------------------

    def job_ref_of_pod(self, pod: Obj) -> JobRef | None:
        """The job the pod belongs to (see the module docstring); None: no job's."""
        found = self._job_of(pod)
        return JobRef(*found) if found is not None else None

    def _job_of(self, pod: Obj) -> tuple[JobKind, str, str] | None:
        """`job_ref_of_pod` as (kind, namespace, name): the bulk load interns the refs."""
        meta = metadata_of(pod)
        namespace = str(meta.get("namespace") or "")
        labels = meta.get("labels") or {}
        controller = controller_ref(pod)
        owning = workload_named(str(controller.get("kind"))) if controller else None
        if controller and owning is not None:
            return (owning.kind, namespace, str(controller.get("name") or ""))
        jobset = labels.get(JOBSET_NAME)
        if jobset:
            return (self.jobset_kind(namespace, str(jobset)), namespace, str(jobset))
        name = labels.get(GANG.job_name)
        if not name:
            return None
        for r_name, r in self._resources.items():
            if r.job_kind is not None and (namespace, name) in self._objects.get(r_name, {}):
                return (r.job_kind, namespace, name)
        by_operator = workload_of_operator(labels.get(GANG.operator or "", ""))
        if by_operator is not None:
            return (by_operator.kind, namespace, name)
        if controller and controller.get("kind") == BATCH_JOB.kind:
            owner = self._objects.get(BATCH_JOB_RESOURCE, {}).get(
                (namespace, str(controller.get("name")))
            )
            owner_ctrl = controller_ref(owner) if owner else None
            found = (workload_named(str(owner_ctrl.get("kind"))) if owner_ctrl
                     else launched_kind())  # fmt: skip
            if found is not None:
                return (found.kind, namespace, name)
        return None

    def jobset_kind(self, namespace: str, name: str) -> JobKind:
        """The kind JobSet `namespace/name`'s pods belong to (see the module docstring)."""
        owner = materialising(JobKind.JOBSET)
        if owner is None:
            return JobKind.JOBSET
        jobset = self.job_object(JobRef(JobKind.JOBSET, namespace, name))
        if jobset is not None:
            controller = controller_ref(jobset)
            owned = controller is not None and controller.get("kind") == owner.kind.value
            return owner.kind if owned else JobKind.JOBSET
        found = self.job_object(JobRef(owner.kind, namespace, name))
        return owner.kind if found is not None else JobKind.JOBSET

    def job_of_object(self, kind: JobKind, namespace: str, name: str) -> JobRef:
        """The job a cached job object's change names: a JobSet a TrainJob owns names the
        TrainJob; any other object names itself."""
        if kind is JobKind.JOBSET:
            return JobRef(self.jobset_kind(namespace, name), namespace, name)
        return JobRef(kind, namespace, name)

    def templates_object(self, job: JobRef) -> Obj | None:
        """The object holding the job's pod templates: its own, or (a TrainJob) its JobSet's."""
        materialised = workload(job.kind).materialised if job.kind is not JobKind.GROUP else None
        if materialised is not None:
            return self.job_object(JobRef(materialised, job.namespace, job.name))
        return self.job_object(job)

    def regroup(self, namespace: str, name: str) -> set[JobRef]:
        """Re-index the pods of the jobs named `namespace/name` (a JobSet or its TrainJob
        arrived, left or changed owner): the jobs their pods left and joined."""
        moved: set[JobRef] = set()
        named = (JobRef(w.kind, namespace, name) for w in WORKLOADS
                 if w.labels.completion_index is not None)  # the kinds JobSet pods may belong to
        for job in [j for j in named if j in self.pods_of_job]:
            pods = self._objects.get("pods", {})
            for key in list(self.pods_of_job.get(job, ())):
                pod = pods.get(key)
                if pod is None:
                    continue
                found = self.job_ref_of_pod(pod)
                if found == job:
                    continue
                self.remove_pod(key, pod)
                self.add_pod(key, pod)
                moved |= {job, *((found,) if found is not None else ())}
        return moved

    def job_object(self, job: JobRef) -> Obj | None:
        """The job's own object (at its kind's preferred version, else another), when cached."""
        for name in job_resource_names(job.kind):
            obj = self._objects.get(name, {}).get((job.namespace, job.name))
            if obj is not None:
                return obj
        return None

    def job_keys(self) -> set[JobRef]:
        """Every job with pods or a cached object (a JobSet a TrainJob owns: the TrainJob)."""
        keys = set(self.pods_of_job)
        for r_name, r in self._resources.items():
            if r.job_kind is not None:
                kind = r.job_kind
                keys.update(self.job_of_object(kind, ns, n) for ns, n in self._objects.get(r_name, {}))
        return keys

    # -- pods --------------------------------------------------------------------------------

    def add_pod(self, key: ObjKey, pod: Obj) -> JobRef | None:
        """Index a stored pod; its job (None: a pod of no job, indexed by its namespace)."""
        job = self.job_ref_of_pod(pod)
        if job is not None:
            self.job_of_pod[key] = job
            self.pods_of_job[job].add(key)
        else:
            self.loose_pods[key[0]].add(key)
        node = node_of(pod)
        if node:
            self.pods_on_node[node].add(key)
        return job

    def add_pods(
        self, pods: Iterable[tuple[ObjKey, Obj]]
    ) -> tuple[set[JobRef], set[str]]:
        """`add_pod` for each pod of a bulk load; (the jobs, the namespaces of pods of no job)
        they fall in. The pods of a job share one `JobRef` (made once per job, not per pod)."""
        jobs: set[JobRef] = set()
        namespaces: set[str] = set()
        refs: dict[tuple[JobKind, str, str], tuple[JobRef, set[ObjKey]]] = {}
        job_of_pod, pods_of_job, pods_on_node = self.job_of_pod, self.pods_of_job, self.pods_on_node
        for key, pod in pods:
            found = self._job_of(pod)
            if found is not None:
                entry = refs.get(found)
                if entry is None:
                    job = JobRef(*found)
                    members = pods_of_job.get(job)
                    if members is None:
                        members = pods_of_job[job] = set()
                    entry = refs[found] = (job, members)
                    jobs.add(job)
                job_of_pod[key] = entry[0]
                entry[1].add(key)
            else:
                self.loose_pods[key[0]].add(key)
                namespaces.add(key[0])
            node = node_of(pod)
            if node:
                pods_on_node[node].add(key)
        return jobs, namespaces

    def remove_pod(self, key: ObjKey, old: Obj | None) -> JobRef | None:
        """Drop a pod's entries (`old`: its object as indexed, None if it was not); its job."""
        old_job = self.job_of_pod.pop(key, None)
        if old_job is not None:
            members = self.pods_of_job.get(old_job)
            if members is not None:
                members.discard(key)
                if not members:
                    del self.pods_of_job[old_job]
        else:
            loose = self.loose_pods.get(key[0])
            if loose is not None:
                loose.discard(key)
                if not loose:
                    del self.loose_pods[key[0]]
        old_node = node_of(old) if old else None
        if old_node:
            self.pods_on_node[old_node].discard(key)
            if not self.pods_on_node[old_node]:
                del self.pods_on_node[old_node]
        return old_job

    def pods_change(self, pods: Iterable[ObjKey], reason: str) -> Change:
        """The change naming these pods' jobs (a pod of no job: its namespace)."""
        jobs: set[JobRef] = set()
        namespaces: set[str] = set()
        for pod in pods:
            job = self.job_of_pod.get(pod)
            if job is not None:
                jobs.add(job)
            else:
                namespaces.add(pod[0])
        if not jobs and not namespaces:
            return Change()
        return Change(jobs=frozenset(jobs), namespaces=frozenset(namespaces), reasons=(reason,))

    # -- policies ----------------------------------------------------------------------------

    def index_policy(
        self, resource_name: str, key: ObjKey, *, old: Obj | None, new: Obj | None
    ) -> None:
        if old is not None:
            self.policies_in[key[0]].discard((resource_name, key))
        if new is not None:
            self.policies_in[key[0]].add((resource_name, key))
