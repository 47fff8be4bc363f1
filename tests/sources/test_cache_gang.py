"""Gang completion: the cache flags the watch event that binds a job's last expected pod (Kubeflow
replica counts; a generic group's Deployments and batch Jobs), and nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.job import JobRef
from agent.model.workload import JobKind
from agent.settings import GroupSpec
from agent.sources.cache import ClusterCache
from agent.sources.change import Change, EventType
from agent.sources.resources import RESOURCES
from agent.sources.slim import slimmer
from tests.support import objects
from tests.support.objects import JOB_NAME

R = {r.name: r for r in RESOURCES}
PODS, PYTORCH = R["pods"], R["pytorchjobs.v1.kubeflow.org"]
DEPLOYMENTS, REPLICASETS, BATCH = R["deployments.v1.apps"], R["replicasets.v1.apps"], R["jobs.v1.batch"]
BERT = JobRef(JobKind.PYTORCH, "ml", "bert")


def pytorchjob(workers: Any = 2) -> dict[str, Any]:
    """PyTorchJob `bert`: one master and `workers` workers (None: no worker replica spec)."""
    specs: dict[str, Any] = {"Master": {"replicas": 1}}
    if workers is not None:
        specs["Worker"] = {"replicas": workers}
    return objects.training_job("PyTorchJob", "bert", replicas=specs, status=False)


def member(name: str, *, node: str | None = None, labels: dict[str, str] | None = None,
           owner: tuple[str, str] | None = ("PyTorchJob", "bert"), phase: str = "Pending",
           ns: str = "ml", deleting: bool = False) -> dict[str, Any]:
    """A pod controlled by `owner` (kind, name; a PyTorchJob's pods carry its job-name label)."""
    job_label = {JOB_NAME: owner[1]} if owner is not None and owner[0] == "PyTorchJob" else {}
    refs = [{"kind": owner[0], "name": owner[1], "controller": True}] if owner is not None else None
    return objects.pod(name, ns=ns, node_name=node, labels={**(labels or {}), **job_label},
                       owner_refs=refs, deleting=deleting, containers=[], phase=phase, kind=False)


@pytest.fixture
def bert() -> tuple[ClusterCache, list[Change]]:
    seen: list[Change] = []
    c = ClusterCache(on_change=seen.append)
    c.replace(PYTORCH, [pytorchjob(2)])
    c.replace(PODS, [member("bert-master-0"), member("bert-worker-0"), member("bert-worker-1")])
    seen.clear()
    return c, seen


def test_only_the_last_bind_completes_the_gang(bert: tuple[ClusterCache, list[Change]]) -> None:
    c, seen = bert
    c.apply(PODS, EventType.MODIFIED, member("bert-worker-0", node="n1"))
    c.apply(PODS, EventType.MODIFIED, member("bert-worker-1", node="n1"))
    assert [s.gang_complete for s in seen] == [False, False]
    c.apply(PODS, EventType.MODIFIED, member("bert-master-0", node="n2"))
    assert seen[-1].gang_complete and seen[-1].jobs == frozenset({BERT})
    # after the gang is complete: a relabel or a phase change is an ordinary change
    c.apply(PODS, EventType.MODIFIED, member("bert-master-0", node="n2", labels={"zone": "b"}))
    assert seen[-1] and not seen[-1].gang_complete


def test_a_gang_awaiting_its_labels_completes_again_on_each_label_or_phase_update(
    bert: tuple[ClusterCache, list[Change]],
) -> None:
    c, seen = bert
    for name in ("bert-worker-0", "bert-worker-1", "bert-master-0"):
        c.apply(PODS, EventType.MODIFIED, member(name, node="n1"))
    assert seen[-1].gang_complete
    c.await_labels([BERT])  # the pipeline: diagnosed before the zone labels were written
    c.apply(PODS, EventType.MODIFIED, member("bert-worker-0", node="n1", labels={"zone": "a"}))
    assert seen[-1].gang_complete and seen[-1].jobs == frozenset({BERT})
    # its start settles the verdict as well (a label not written by then will not be)
    phase_only = c.apply(PODS, EventType.MODIFIED, member("bert-worker-0", node="n1",
                                                       labels={"zone": "a"}, phase="Running"))
    assert phase_only.gang_complete and phase_only.jobs == frozenset({BERT})
    c.labels_settled([BERT])  # the pipeline: recorded with every label in place
    c.apply(PODS, EventType.MODIFIED, member("bert-worker-1", node="n1", labels={"zone": "a"}))
    assert not seen[-1].gang_complete


def test_pods_that_do_not_count(bert: tuple[ClusterCache, list[Change]]) -> None:
    c, seen = bert
    c.apply(PODS, EventType.MODIFIED, member("bert-worker-0", node="n1"))
    c.apply(PODS, EventType.MODIFIED, member("bert-worker-1", node="n1", phase="Failed"))
    c.apply(PODS, EventType.MODIFIED, member("bert-master-0", node="n1", deleting=True))
    assert not any(s.gang_complete for s in seen)
    # the replacement pod of the failed worker binds: 3 of 3 live again... but the master is
    # deleting, so still 2 of 3
    c.apply(PODS, EventType.ADDED, member("bert-worker-1b", node="n1"))
    assert not seen[-1].gang_complete


def test_a_relist_is_never_a_gang_completion() -> None:
    seen: list[Change] = []
    c = ClusterCache(on_change=seen.append)
    c.replace(PYTORCH, [pytorchjob(1)])
    c.replace(PODS, [member("bert-master-0", node="n1"), member("bert-worker-0", node="n1")])
    assert seen[-1].jobs == frozenset({BERT}) and not seen[-1].gang_complete


def test_unknown_expected_count_keeps_the_debounce() -> None:
    seen: list[Change] = []
    c = ClusterCache(on_change=seen.append)  # no job object cached: nothing known to expect
    c.apply(PODS, EventType.ADDED, member("bert-master-0", node="n1"))
    assert seen[-1].jobs == frozenset({BERT}) and not seen[-1].gang_complete


def test_the_job_object_arriving_last_completes_the_gang() -> None:
    seen: list[Change] = []
    c = ClusterCache(on_change=seen.append)
    c.apply(PODS, EventType.ADDED, member("bert-master-0", node="n1"))
    c.apply(PODS, EventType.ADDED, member("bert-worker-0", node="n1"))
    c.apply(PYTORCH, EventType.ADDED, pytorchjob(1))
    assert seen[-1].gang_complete
    c.apply(PYTORCH, EventType.MODIFIED, {**pytorchjob(1), "status": {"conditions": []}})
    assert not any(s.gang_complete for s in seen[3:])


LAB = GroupSpec(name="llm", namespace="lab", selector={"app": "llm"},
                coordinator={"role": "coordinator"}, workers={"role": "worker"})


def workload(name: str, spec: dict[str, Any], *, labels: dict[str, str] | None = None,
             owner: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "lab"}
    if owner:
        meta["ownerReferences"] = [{"kind": "Deployment", "name": owner, "controller": True}]
    template = {"metadata": {"labels": labels if labels is not None else {"app": "llm"}}}
    return {"metadata": meta, "spec": {**spec, "template": template}}


def lab_cache(seen: list[Change], groups: tuple[GroupSpec, ...] = (LAB,)) -> ClusterCache:
    c = ClusterCache(on_change=seen.append, groups=groups)
    c.replace(DEPLOYMENTS, [workload("coord", {"replicas": 1})])
    c.replace(REPLICASETS, [workload("coord-5d", {"replicas": 1}, owner="coord")])  # via its Deployment
    c.replace(BATCH, [workload("workers", {"parallelism": 2, "completions": 2}),
                      workload("other", {"parallelism": 9}, labels={"app": "web"})])
    c.replace(PODS, [])
    seen.clear()
    return c


def lab_pod(name: str, node: str | None = None, owner: tuple[str, str] = ("Job", "workers")) -> dict[str, Any]:
    return member(name, node=node, owner=owner, ns="lab", labels={"app": "llm"})


def test_a_generic_group_completes_when_its_workloads_pods_are_bound() -> None:
    seen: list[Change] = []
    c = lab_cache(seen)
    c.apply(PODS, EventType.ADDED, lab_pod("workers-a", "n1"))
    c.apply(PODS, EventType.ADDED, lab_pod("coord-5d-x", "n2", owner=("ReplicaSet", "coord-5d")))
    c.apply(PODS, EventType.ADDED, member("web-1", node="n1", owner=None, ns="lab", labels={"app": "web"}))
    assert not any(s.gang_complete for s in seen)
    c.apply(PODS, EventType.ADDED, lab_pod("workers-b", "n1"))
    assert seen[-1].gang_complete and seen[-1].namespaces == frozenset({"lab"})


def test_no_group_configured_means_no_gang_for_loose_pods() -> None:
    seen: list[Change] = []
    c = lab_cache(seen, groups=())
    for name in ("workers-a", "workers-b"):
        c.apply(PODS, EventType.ADDED, lab_pod(name, "n1"))
    c.apply(PODS, EventType.ADDED, lab_pod("coord-5d-x", "n2", owner=("ReplicaSet", "coord-5d")))
    assert seen and not any(s.gang_complete for s in seen)


# --- TrainJob and JobSet: pods of the JobSet's batch Jobs -----------------------------------

TRAINJOBS, JOBSETS = R["trainjobs.v1alpha1.trainer.kubeflow.org"], R["jobsets.v1alpha2.jobset.x-k8s.io"]
LLM = JobRef(JobKind.TRAINJOB, "ml", "llm")
LLM_SET = JobRef(JobKind.JOBSET, "ml", "llm")
TORCH_SET = [objects.replicated_job("dataset-initializer", step="dataset-initializer"),
             objects.replicated_job("node", nodes=3, gpus=4, step="trainer")]


def _slim(resource: Any, obj: dict[str, Any]) -> dict[str, Any]:
    return slimmer(resource)(obj)


def rank(rjob: str, index: int, *, node: str | None = None, phase: str | None = None) -> dict[str, Any]:
    return _slim(PODS, objects.jobset_pod("llm", rjob, 0, index, node_name=node, phase=phase))


@pytest.fixture
def llm() -> tuple[ClusterCache, list[Change]]:
    """TrainJob `llm` (three torch nodes, a dataset initializer) with its JobSet cached, the
    initializer done, the nodes pending."""
    seen: list[Change] = []
    c = ClusterCache(on_change=seen.append)
    c.replace(TRAINJOBS, [_slim(TRAINJOBS, objects.trainjob("llm", nodes=3))])
    c.replace(JOBSETS, [_slim(JOBSETS, objects.jobset("llm", TORCH_SET, trainjob=True))])
    c.replace(PODS, [rank("dataset-initializer", 0, node="c1", phase="Succeeded"),
                     *(rank("node", i) for i in range(3))])
    seen.clear()
    return c, seen


def test_a_trainjob_gang_completes_at_the_last_node_bound(llm: tuple[ClusterCache, list[Change]]) -> None:
    c, seen = llm
    assert c.job_of_pod("ml", "llm-node-0-0-x00z") == LLM
    assert c.job_of_pod("ml", "llm-dataset-initializer-0-0-x00z") == LLM
    assert LLM_SET not in c.job_keys() and LLM in c.job_keys()
    for i in (2, 0):
        c.apply(PODS, EventType.MODIFIED, rank("node", i, node="a1"))
    assert [s.gang_complete for s in seen] == [False, False]
    c.apply(PODS, EventType.MODIFIED, rank("node", 1, node="b1"))
    # numNodes pods of `node`: the initializer is neither expected nor counted
    assert seen[-1].gang_complete and seen[-1].jobs == frozenset({LLM})


def test_a_running_initializer_does_not_complete_the_gang(llm: tuple[ClusterCache, list[Change]]) -> None:
    c, seen = llm
    c.apply(PODS, EventType.MODIFIED, rank("dataset-initializer", 0, node="c1", phase="Running"))
    for i in (0, 1):
        c.apply(PODS, EventType.MODIFIED, rank("node", i, node="a1"))
    assert not any(s.gang_complete for s in seen)
    c.apply(PODS, EventType.MODIFIED, rank("node", 2, node="a1"))
    assert seen[-1].gang_complete


def test_a_jobset_change_names_its_trainjob(llm: tuple[ClusterCache, list[Change]]) -> None:
    c, seen = llm
    c.apply(JOBSETS, EventType.MODIFIED,
            _slim(JOBSETS, objects.jobset("llm", TORCH_SET, trainjob=True, suspend=True)))
    assert seen[-1].jobs == frozenset({LLM})


def test_pods_seen_before_their_jobset_move_to_the_trainjob_when_it_arrives() -> None:
    seen: list[Change] = []
    c = ClusterCache(on_change=seen.append)
    c.replace(PODS, [rank("node", i, node="a1") for i in range(3)])
    assert c.job_of_pod("ml", "llm-node-0-0-x00z") == LLM_SET  # nothing says whose yet
    seen.clear()
    c.apply(JOBSETS, EventType.ADDED, _slim(JOBSETS, objects.jobset("llm", TORCH_SET, trainjob=True)))
    assert c.job_of_pod("ml", "llm-node-0-0-x00z") == LLM
    assert c.pods_of_job(LLM_SET) == [] and len(c.pods_of_job(LLM)) == 3
    # the JobSet brings the counts: its arrival completes the gang already bound
    assert seen[-1].jobs == frozenset({LLM, LLM_SET}) and seen[-1].gang_complete


def test_a_plain_jobset_gang_is_replicas_times_parallelism() -> None:
    seen: list[Change] = []
    c = ClusterCache(on_change=seen.append)
    c.replace(JOBSETS, [_slim(JOBSETS, objects.jobset(
        "ddp", [objects.replicated_job("workers", replicas=2, nodes=2)]))])
    pods = [objects.jobset_pod("ddp", "workers", j, i, node_name=None) for j in (0, 1) for i in (0, 1)]
    c.replace(PODS, [_slim(PODS, p) for p in pods])
    seen.clear()
    for p in pods:
        p["spec"]["nodeName"], p["status"]["phase"] = "a1", "Running"
        c.apply(PODS, EventType.MODIFIED, _slim(PODS, p))
    assert [s.gang_complete for s in seen] == [False, False, False, True]
    assert seen[-1].jobs == frozenset({JobRef(JobKind.JOBSET, "ml", "ddp")})
