"""Slimming keeps what the diagnosis needs, drops churn, and stays manifest-shaped."""

from __future__ import annotations

from typing import Any

from agent.model.workload import JobKind, workload
from agent.sources.resources import RESOURCES, Resource
from agent.sources.slim import slim_pod, slimmer
from tests.support import objects

BY_KIND = {(r.kind, r.version): r for r in RESOURCES}

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "resnet-worker-0",
        "namespace": "ml",
        "uid": "u1",
        "resourceVersion": "123",
        "labels": {"training.kubeflow.org/job-name": "resnet"},
        "annotations": {"big": "x" * 1000},
        "managedFields": [{"manager": "kubelet"}],
        "ownerReferences": [
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "resnet", "uid": "j1", "controller": True, "blockOwnerDeletion": True}
        ],
    },
    "spec": {
        "nodeName": "gpu-a-1",
        "serviceAccountName": "trainer",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "volumes": [{"name": "data"}],
        "containers": [
            {
                "name": "pytorch",
                "image": "pytorch:2",
                "env": [{"name": "A", "value": "b"}],
                "ports": [{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "4", "nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}},
            }
        ],
    },
    "status": {"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [{"ready": True}]},
}


def test_pod_keeps_diagnosis_fields_only() -> None:
    slim = slim_pod(POD)
    assert slim == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "resnet-worker-0",
            "namespace": "ml",
            "uid": "u1",
            "labels": {"training.kubeflow.org/job-name": "resnet"},
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "resnet", "uid": "j1", "controller": True}
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "ports": [{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}],
                    "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}},
                }
            ],
            "nodeName": "gpu-a-1",
            "serviceAccountName": "trainer",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
        "status": {"phase": "Running"},
    }


def test_status_churn_compares_equal() -> None:
    churned = {**POD, "metadata": {**POD["metadata"], "resourceVersion": "999"}, "status": {**POD["status"], "podIP": "10.9.9.9"}}
    assert slim_pod(churned) == slim_pod(POD)


def test_node_policy_job_and_owner() -> None:
    node = slimmer(BY_KIND[("Node", "v1")])(
        {
            "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "a"}, "resourceVersion": "5"},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}], "unschedulable": True, "podCIDR": "x"},
            "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready"}]},
        }
    )
    assert node["spec"] == {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}], "unschedulable": True}
    assert node["status"] == {"allocatable": {"nvidia.com/gpu": "8"}}
    cnp = slimmer(BY_KIND[("CiliumNetworkPolicy", "v2")])(
        {"metadata": {"name": "p", "namespace": "ml", "annotations": {"a": "b"}}, "spec": {"endpointSelector": {}}, "status": {"x": 1}}
    )
    assert cnp == {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"endpointSelector": {}},
    }
    job_resource: Resource = BY_KIND[("PyTorchJob", "v1")]
    job = slimmer(job_resource)(
        {
            "metadata": {"name": "resnet", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
            "spec": {
                "runPolicy": {"suspend": False},
                "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}}},
            },
            "status": {"conditions": [{"type": "Running", "status": "True", "lastTransitionTime": "t"},
                                      {"type": "Succeeded", "status": "False", "reason": "x"}]},
        }
    )
    assert job["spec"] == {
        "runPolicy": {"suspend": False},
        "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"metadata": {"labels": {"a": "b"}}}}},
    }
    assert job["status"] == {"conditions": [{"type": "Succeeded", "status": "False"}]}
    owner = slimmer(BY_KIND[("Job", "v1")])({"metadata": {"name": "j", "namespace": "ml", "ownerReferences": [{"kind": "MPIJob", "name": "m", "controller": True}]}, "spec": {"x": 1}})
    assert owner == {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml", "ownerReferences": [{"kind": "MPIJob", "name": "m", "controller": True}]}}
    # the pod counts a workload expects and its template's labels are kept (gang completion)
    workers = slimmer(BY_KIND[("Job", "v1")])({"metadata": {"name": "w", "namespace": "ml"}, "spec": {"parallelism": 4, "completions": 4, "backoffLimit": 6, "template": {"metadata": {"labels": {"app": "x"}, "annotations": {"a": "b"}}, "spec": {"containers": []}}}})
    assert workers["spec"] == {"parallelism": 4, "completions": 4, "template": {"metadata": {"labels": {"app": "x"}}}}


def test_equal_parts_are_shared_across_pods_and_the_table_is_bounded() -> None:
    from agent.sources.slim import Sharer

    share = Sharer(capacity=10)
    second = {**POD, "metadata": {**POD["metadata"], "name": "resnet-worker-1"}}
    a, b = slim_pod(POD, share), slim_pod(second, share)
    assert a["spec"]["containers"] is b["spec"]["containers"]
    assert a["spec"]["tolerations"] is b["spec"]["tolerations"]
    assert a["status"] is b["status"]
    assert a["metadata"]["name"] != b["metadata"]["name"]
    assert a == slim_pod(POD)  # sharing never changes content
    for i in range(20):
        share({"x": i})
    assert len(share._table) <= 10


def test_the_informers_pod_slimmer_gives_slim_pods_output_and_sharing() -> None:
    from agent.sources.slim import Sharer

    pods_resource = next(r for r in RESOURCES if r.name == "pods")
    variants: list[dict[str, Any]] = [
        POD,
        {**POD, "metadata": {"name": "bare"}, "spec": {}, "status": {}},
        {"metadata": {"name": "x", "namespace": "ml", "deletionTimestamp": "2026-01-01T00:00:00Z",
                      "ownerReferences": ["not a mapping", {"kind": "ReplicaSet", "name": "rs"}]},
         "spec": {"nodeSelector": {"gpu": "true"}, "affinity": {"nodeAffinity": {}},
                  "serviceAccount": "legacy", "containers": [{"name": "c"}, "odd"]}},
        {**POD, "status": {"phase": "Succeeded"}},
    ]
    fast, share = slimmer(pods_resource, Sharer()), Sharer()
    for pod in variants:
        assert fast(pod) == slim_pod(pod, share) == slim_pod(pod)
    second = {**POD, "metadata": {**POD["metadata"], "name": "resnet-worker-1"}}
    a, b = fast(POD), fast(second)
    assert a["spec"]["containers"] is b["spec"]["containers"]
    assert a["metadata"]["ownerReferences"] is b["metadata"]["ownerReferences"]
    assert a["spec"]["tolerations"] is b["spec"]["tolerations"]


def test_a_jobset_keeps_its_gang_counts_coordinator_and_owner_only() -> None:
    resource = BY_KIND[("JobSet", "v1alpha2")]
    obj = objects.jobset("llm", [objects.replicated_job("dataset-initializer", step="dataset-initializer"),
                                 objects.replicated_job("node", replicas=2, nodes=4, gpus=8)],
                         trainjob=True, suspend=True, managed_by="jobset.sigs.k8s.io/jobset-controller",
                         coordinator={"replicatedJob": "node"}, conditions=["Completed", "StartupPolicyCompleted"])
    obj["spec"]["network"] = {"subdomain": "llm"}
    obj["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "PET_MASTER_PORT", "value": "29500"}, {"name": "HF_TOKEN", "value": "secret"}]
    slim = slimmer(resource)(obj)
    assert slim["spec"] == {
        "suspend": True, "managedBy": "jobset.sigs.k8s.io/jobset-controller",
        "coordinator": {"replicatedJob": "node"},
        "replicatedJobs": [
            {"name": "dataset-initializer", "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
                "spec": {"parallelism": 1, "completions": 1, "template": {}}}},
            # of the env, only the master port's (never another value, e.g. a token)
            {"name": "node", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 4,
                                                                   "template": {"spec": {"containers": [
                {"env": [{"name": "PET_MASTER_PORT", "value": "29500"}]}]}}}}},
        ],
    }
    assert slim["status"] == {"conditions": [{"type": "Completed", "status": "True"}]}
    assert slim["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    # the descriptor reads the same gang from the slim object as from the full one
    jobset = workload(JobKind.JOBSET)
    assert jobset.templates.expected_pods(slim) == jobset.templates.expected_pods(obj) == 8


def test_a_trainjob_keeps_suspend_and_managed_by() -> None:
    resource = BY_KIND[("TrainJob", "v1alpha1")]
    slim = slimmer(resource)(objects.trainjob("llm", suspend=False, managed_by="kueue.x-k8s.io/multikueue",
                                              labels={"kueue.x-k8s.io/queue-name": "q"}))
    assert slim["spec"] == {"suspend": False, "managedBy": "kueue.x-k8s.io/multikueue"}
    assert slim["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "q"}


def test_a_workload_keeps_its_pod_sets_counts_and_their_templates_topology_annotations() -> None:
    (resource,) = [r for r in RESOURCES if r.kind == "Workload"]
    required = "kueue.x-k8s.io/podset-required-topology"
    slim = slimmer(resource)({
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": "jobset-ddp-1", "namespace": "ml", "resourceVersion": "9"},
        "spec": {"queueName": "q", "podSets": [
            {"name": "workers", "count": 4, "minCount": 2, "template": {
                "metadata": {"labels": {"app": "x"}, "annotations": {required: "zone", "other": "y"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}},
            {"name": "driver", "template": {"spec": {}}}]},
    })  # fmt: skip
    assert slim["spec"]["podSets"] == [
        {"name": "workers", "count": 4, "template": {"metadata": {"annotations": {required: "zone"}}}},
        {"name": "driver"}]  # fmt: skip
