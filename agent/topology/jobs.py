"""Group pods into training jobs: training jobs found from their pods, and configured groups.

JobSet pods (owned by the JobSet's batch Jobs) are recognised by `jobset.sigs.k8s.io/jobset-name`:
they belong to the JobSet, or to the kind materialised as it (a Kubeflow Trainer TrainJob) when
the JobSet's controller is one (or, the JobSet not in the state, a TrainJob of that name is).
Pods of replicated jobs outside the gang (initializers) belong to no job's gang and are left out.

Kubeflow pods are recognised by the `training.kubeflow.org/job-name` label or a controller owner
reference to a kind of the workload table (`agent.model.workload`); the kind comes from that owner,
from the owner chain of an mpi-operator v2beta1 launcher (pod -> batch Job `<job>-launcher` ->
MPIJob), from the operator-name label, or from a job object of that name. The job object, when
present, adds run policy, labels and status (a TrainJob's, the PodSets and TAS requests of its
JobSet's replicated jobs). Finished pods are dropped; a job with no live pod
yields no `Job`. Generic groups come from `GroupSpec`s: one group per namespace holding matching
pods. `find_jobs` can be limited to some namespaces (a scoped re-diagnosis). Called by
`agent.diagnosis`. Pure.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from agent.model.cluster import FINISHED_PHASES, ClusterState, OwnerRef, Pod
from agent.model.job import Job, JobRef
from agent.model.workload import (
    BATCH_JOB,
    KUBEFLOW_LABELS,
    JobKind,
    launched_kind,
    materialising,
    workload,
    workload_named,
    workload_of_operator,
)
from agent.settings import GroupSpec
from agent.topology.roles import completion_index, find_coordinator, replica_index, replica_type

GANG = KUBEFLOW_LABELS  # the labels every Kubeflow kind's pods carry
JOBSET = workload(JobKind.JOBSET)
JOBSET_NAME = JOBSET.labels.job_name


def jobset_kind(state: ClusterState, namespace: str, name: str) -> JobKind:
    """The kind the pods of JobSet `namespace/name` belong to: the kind materialised as a
    JobSet (TrainJob) when the JobSet's controller is one, or when the JobSet is not in the
    state but an object of that kind and name is; else the JobSet."""
    owner = materialising(JobKind.JOBSET)
    if owner is None:
        return JobKind.JOBSET
    obj = state.job_objects.get((JobKind.JOBSET, namespace, name))
    if obj is not None:
        controller = obj.controller
        owned = controller is not None and controller.kind == owner.kind.value
        return owner.kind if owned else JobKind.JOBSET
    return owner.kind if (owner.kind, namespace, name) in state.job_objects else JobKind.JOBSET


def _kind_from_owners(pod: Pod, state: ClusterState) -> tuple[JobKind, str] | None:
    owner = pod.controller
    if owner is None:
        return None
    found = workload_named(owner.kind)
    if found is not None and owner.api_version.startswith(f"{found.group}/"):
        return found.kind, owner.name
    launched = launched_kind()
    if launched is not None and owner.kind == BATCH_JOB.kind:
        # mpi-operator v2beta1 launcher: pod -> batch Job -> MPIJob
        batch = state.owned_objects.get((BATCH_JOB.kind, pod.namespace, owner.name))
        parent = batch.controller if batch is not None else None
        if parent is not None and parent.kind == launched.kind:
            return launched.kind, parent.name
    return None


def _identify(
    pod: Pod, state: ClusterState, *, names: Mapping[tuple[str, str], list[JobKind]]
) -> tuple[JobKind, str] | None:
    by_owner = _kind_from_owners(pod, state)
    if by_owner is not None:
        return by_owner
    jobset = pod.labels.get(JOBSET_NAME)
    if jobset:
        return jobset_kind(state, pod.namespace, jobset), jobset
    job_name = pod.labels.get(GANG.job_name)
    if not job_name:
        return None
    by_operator = workload_of_operator(pod.labels.get(GANG.operator or "", ""))
    if by_operator is not None:
        return by_operator.kind, job_name
    kinds = names.get((pod.namespace, job_name), [])
    if len(kinds) == 1:
        return kinds[0], job_name
    owner = pod.controller
    launched = launched_kind()
    if (launched is not None and launched.launcher_job is not None and owner is not None
            and owner.kind == BATCH_JOB.kind and owner.name == f"{job_name}{launched.launcher_job}"):
        # a launcher whose batch Job is not in the snapshot: mpi-operator names it <job>-launcher
        return launched.kind, job_name
    return None  # fmt: skip


# what identifies a pod's job, by value: its owners (one owner's fields, or the tuple) and the
# namespace, job-name, operator-name and JobSet-name labels
_ValueKey = (tuple[str, str, str, bool, str, str | None, str | None, str | None]
             | tuple[tuple[OwnerRef, ...], str, str | None, str | None, str | None])  # fmt: skip
_UNSEEN: list[Pod] = []  # a key not identified yet (never appended to)


def kubeflow_jobs(state: ClusterState, among: Iterable[Pod] | None = None) -> list[Job]:
    """Every Kubeflow job with at least one live pod, sorted by (namespace, kind, name).

    `among`: look only at these pods (default: all of `state.pods`); a job's pods share its
    namespace, so passing the pods of some namespaces yields exactly those namespaces' jobs.
    """
    names: dict[tuple[str, str], list[JobKind]] = {}
    for kind, ns, name in state.job_objects:
        names.setdefault((ns, name), []).append(kind)
    members: dict[tuple[JobKind, str, str], list[Pod]] = {}
    # a job's pods have equal owner references and the labels `_identify` reads, so each job is
    # identified once, not per pod: by the value of what it reads (one owner, the common case,
    # by its plain fields: a C-level hash and compare), each key to its job's pod list or None
    into: dict[_ValueKey, list[Pod] | None] = {}
    operator = GANG.operator or ""
    for pod in state.pods if among is None else among:
        owners = pod.owners
        if pod.phase in FINISHED_PHASES or (not owners and GANG.job_name not in pod.labels):
            continue
        labels, ns = pod.labels, pod.namespace
        job_label, op_label = labels.get(GANG.job_name), labels.get(operator)
        jobset_label = labels.get(JOBSET_NAME)
        key: _ValueKey
        if len(owners) == 1:
            one = owners[0]
            key = (one.kind, one.name, one.api_version, one.controller, ns, job_label, op_label,
                   jobset_label)  # fmt: skip
        else:
            key = (owners, ns, job_label, op_label, jobset_label)
        bucket = into.get(key, _UNSEEN)
        if bucket is _UNSEEN:
            found = _identify(pod, state, names=names)
            bucket = into[key] = (None if found is None
                                  else members.setdefault((found[0], ns, found[1]), []))  # fmt: skip
        if bucket is not None:
            bucket.append(pod)
    jobs = []
    for (kind, ns, name), pods in sorted(members.items()):
        gang = workload(kind).labels
        if gang.completion_index is not None:
            job = _replicated_job(state, JobRef(kind, ns, name), pods)
            if job is not None:
                jobs.append(job)
            continue
        types = {p.name: replica_type(p, name, gang) for p in pods}
        order = {}
        for p in pods:
            index = replica_index(p, gang)
            order[p.name] = (types[p.name], -1 if index is None else index, p.name)
        pods.sort(key=lambda p: order[p.name])
        jobs.append(
            Job(
                ref=JobRef(kind, ns, name),
                pods=tuple(pods),
                replica_types=types,
                coordinator=find_coordinator(kind, pods, types=types),
                obj=state.job_objects.get((kind, ns, name)),
            )
        )
    return jobs


def _replicated_job(state: ClusterState, ref: JobRef, pods: list[Pod]) -> Job | None:
    """A JobSet's (or a TrainJob's) job: its gang's live pods ordered by replicated job, Job
    index and completion index; None when only pods outside the gang are live."""
    found = workload(ref.kind)
    gang = found.labels
    spec_obj = state.job_objects.get((found.materialised or ref.kind, ref.namespace, ref.name))
    outside = found.templates.outside | (spec_obj.outside if spec_obj is not None else frozenset())
    types = {p.name: replica_type(p, ref.name, gang) for p in pods}
    members = [p for p in pods if types[p.name] not in outside]
    if not members:
        return None

    def order(p: Pod) -> tuple[str, int, int, str]:
        job_index, index = replica_index(p, gang), completion_index(p, gang)
        return (types[p.name], -1 if job_index is None else job_index,
                -1 if index is None else index, p.name)  # fmt: skip

    members.sort(key=order)
    replicas = (spec_obj.gang if spec_obj is not None and spec_obj.gang
                else tuple(dict.fromkeys(types[p.name] for p in members)))  # fmt: skip
    coordinator = find_coordinator(
        ref.kind, members, types=types, replicas=replicas,
        declared=spec_obj.coordinator if spec_obj is not None else None)  # fmt: skip
    port = (spec_obj.ports.get(types[coordinator.name])
            if spec_obj is not None and coordinator is not None else None)  # fmt: skip
    obj = state.job_objects.get((ref.kind, ref.namespace, ref.name))
    if obj is not None and spec_obj is not None and found.materialised is not None:
        # a TrainJob's PodSets (and their TAS requests) are its JobSet's replicated jobs
        obj = replace(obj, pod_sets=spec_obj.pod_sets, topology=spec_obj.topology,
                      pod_counts=spec_obj.pod_counts)  # fmt: skip
    return Job(ref=ref, pods=tuple(members), replica_types={p.name: types[p.name] for p in members},
               coordinator=coordinator, obj=obj, coordinator_port=port)


def _matches(labels: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in wanted.items())


def group_jobs(pods: Iterable[Pod], specs: Sequence[GroupSpec]) -> list[Job]:
    """One `Job` of kind Group per spec and namespace holding live pods matching its selector.

    Pods matching `coordinator` are coordinators (the first by name is the coordinator), pods
    matching `workers` are workers; other matching pods are ignored.
    """
    if not specs:
        return []
    live = [p for p in pods if p.live]
    jobs = []
    for spec in specs:
        by_ns: dict[str, list[Pod]] = {}
        for pod in live:
            if spec.namespace is not None and pod.namespace != spec.namespace:
                continue
            if _matches(pod.labels, spec.selector):
                by_ns.setdefault(pod.namespace, []).append(pod)
        for ns, candidates in sorted(by_ns.items()):
            types: dict[str, str] = {}
            for pod in sorted(candidates, key=lambda p: p.name):
                if _matches(pod.labels, spec.coordinator):
                    types[pod.name] = "coordinator"
                elif _matches(pod.labels, spec.workers):
                    types[pod.name] = "worker"
            if not types:
                continue
            members = sorted(
                (p for p in candidates if p.name in types),
                key=lambda p: (types[p.name] != "coordinator", p.name),
            )
            coordinator = members[0] if types[members[0].name] == "coordinator" else None
            controllers: dict[str, OwnerRef | None] = {p.name: p.controller for p in members}
            jobs.append(
                Job(
                    ref=JobRef(JobKind.GROUP, ns, spec.name),
                    pods=tuple(members),
                    replica_types=types,
                    coordinator=coordinator,
                    group_ports=tuple(spec.ports),
                    controllers=controllers,
                )
            )
    return jobs


def find_jobs(
    state: ClusterState,
    groups: Sequence[GroupSpec] = (),
    *,
    namespaces: Collection[str] | None = None,
    pods_in: Mapping[str, Sequence[Pod]] | None = None,
) -> list[Job]:
    """Kubeflow jobs and configured groups with at least one live pod.

    `namespaces`: only the jobs of these namespaces (one pass to pick their pods, then the same
    grouping as for the whole cluster); None: every namespace. `pods_in`: the state's pods by
    namespace, in state order, when the caller has them (no pass over every pod then).
    """
    if namespaces is None:
        return kubeflow_jobs(state) + group_jobs(state.pods, groups)
    wanted = frozenset(namespaces)
    if pods_in is not None:
        pods = [p for ns in sorted(wanted) for p in pods_in.get(ns, ())]
    else:
        pods = [p for p in state.pods if p.namespace in wanted]
    return kubeflow_jobs(state, pods) + group_jobs(pods, groups)


def _pods_by_namespace(pods: Iterable[Pod]) -> dict[str, list[Pod]]:
    out: dict[str, list[Pod]] = {}
    for pod in pods:
        members = out.get(pod.namespace)
        if members is None:
            out[pod.namespace] = members = []
        members.append(pod)
    return out


def changed_namespaces(before: ClusterState, after: ClusterState) -> set[str]:
    """The namespaces whose jobs `find_jobs` may find otherwise in `after` than in `before`:
    everything it reads is namespace-local (the pods of the namespace, in state order, and the
    job objects and owned objects named in it), so a namespace whose pods are the same objects
    in the same order and whose job and owned objects are equal has the same jobs."""
    out: set[str] = set()
    if after.pods is not before.pods:
        old, new = _pods_by_namespace(before.pods), _pods_by_namespace(after.pods)
        for ns in old.keys() | new.keys():
            a, b = old.get(ns, ()), new.get(ns, ())
            if len(a) != len(b) or not all(map(operator.is_, a, b)):
                out.add(ns)
    pairs: tuple[tuple[Mapping[tuple[Any, str, str], object],
                       Mapping[tuple[Any, str, str], object]], ...] = (
        (before.job_objects, after.job_objects), (before.owned_objects, after.owned_objects))
    for was, now in pairs:
        if was is not now:
            out.update(key[1] for key in was.keys() | now.keys() if was.get(key) != now.get(key))
    return out


def refind_jobs(state: ClusterState, groups: Sequence[GroupSpec] = (), *, jobs: Sequence[Job],
                changed: Collection[str]) -> list[Job]:  # fmt: skip
    """`find_jobs(state, groups)`, given `jobs`, what `find_jobs` found in an earlier state, and
    `changed`, the namespaces `changed_namespaces` names between the two: the earlier jobs of
    every other namespace kept, those of `changed` found again, in `find_jobs`'s order (Kubeflow
    jobs by kind, namespace and name, then groups spec by spec, namespace by namespace)."""
    if not changed:
        return list(jobs)
    spec = {g.name: i for i, g in enumerate(groups)}
    if len(spec) != len(groups):  # two specs of one name: their groups' order is not by name
        return find_jobs(state, groups)
    found = [j for j in jobs if j.ref.namespace not in changed]
    found += find_jobs(state, groups, namespaces=changed)
    return in_find_order(found, groups)


def in_find_order(jobs: Iterable[Job], groups: Sequence[GroupSpec]) -> list[Job]:
    """`jobs` (each namespace's in the order `find_jobs` found them) in `find_jobs`'s order:
    Kubeflow jobs by kind, namespace and name, then groups spec by spec (a name unknown to
    `groups` last), namespace by namespace."""
    every = list(jobs)
    spec = {g.name: i for i, g in enumerate(groups)}
    kubeflow = sorted((j for j in every if j.ref.kind is not JobKind.GROUP),
                      key=lambda j: (j.ref.kind.value, j.ref.namespace, j.ref.name))  # fmt: skip
    grouped = sorted((j for j in every if j.ref.kind is JobKind.GROUP),
                     key=lambda j: (spec.get(j.ref.name, len(spec)), j.ref.namespace))  # fmt: skip
    return kubeflow + grouped
