"""Group pods into training jobs: Kubeflow jobs found from their pods, and configured groups.

Kubeflow pods are recognised by the `training.kubeflow.org/job-name` label or a controller owner
reference to a kind of the workload table (`agent.model.workload`); the kind comes from that owner,
from the owner chain of an mpi-operator v2beta1 launcher (pod -> batch Job `<job>-launcher` ->
MPIJob), from the operator-name label, or from a job object of that name. The job object, when
present, adds run policy, labels and status. Finished pods are dropped; a job with no live pod
yields no `Job`. Generic groups come from `GroupSpec`s: one group per namespace holding matching
pods. `find_jobs` can be limited to some namespaces (a scoped re-diagnosis). Called by
`agent.diagnosis`. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from agent.model.cluster import FINISHED_PHASES, ClusterState, OwnerRef, Pod
from agent.model.job import Job, JobRef
from agent.model.workload import (
    BATCH_JOB,
    KUBEFLOW_LABELS,
    JobKind,
    launched_kind,
    workload,
    workload_named,
    workload_of_operator,
)
from agent.settings import GroupSpec
from agent.topology.roles import find_coordinator, replica_index, replica_type

GANG = KUBEFLOW_LABELS  # the labels every Kubeflow kind's pods carry


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


def kubeflow_jobs(state: ClusterState, among: Iterable[Pod] | None = None) -> list[Job]:
    """Every Kubeflow job with at least one live pod, sorted by (namespace, kind, name).

    `among`: look only at these pods (default: all of `state.pods`); a job's pods share its
    namespace, so passing the pods of some namespaces yields exactly those namespaces' jobs.
    """
    names: dict[tuple[str, str], list[JobKind]] = {}
    for kind, ns, name in state.job_objects:
        names.setdefault((ns, name), []).append(kind)
    members: dict[tuple[JobKind, str, str], list[Pod]] = {}
    # a job's pods share their owner references (one tuple: the cache and the snapshot reader
    # share them) and the labels `_identify` reads, so each job is identified once, not per pod;
    # the entry holds the owners it was made for (identity compared: never a reused id)
    seen: dict[tuple[int, str, str | None, str | None], tuple[object, tuple[JobKind, str] | None]] = {}
    operator = GANG.operator or ""
    for pod in state.pods if among is None else among:
        if pod.phase in FINISHED_PHASES or (not pod.owners and GANG.job_name not in pod.labels):
            continue
        labels = pod.labels
        memo = (id(pod.owners), pod.namespace, labels.get(GANG.job_name), labels.get(operator))
        known = seen.get(memo)
        if known is not None and known[0] is pod.owners:
            found = known[1]
        else:
            found = _identify(pod, state, names=names)
            seen[memo] = (pod.owners, found)
        if found is None:
            continue
        kind, job_name = found
        members.setdefault((kind, pod.namespace, job_name), []).append(pod)
    jobs = []
    for (kind, ns, name), pods in sorted(members.items()):
        gang = workload(kind).labels
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
