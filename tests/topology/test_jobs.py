"""Finding jobs from pods: labels, owner references, operator names, mpi-operator v2beta1, groups."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agent.model.cluster import ClusterState
from agent.model.workload import JobKind
from agent.settings import GroupSpec
from agent.topology.jobs import changed_namespaces, find_jobs, refind_jobs
from tests.support.objects import (
    JOB_NAME,
    JOB_ROLE,
    OPERATOR,
    job_pod,
    jobset,
    jobset_pod,
    node,
    pod,
    replicated_job,
    training_job,
    trainjob,
)
from tests.support.snapshots import load

N = [node("a1", "zone-a", gpus=8), node("b1", "zone-b", gpus=8)]


def _found(
    items: list[dict[str, Any]], groups: tuple[GroupSpec, ...] = ()
) -> dict[str, tuple[str, ...]]:
    jobs = find_jobs(load(N + items).state, groups)
    return {str(j.ref): tuple(p.name for p in j.pods) for j in jobs}


def _v2_launcher(job: str) -> dict[str, Any]:
    return pod(
        f"{job}-launcher-x7k2p",
        node_name="a1",
        labels={JOB_NAME: job, JOB_ROLE: "launcher", OPERATOR: "mpi-operator"},
        owner=("batch/v1", "Job", f"{job}-launcher"),
    )


def _v2_worker(job: str, i: int) -> dict[str, Any]:
    return pod(
        f"{job}-worker-{i}",
        node_name="b1",
        gpus=1,
        labels={
            JOB_NAME: job,
            JOB_ROLE: "worker",
            OPERATOR: "mpi-operator",
            "training.kubeflow.org/replica-index": str(i),
        },
        owner=("kubeflow.org/v2beta1", "MPIJob", job),
    )


LAUNCHER_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "mpi-launcher",
        "namespace": "ml",
        "ownerReferences": [
            {
                "apiVersion": "kubeflow.org/v2beta1",
                "kind": "MPIJob",
                "name": "mpi",
                "uid": "u",
                "controller": True,
            }
        ],
    },
}


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        # label + owner reference, pods ordered by replica type then index
        (
            [
                job_pod("PyTorchJob", "j", "worker", 1, node_name="a1"),
                job_pod("PyTorchJob", "j", "master", 0, node_name="a1"),
                job_pod("PyTorchJob", "j", "worker", 0, node_name="a1"),
            ],
            {"PyTorchJob/ml/j": ("j-master-0", "j-worker-0", "j-worker-1")},
        ),
        # operator-name label alone (no owner reference)
        (
            [
                pod(
                    "t-chief-0",
                    node_name="a1",
                    labels={JOB_NAME: "t", OPERATOR: "tfjob-controller"},
                )
            ],
            {"TFJob/ml/t": ("t-chief-0",)},
        ),
        # job-name label alone: the kind comes from the job object
        (
            [
                pod("x-master-0", node_name="a1", labels={JOB_NAME: "x"}),
                training_job("XGBoostJob", "x"),
            ],
            {"XGBoostJob/ml/x": ("x-master-0",)},
        ),
        # job-name label with nothing to tell the kind: not a job
        ([pod("y-master-0", node_name="a1", labels={JOB_NAME: "y"})], {}),
        # owner reference alone (no labels)
        (
            [pod("p-worker-0", node_name="a1", owner=("kubeflow.org/v1", "PaddleJob", "p"))],
            {"PaddleJob/ml/p": ("p-worker-0",)},
        ),
        # mpi-operator v2beta1: launcher owned by batch Job <job>-launcher owned by the MPIJob
        (
            [_v2_launcher("mpi"), _v2_worker("mpi", 0), _v2_worker("mpi", 1), LAUNCHER_JOB],
            {"MPIJob/ml/mpi": ("mpi-launcher-x7k2p", "mpi-worker-0", "mpi-worker-1")},
        ),
        # ... also when the batch Job is missing from the snapshot (name convention)
        (
            [
                pod(
                    "m-launcher-abc",
                    node_name="a1",
                    labels={JOB_NAME: "m"},
                    owner=("batch/v1", "Job", "m-launcher"),
                ),
                _v2_worker("m", 0),
            ],
            {"MPIJob/ml/m": ("m-launcher-abc", "m-worker-0")},
        ),
        # finished pods are dropped; a job with only finished pods yields nothing
        (
            [
                job_pod("PyTorchJob", "done", "master", 0, node_name="a1", phase="Succeeded"),
                job_pod("PyTorchJob", "half", "master", 0, node_name="a1", phase="Failed"),
                job_pod("PyTorchJob", "half", "worker", 0, node_name="a1"),
            ],
            {"PyTorchJob/ml/half": ("half-worker-0",)},
        ),
        # a job object with no pods yields nothing; plain pods are not jobs
        (
            [
                training_job("PyTorchJob", "ghost"),
                pod("nginx", node_name="a1", labels={"app": "nginx"}),
            ],
            {},
        ),
        # same name in two namespaces: two jobs
        (
            [
                job_pod("TFJob", "t", "chief", 0, node_name="a1"),
                job_pod("TFJob", "t", "chief", 0, node_name="a1", ns="other"),
            ],
            {"TFJob/ml/t": ("t-chief-0",), "TFJob/other/t": ("t-chief-0",)},
        ),
    ],
)
def test_kubeflow_jobs(items: list[dict[str, Any]], expected: dict[str, tuple[str, ...]]) -> None:
    assert _found(items) == expected


def test_job_object_adds_run_policy_and_labels() -> None:
    jobs = find_jobs(
        load(
            [
                *N,
                job_pod("PyTorchJob", "j", "master", 0, node_name="a1"),
                training_job(
                    "PyTorchJob",
                    "j",
                    labels={"kueue.x-k8s.io/queue-name": "q"},
                    run_policy={"suspend": False, "managedBy": "kubeflow.org/training-operator"},
                ),
            ]
        ).state
    )
    assert jobs[0].obj is not None
    assert jobs[0].obj.labels["kueue.x-k8s.io/queue-name"] == "q"
    assert jobs[0].obj.managed_by == "kubeflow.org/training-operator"


GROUP = GroupSpec(
    name="llm",
    namespace=None,
    selector={"app": "llm"},
    coordinator={"role": "coord"},
    workers={"role": "worker"},
    ports=[29500],
)


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (
            [
                pod("w2", node_name="a1", labels={"app": "llm", "role": "worker"}),
                pod("c", node_name="b1", labels={"app": "llm", "role": "coord"}),
                pod("w1", node_name="a1", labels={"app": "llm", "role": "worker"}),
                pod("side", node_name="a1", labels={"app": "llm", "role": "sidecar"}),
                pod("other", node_name="a1", labels={"app": "web", "role": "worker"}),
            ],
            {"Group/ml/llm": ("c", "w1", "w2")},
        ),
        # no namespace in the spec: one group per namespace
        (
            [
                pod("c", node_name="b1", labels={"app": "llm", "role": "coord"}),
                pod("c", ns="lab", node_name="b1", labels={"app": "llm", "role": "coord"}),
            ],
            {"Group/lab/llm": ("c",), "Group/ml/llm": ("c",)},
        ),
        # finished pods do not count
        ([pod("c", node_name="b1", phase="Succeeded", labels={"app": "llm", "role": "coord"})], {}),
    ],
)
def test_groups(items: list[dict[str, Any]], expected: dict[str, tuple[str, ...]]) -> None:
    assert _found(items, (GROUP,)) == expected


def test_group_namespace_filter_and_coordinator() -> None:
    spec = GroupSpec(
        name="llm",
        namespace="lab",
        selector={"app": "llm"},
        coordinator={"role": "coord"},
        workers={"role": "worker"},
    )
    jobs = find_jobs(
        load(
            [
                *N,
                pod("c", ns="lab", node_name="b1", labels={"app": "llm", "role": "coord"}),
                pod("w", ns="lab", node_name="a1", labels={"app": "llm", "role": "worker"}),
                pod("c", node_name="b1", labels={"app": "llm", "role": "coord"}),
            ]
        ).state,
        [spec],
    )
    assert [(str(j.ref), j.coordinator.name if j.coordinator else None) for j in jobs] == [
        ("Group/lab/llm", "c")
    ]
    assert jobs[0].ref.kind is JobKind.GROUP


# --- JobSet and Kubeflow Trainer v2 ---------------------------------------------------------

TORCH = [replicated_job("dataset-initializer", step="dataset-initializer"),
         replicated_job("node", nodes=3, gpus=4, ports=[("", 29500)], step="trainer")]
MPI_SET = [replicated_job("node", nodes=2, gpus=1, ports=[("ssh", 2222)]),
           replicated_job("launcher", step="trainer")]


def _torch_pods(name: str, *, initializer_phase: str = "Succeeded") -> list[dict[str, Any]]:
    return [jobset_pod(name, "dataset-initializer", 0, 0, node_name="b1", phase=initializer_phase),
            *(jobset_pod(name, "node", 0, i, node_name=("a1", "b1", "b1")[i], gpus=4,
                         ports=[("", 29500)]) for i in range(3))]


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        # the TrainJob's JobSet owns the Jobs: the pods are the TrainJob's
        ([trainjob("llm"), jobset("llm", TORCH, trainjob=True)], "TrainJob/ml/llm"),
        # the JobSet in the dump, its TrainJob not: the owner reference says whose
        ([jobset("llm", TORCH, trainjob=True)], "TrainJob/ml/llm"),
        # the TrainJob in the dump, its JobSet not
        ([trainjob("llm")], "TrainJob/ml/llm"),
        # a JobSet run on its own
        ([jobset("llm", TORCH)], "JobSet/ml/llm"),
        ([], "JobSet/ml/llm"),
    ],
    ids=["trainjob-and-jobset", "jobset-owned", "trainjob-only", "plain-jobset", "pods-only"],
)
def test_jobset_pods_belong_to_the_jobset_or_its_trainjob(
    objects: list[dict[str, Any]], expected: str
) -> None:
    found = _found(objects + _torch_pods("llm", initializer_phase="Running"))
    # a running initializer is outside the gang: no pod of the job
    assert found == {expected: ("llm-node-0-0-x00z", "llm-node-0-1-x01z", "llm-node-0-2-x02z")}


def _coordinator(items: list[dict[str, Any]]) -> tuple[str | None, dict[str, str]]:
    (job,) = find_jobs(load(N + items).state)
    return (job.coordinator.name if job.coordinator else None), dict(job.replica_types)


@pytest.mark.parametrize(
    ("items", "coordinator"),
    [
        # torch: rank 0 is node Job 0, completion index 0 (whatever the pod name order)
        ([trainjob("t"), jobset("t", TORCH, trainjob=True), *_torch_pods("t")], "t-node-0-0-x00z"),
        # rank 0 not live: no coordinator, never rank 1 in its place
        ([jobset("t", TORCH, trainjob=True), *_torch_pods("t")[2:]], None),
        # MPI: the launcher, even when another replicated job is named node
        ([jobset("m", MPI_SET, trainjob=True), jobset_pod("m", "node", 0, 0, node_name="a1"),
          jobset_pod("m", "node", 0, 1, node_name="a1"),
          jobset_pod("m", "launcher", 0, 0, node_name="b1")], "m-launcher-0-0-x00z"),
        # MPI, the launcher not started yet (it waits for the nodes): no coordinator
        ([jobset("m", MPI_SET, trainjob=True), jobset_pod("m", "node", 0, 0, node_name="a1")], None),
        # a JobSet naming its coordinator
        ([jobset("j", [replicated_job("workers", replicas=2, nodes=2)],
                 coordinator={"replicatedJob": "workers", "jobIndex": 1, "podIndex": 1}),
          *(jobset_pod("j", "workers", j, i, node_name="a1") for j in (0, 1) for i in (0, 1))],
         "j-workers-1-1-x11z"),
        # else the first replicated job's rank 0 (no `node` replicated job)
        ([jobset("j", [replicated_job("driver"), replicated_job("workers", nodes=2)]),
          jobset_pod("j", "workers", 0, 0, node_name="a1"),
          jobset_pod("j", "driver", 0, 0, node_name="b1")], "j-driver-0-0-x00z"),
        # no JobSet object: the replicated jobs its pods name, in name order
        ([jobset_pod("j", "workers", 0, 0, node_name="a1"),
          jobset_pod("j", "driver", 0, 0, node_name="b1")], "j-driver-0-0-x00z"),
        # the completion index only as an annotation (Kubernetes before 1.28): no rank 0 known
        ([jobset_pod("j", "node", 0, 0, node_name="a1", index_label=False)], None),
    ],
    ids=["torch-rank0", "rank0-gone", "mpi-launcher", "mpi-no-launcher-yet", "declared",
         "first-replicated-job", "no-object", "no-index-label"],
)
def test_the_coordinator_of_a_jobset_gang(items: list[dict[str, Any]], coordinator: str | None) -> None:
    found, types = _coordinator(items)
    assert found == coordinator
    assert "dataset-initializer" not in types.values()


def test_jobset_pods_are_ordered_by_replicated_job_job_index_and_completion_index() -> None:
    items = [jobset("j", [replicated_job("workers", replicas=2, nodes=2)]),
             *(jobset_pod("j", "workers", j, i, node_name="a1") for j in (1, 0) for i in (1, 0))]
    (job,) = find_jobs(load(N + items).state)
    assert [p.name for p in job.pods] == ["j-workers-0-0-x00z", "j-workers-0-1-x01z",
                                          "j-workers-1-0-x10z", "j-workers-1-1-x11z"]
    assert job.obj is not None and job.obj.gang == ("workers",)


def _cluster() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [*N]
    for ns in ("ml", "lab", "zoo"):
        items.append(training_job("PyTorchJob", "pt", ns=ns))
        items += [job_pod("PyTorchJob", "pt", rtype, i, node_name="a1", ns=ns)
                  for rtype, i in (("master", 0), ("worker", 0), ("worker", 1))]  # fmt: skip
        items += [job_pod("TFJob", "tf", "worker", i, node_name="b1", ns=ns) for i in range(2)]
        items += [pod("c", ns=ns, node_name="b1", labels={"app": "llm", "role": "coord"}),
                  pod("w", ns=ns, node_name="a1", labels={"app": "llm", "role": "worker"})]  # fmt: skip
    return items


def _changes(state: ClusterState) -> dict[str, tuple[ClusterState, set[str]]]:
    pods = state.pods
    relabelled = tuple(dataclasses.replace(p, labels={**p.labels, "app": "web"})
                       if (p.namespace, p.name) == ("lab", "w") else p for p in pods)  # fmt: skip
    moved = tuple(p for p in pods if (p.namespace, p.name) != ("zoo", "c")) + tuple(
        p for p in pods if (p.namespace, p.name) == ("zoo", "c"))  # the same pods, zoo reordered
    extra = load([*N, job_pod("TFJob", "tf", "worker", 0, node_name="b1", ns="new")]).state.pods
    without_ml = {k: v for k, v in state.job_objects.items() if k[1] != "ml"}
    return {
        "a pod deleted": (dataclasses.replace(state, pods=pods[1:]), {pods[0].namespace}),
        "a pod relabelled": (dataclasses.replace(state, pods=relabelled), {"lab"}),
        "pods reordered": (dataclasses.replace(state, pods=moved), {"zoo"}),
        "a namespace added": (dataclasses.replace(state, pods=pods + extra), {"new"}),
        "a job object gone": (dataclasses.replace(state, job_objects=without_ml), {"ml"}),
        "nothing": (dataclasses.replace(state), set()),
    }


@pytest.mark.parametrize("change", ["a pod deleted", "a pod relabelled", "pods reordered",
                                    "a namespace added", "a job object gone", "nothing"])  # fmt: skip
@pytest.mark.parametrize("groups", [(), (GROUP,)])
def test_refind_jobs_is_find_jobs(change: str, groups: tuple[GroupSpec, ...]) -> None:
    state = load(_cluster()).state
    after, expected = _changes(state)[change]
    jobs = find_jobs(state, groups)
    changed = changed_namespaces(state, after)
    assert changed == expected
    again = refind_jobs(after, groups, jobs=jobs, changed=changed)
    assert again == find_jobs(after, groups)
    kept = [j for j in jobs if j.ref.namespace not in changed]
    assert kept and all(any(j is k for k in again) for j in kept)  # reused, not found again


def test_refind_jobs_two_specs_of_one_name() -> None:
    other = dataclasses.replace(GROUP, selector={"app": "web"})
    state = load(_cluster()).state
    after = dataclasses.replace(state, pods=state.pods[1:])
    groups = (GROUP, other)
    jobs = find_jobs(state, groups)
    again = refind_jobs(after, groups, jobs=jobs, changed=changed_namespaces(state, after))
    assert again == find_jobs(after, groups)
