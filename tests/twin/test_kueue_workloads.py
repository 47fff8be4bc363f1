"""Workloads of jobs: name, pod sets per kind, topology requests, matching, admission in templates."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

from agent.twin.kueue_jobs import BATCH_JOB, KINDS, suspend_patch
from agent.twin.kueue_workloads import (
    PodSetInfo,
    PodSetInfoConflictError,
    build,
    info_from_admission,
    info_from_pod_set,
    same_pod_sets,
    start_patch,
    stop_patch,
    topology_request,
    workload_name,
)
from agent.twin.patch import merge_patch
from tests.support import objects

PYTORCH = next(k for k in KINDS if k.framework == "kubeflow.org/pytorchjob")
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
GROUP = "kueue.x-k8s.io/podset-group-name"
INDEX = "training.kubeflow.org/replica-index"
ZONE = "topology.kubernetes.io/zone"


def pytorchjob(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """PyTorchJob `bert`, suspended and queued: a master and three workers (`annotations` on
    their pod templates)."""
    def replica(count: int) -> dict[str, Any]:
        return objects.replica(count, {"containers": [{"name": "pytorch", "image": "img:1"}]},
                               labels={"app": "t"}, annotations=annotations or None, restart_policy=None)

    return objects.training_job("PyTorchJob", "bert", uid="u-1", status=False,
                                labels={"kueue.x-k8s.io/queue-name": "user-queue"},
                                run_policy={"suspend": True},
                                replicas={"Master": replica(1), "worker": replica(3)})


def test_the_workload_name_is_kind_job_and_a_hash_of_kind_group_name_and_uid() -> None:
    digest = hashlib.sha1(b"PyTorchJob\nkubeflow.org\nbert\nu-1").hexdigest()[:5]
    assert workload_name(PYTORCH, "bert", "u-1") == f"pytorchjob-bert-{digest}"
    assert workload_name(PYTORCH, "bert", "u-2") != workload_name(PYTORCH, "bert", "u-1")
    assert workload_name(BATCH_JOB, "x" * 300, "u")[-6:-5] == "-"
    assert len(workload_name(BATCH_JOB, "x" * 300, "u")) == 253


def test_a_pytorchjob_has_one_pod_set_per_replica_type_in_lower_case() -> None:
    workload = build(PYTORCH, pytorchjob())
    assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [("master", 1),
                                                                                 ("worker", 3)]
    assert workload["spec"]["podSets"][0]["topologyRequest"] == {"podIndexLabel": INDEX}
    meta = workload["metadata"]
    assert meta["labels"] == {"kueue.x-k8s.io/job-uid": "u-1"}
    assert meta["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]
    assert meta["ownerReferences"][0]["kind"] == "PyTorchJob" and meta["ownerReferences"][0][
        "controller"]
    assert workload["spec"]["queueName"] == "user-queue" and workload["spec"]["active"] is True


def test_a_batch_job_has_one_pod_set_main() -> None:
    job = {"metadata": {"name": "j", "uid": "u"},
           "spec": {"parallelism": 4, "completions": 3, "template": {"spec": {}}}}  # fmt: skip
    [pod_set] = build(BATCH_JOB, job)["spec"]["podSets"]
    assert (pod_set["name"], pod_set["count"]) == ("main", 3)
    assert pod_set["topologyRequest"] == {"podIndexLabel": "batch.kubernetes.io/job-completion-index"}


@pytest.mark.parametrize(("annotations", "expected"), [
    ({}, {"podIndexLabel": INDEX}),
    ({REQUIRED: ZONE}, {"required": ZONE, "podIndexLabel": INDEX}),
    ({PREFERRED: ZONE, GROUP: "g"}, {"preferred": ZONE, "podIndexLabel": INDEX,
                                     "podSetGroupName": "g"}),
    ({REQUIRED: ZONE, PREFERRED: "x"}, {"required": ZONE, "podIndexLabel": INDEX}),
    ({UNCONSTRAINED: "true", GROUP: "g"}, {"unconstrained": True, "podIndexLabel": INDEX}),
    ({GROUP: "g"}, {"podIndexLabel": INDEX}),
])  # fmt: skip
def test_the_topology_request_follows_the_annotations(
    annotations: dict[str, str], expected: dict[str, Any]
) -> None:
    assert topology_request(annotations, INDEX) == expected


def test_no_pod_index_label_and_no_annotation_is_no_request() -> None:
    assert topology_request({}, None) is None


def test_annotations_do_not_make_a_workload_stale_but_containers_and_counts_do() -> None:
    workload = build(PYTORCH, pytorchjob())["spec"]["podSets"]
    annotated = build(PYTORCH, pytorchjob({REQUIRED: ZONE, GROUP: "g"}))["spec"]["podSets"]
    assert same_pod_sets(annotated, workload, ignore_tolerations=False)
    job = pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["worker"]["replicas"] = 4
    assert not same_pod_sets(build(PYTORCH, job)["spec"]["podSets"], workload,
                             ignore_tolerations=False)
    job = pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] = "2"
    assert not same_pod_sets(build(PYTORCH, job)["spec"]["podSets"], workload,
                             ignore_tolerations=False)
    job = pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["tolerations"] = [{"key": "k"}]
    tolerating = build(PYTORCH, job)["spec"]["podSets"]
    assert not same_pod_sets(tolerating, workload, ignore_tolerations=False)
    assert same_pod_sets(tolerating, workload, ignore_tolerations=True)


def admitted(workload: dict[str, Any], *, tas: bool) -> dict[str, Any]:
    out = copy.deepcopy(workload)
    out["metadata"]["name"] = "pytorchjob-bert-abcde"
    assignments = []
    for pod_set in out["spec"]["podSets"]:
        entry: dict[str, Any] = {"name": pod_set["name"], "count": pod_set["count"],
                                 "flavors": {"cpu": "gpu-flavor"}}
        if tas:
            entry["topologyAssignment"] = {"levels": ["kubernetes.io/hostname"],
                                           "domains": [{"values": ["n1"], "count": 1}]}
        assignments.append(entry)
    out["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": assignments}}
    return out


FLAVORS = {"gpu-flavor": {"spec": {"nodeLabels": {"pool": "gpu"},
                                   "tolerations": [{"key": "gpu", "operator": "Exists"}]}}}


def test_admission_with_a_topology_assignment_gates_pods_and_names_the_workload() -> None:
    workload = admitted(build(PYTORCH, pytorchjob()), tas=True)
    [master, _worker] = info_from_admission(workload, FLAVORS)
    assert master.node_selector == {"pool": "gpu"}
    assert master.tolerations == [{"key": "gpu", "operator": "Exists"}]
    assert master.gates == [{"name": "kueue.x-k8s.io/topology"}]
    assert master.labels == {"kueue.x-k8s.io/podset": "master"}
    assert master.annotations == {UNCONSTRAINED: "true",
                                  "kueue.x-k8s.io/workload": "pytorchjob-bert-abcde"}
    explicit = admitted(build(PYTORCH, pytorchjob({REQUIRED: ZONE})), tas=True)
    assert UNCONSTRAINED not in info_from_admission(explicit, FLAVORS)[0].annotations
    plain = admitted(build(PYTORCH, pytorchjob()), tas=False)
    assert info_from_admission(plain, FLAVORS)[0].gates == []


def test_start_merges_the_admission_and_stop_restores_the_workloads_templates() -> None:
    job = pytorchjob()
    workload = admitted(build(PYTORCH, job), tas=True)
    started = merge_patch(job, start_patch(PYTORCH, job, info_from_admission(workload, FLAVORS)))
    assert started["spec"]["runPolicy"]["suspend"] is False
    template = started["spec"]["pytorchReplicaSpecs"]["worker"]["template"]
    assert template["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert template["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/topology"}]
    assert template["metadata"]["labels"] == {"app": "t", "kueue.x-k8s.io/podset": "worker"}
    infos = [info_from_pod_set(p) for p in workload["spec"]["podSets"]]
    stopped = merge_patch(started, stop_patch(PYTORCH, started, infos))
    assert stopped["spec"]["runPolicy"]["suspend"] is True
    assert stopped["spec"]["pytorchReplicaSpecs"] == job["spec"]["pytorchReplicaSpecs"]
    assert stop_patch(PYTORCH, started, None) == suspend_patch(PYTORCH, True)


def test_a_template_contradicting_the_flavor_is_a_conflict() -> None:
    job = pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] = {
        "pool": "cpu"}
    workload = admitted(build(PYTORCH, job), tas=False)
    with pytest.raises(PodSetInfoConflictError, match="conflict for key=pool"):
        start_patch(PYTORCH, job, info_from_admission(workload, FLAVORS))
    with pytest.raises(PodSetInfoConflictError, match="expecting 2 podset, got 1"):
        start_patch(PYTORCH, job, [PodSetInfo("master", 1)])
