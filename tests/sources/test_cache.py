"""The cluster cache: indexes, namespace filters, and which jobs each change affects."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.job import JobRef
from agent.model.workload import JobKind
from agent.settings import NamespaceFilter
from agent.sources.cache import ClusterCache
from agent.sources.change import Change
from agent.sources.resources import RESOURCES
from tests.support import objects
from tests.support.objects import JOB_NAME

R = {r.name: r for r in RESOURCES}
PODS, NODES, NAMESPACES = R["pods"], R["nodes"], R["namespaces"]
CNP = R["ciliumnetworkpolicies.v2.cilium.io"]
CCNP = R["ciliumclusterwidenetworkpolicies.v2.cilium.io"]
PYTORCH = R["pytorchjobs.v1.kubeflow.org"]
BATCH = R["jobs.v1.batch"]

RESNET = JobRef(JobKind.PYTORCH, "ml", "resnet")


def member(name: str, *, ns: str = "ml", job: str | None = "resnet", node: str | None = "n1", labels: dict[str, str] | None = None, owner: str = "PyTorchJob", **kw: Any) -> dict[str, Any]:
    """A running pod of `job` (its job-name label and a controller reference of kind `owner`);
    `job=None`: a pod of no job."""
    refs = [{"kind": owner, "name": job, "controller": True}] if job else None
    return objects.pod(name, ns=ns, node_name=node, labels={**(labels or {}), **({JOB_NAME: job} if job else {})},
                       owner_refs=refs, **{"containers": [], "phase": "Running", **kw})


def gpu_pod(name: str, *, node: str | None = "n1", phase: str = "Running", **kw: Any) -> dict[str, Any]:
    return member(name, node=node, phase=phase, containers=[objects.container(name="c", gpus=1)], **kw)


def test_a_pod_freeing_gpus_is_a_capacity_change() -> None:
    """A pod that held GPUs and stops counting (finished, deleting, deleted) may make room for a
    job waiting elsewhere: its change says so; a pod without GPUs, or a GPU pod bound, does not."""
    c = ClusterCache()
    assert not c.apply(R["pods"], "ADDED", gpu_pod("resnet-worker-0")).capacity
    assert not c.apply(R["pods"], "ADDED", member("resnet-master-0")).capacity
    assert not c.apply(R["pods"], "DELETED", member("resnet-master-0")).capacity
    assert c.apply(R["pods"], "MODIFIED", gpu_pod("resnet-worker-0", phase="Succeeded")).capacity
    c.apply(R["pods"], "ADDED", gpu_pod("web-1", job=None))
    deleting = gpu_pod("web-1", job=None)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    freed = c.apply(R["pods"], "MODIFIED", deleting)
    assert freed.capacity and freed.namespaces == {"ml"}
    c.apply(R["pods"], "ADDED", gpu_pod("resnet-worker-1"))
    assert c.apply(R["pods"], "DELETED", gpu_pod("resnet-worker-1")).capacity


def test_the_pods_of_a_job_awaiting_its_labels_report_their_start() -> None:
    """A job whose verdict waits for its zone-mirroring labels: its pods' start (Pending ->
    Running) and label writes complete the gang again (diagnosed at once); other jobs' starts
    stay unseen; a generic group is awaited by its namespace."""
    c = ClusterCache()
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "resnet", "namespace": "ml"},
           "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1}}}}
    c.apply(R["pytorchjobs.v1.kubeflow.org"], "ADDED", job)
    c.apply(R["pods"], "ADDED", gpu_pod("resnet-worker-0", phase="Pending"))
    c.apply(R["pods"], "ADDED", gpu_pod("web-1", job=None, phase="Pending"))
    assert c.apply(R["pods"], "MODIFIED", gpu_pod("resnet-worker-0")) == Change()  # not awaited
    c.apply(R["pods"], "MODIFIED", gpu_pod("resnet-worker-0", phase="Pending"))
    c.await_labels([RESNET, JobRef(JobKind.GROUP, "ml", "web")])
    started = c.apply(R["pods"], "MODIFIED", gpu_pod("resnet-worker-0"))
    assert started.jobs == {RESNET} and started.gang_complete
    labelled = c.apply(R["pods"], "MODIFIED", gpu_pod("resnet-worker-0", labels={"zone": "a"}))
    assert labelled.gang_complete
    group = c.apply(R["pods"], "MODIFIED", gpu_pod("web-1", job=None))
    assert group.namespaces == {"ml"} and group.gang_complete
    c.labels_settled([RESNET, JobRef(JobKind.GROUP, "ml", "web")])
    assert not c.apply(R["pods"], "MODIFIED", gpu_pod("resnet-worker-0", labels={"zone": "b"})).gang_complete
    assert c.apply(R["pods"], "MODIFIED", gpu_pod("web-1", job=None, phase="Pending")) == Change()


def policy(name: str, ns: str | None = "ml", rule: str = "a") -> dict[str, Any]:
    meta = {"name": name} | ({"namespace": ns} if ns else {})
    return {"kind": "CiliumNetworkPolicy", "metadata": meta, "spec": {"rule": rule}}


@pytest.fixture
def cache() -> tuple[ClusterCache, list[Change]]:
    seen: list[Change] = []
    c = ClusterCache(on_change=seen.append)
    c.replace(NODES, [objects.node("n1", "a"), objects.node("n2", "b")])
    c.replace(NAMESPACES, [{"metadata": {"name": "ml", "labels": {"t": "1"}}}])
    c.replace(PODS, [member("resnet-master-0"), member("resnet-worker-0", node="n2"), member("web-1", job=None)])
    c.replace(CNP, [policy("p1")])
    seen.clear()
    return c, seen


def test_indexes(cache: tuple[ClusterCache, list[Change]]) -> None:
    c, _ = cache
    assert c.job_of_pod("ml", "resnet-worker-0") == RESNET
    assert [p["metadata"]["name"] for p in c.pods_of_job(RESNET)] == ["resnet-master-0", "resnet-worker-0"]
    assert c.jobs_named("ml", "resnet") == [RESNET]
    assert [p["metadata"]["name"] for p in c.policies_in("ml")] == ["p1"]
    assert RESNET in c.job_keys()


@pytest.mark.parametrize(
    ("resource", "event", "obj", "expected"),
    [
        # a pod bound / rebound / relabelled -> its job(s)
        ("pods", "ADDED", member("resnet-worker-1", node="n1"), Change(jobs=frozenset({RESNET}))),
        ("pods", "MODIFIED", member("resnet-worker-0", node="n1"), Change(jobs=frozenset({RESNET}))),
        ("pods", "MODIFIED", member("resnet-worker-0", node="n2"), Change()),  # nothing the diagnosis sees
        ("pods", "MODIFIED", {**member("resnet-worker-0", node="n2"), "status": {"phase": "Pending"}}, Change()),  # live -> live
        ("pods", "MODIFIED", {**member("resnet-worker-0", node="n2"), "status": {"phase": "Succeeded"}}, Change(jobs=frozenset({RESNET}))),
        ("pods", "MODIFIED", member("resnet-worker-0", node="n2", job="other"), Change(jobs=frozenset({RESNET, JobRef(JobKind.PYTORCH, "ml", "other")}))),
        ("pods", "DELETED", member("resnet-worker-0"), Change(jobs=frozenset({RESNET}))),
        ("pods", "DELETED", member("ghost"), Change()),
        # a pod of no job -> its namespace (generic groups)
        ("pods", "MODIFIED", member("web-1", job=None, labels={"app": "x"}), Change(namespaces=frozenset({"ml"}))),
        # policies: namespace; cluster-wide: everything
        ("ciliumnetworkpolicies.v2.cilium.io", "MODIFIED", policy("p1", rule="b"), Change(namespaces=frozenset({"ml"}))),
        ("ciliumnetworkpolicies.v2.cilium.io", "MODIFIED", policy("p1"), Change()),
        ("ciliumclusterwidenetworkpolicies.v2.cilium.io", "ADDED", policy("c1", None), Change(everything=True)),
        # node labels -> jobs with pods there (and namespaces of group pods there); a node added
        # or changed may have room for a job elsewhere (capacity)
        ("nodes", "MODIFIED", objects.node("n2", "c"), Change(jobs=frozenset({RESNET}), capacity=True)),
        ("nodes", "MODIFIED", objects.node("n1", "c"), Change(jobs=frozenset({RESNET}), namespaces=frozenset({"ml"}), capacity=True)),
        ("nodes", "ADDED", objects.node("n3", "c"), Change(capacity=True)),
        ("nodes", "DELETED", objects.node("n3", "c"), Change()),
        # namespace labels -> everything (policies select namespaces by label)
        ("namespaces", "MODIFIED", {"metadata": {"name": "ml", "labels": {"t": "2"}}}, Change(everything=True)),
        # the job object itself
        ("pytorchjobs.v1.kubeflow.org", "ADDED", {"metadata": {"name": "resnet", "namespace": "ml"}}, Change(jobs=frozenset({RESNET}))),
        # owners: nothing
        ("jobs.v1.batch", "ADDED", {"metadata": {"name": "x-launcher", "namespace": "ml"}}, Change()),
    ],
)
def test_change_affects(
    cache: tuple[ClusterCache, list[Change]], resource: str, event: str, obj: dict[str, Any], expected: Change
) -> None:
    c, seen = cache
    change = c.apply(R[resource], event, obj)
    assert change == expected
    assert seen == ([expected] if expected else [])


def test_relist_reports_only_differences(cache: tuple[ClusterCache, list[Change]]) -> None:
    c, seen = cache
    c.replace(PODS, [member("resnet-master-0"), member("web-1", job=None)])  # worker vanished while we were away
    assert seen == [Change(jobs=frozenset({RESNET}))]
    assert c.job_of_pod("ml", "resnet-worker-0") is None
    assert c.keys("pods") == {("ml", "resnet-master-0"), ("ml", "web-1")}


def test_namespace_filter() -> None:
    c = ClusterCache(namespaces=NamespaceFilter(include=["ml", "nlp"], exclude=["nlp"]))
    c.replace(PODS, [member("a-0", ns="ml"), member("b-0", ns="nlp"), member("c-0", ns="web")])
    c.replace(NODES, [objects.node("n1", "a")])
    assert c.keys("pods") == {("ml", "a-0")}
    assert c.count("nodes") == 1


def test_mpi_launcher_kind_through_the_operator_label_or_batch_owner() -> None:
    c = ClusterCache()
    launcher = member("m-launcher-abc", job="m", owner="Job")
    launcher["metadata"]["ownerReferences"][0]["name"] = "m-launcher"
    c.replace(BATCH, [{"metadata": {"name": "m-launcher", "namespace": "ml", "ownerReferences": [{"kind": "MPIJob", "name": "m", "controller": True}]}}])
    c.apply(PODS, "ADDED", launcher)
    assert c.job_of_pod("ml", "m-launcher-abc") == JobRef(JobKind.MPI, "ml", "m")
    labelled = member("t-launcher", job="t", owner="Job")
    labelled["metadata"]["labels"]["training.kubeflow.org/operator-name"] = "mpi-operator"
    c.apply(PODS, "ADDED", labelled)
    assert c.job_of_pod("ml", "t-launcher") == JobRef(JobKind.MPI, "ml", "t")


def test_synced_only_when_every_expected_resource_listed() -> None:
    c = ClusterCache()
    c.expect([PODS, NODES])
    assert not c.synced
    c.replace(PODS, [])
    assert not c.synced
    c.replace(NODES, [])
    assert c.synced


def test_snapshot_limits_namespaced_objects(cache: tuple[ClusterCache, list[Change]]) -> None:
    c, _ = cache
    c.apply(PODS, "ADDED", member("x-0", ns="other", job="x"))
    names = {o["metadata"]["name"] for o in c.snapshot({"other"})}
    assert "x-0" in names and "n1" in names and "resnet-master-0" not in names
    assert len(c.snapshot()) == len(c.snapshot({"ml", "other"}))
