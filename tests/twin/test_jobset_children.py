"""What a JobSet wants, pure: child Jobs and their labels, the headless Service, the resume
merge of pod templates, replicated-job statuses, dependsOn and the success policy."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from agent.twin import jobset_children as js

ZONE = "topology.kubernetes.io/zone"
GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _jobset(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "train", "namespace": "ml", "uid": "js-uid", "annotations": {}},
        "spec": {
            "network": {"enableDNSHostnames": True},
            "replicatedJobs": [
                {"name": "launcher", "replicas": 1, "template": {"spec": {"template": {
                    "spec": {"containers": [{"name": "l"}]}}}}},
                {"name": "node", "replicas": 2, "template": {
                    "metadata": {"labels": {"tier": "gpu"}},
                    "spec": {"parallelism": 4, "completions": 4, "completionMode": "Indexed",
                             "template": {"metadata": {"labels": {"app": "x"}},
                                          "spec": {"containers": [{"name": "n"}]}}}}},
            ],
            **spec,
        },
        "status": {"restarts": 2},
    }  # fmt: skip


def test_child_job_labels_annotations_and_subdomain() -> None:
    jobset = _jobset(coordinator={"replicatedJob": "node", "jobIndex": 0, "podIndex": 0})
    job = js.desired_job(jobset, jobset["spec"]["replicatedJobs"][1], 1)
    expected = {
        js.JOBSET_NAME: "train", js.JOBSET_UID: "js-uid", js.REPLICATED_JOB: "node",
        js.RESTART_ATTEMPT: "2", js.REPLICATED_JOB_REPLICAS: "2", js.GLOBAL_REPLICAS: "3",
        js.JOB_INDEX: "1", js.JOB_GLOBAL_INDEX: "2", js.GROUP_NAME: "default",
        js.GROUP_REPLICAS: "3", js.JOB_GROUP_INDEX: "2",
        js.JOB_KEY: hashlib.sha1(b"ml/train-node-1", usedforsecurity=False).hexdigest(),
        js.COORDINATOR: "train-node-0-0.train",
    }
    assert job["metadata"]["name"] == "train-node-1"
    assert job["metadata"]["labels"] == {"tier": "gpu", **expected}
    assert job["metadata"]["annotations"] == expected
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"] == {"app": "x", **expected}
    assert pod["metadata"]["annotations"] == expected
    assert pod["spec"]["subdomain"] == "train"
    assert job["spec"]["suspend"] is False and job["spec"]["parallelism"] == 4
    assert job["metadata"]["ownerReferences"] == [{
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train",
        "uid": "js-uid", "controller": True, "blockOwnerDeletion": True}]


def test_exclusive_topology_and_suspend_reach_the_child_jobs() -> None:
    jobset = _jobset(suspend=True, network={"enableDNSHostnames": False, "subdomain": "net"})
    jobset["metadata"]["annotations"] = {js.EXCLUSIVE_TOPOLOGY: ZONE}
    job = js.desired_job(jobset, jobset["spec"]["replicatedJobs"][0], 0)
    assert job["metadata"]["annotations"][js.EXCLUSIVE_TOPOLOGY] == ZONE
    assert job["spec"]["template"]["metadata"]["annotations"][js.EXCLUSIVE_TOPOLOGY] == ZONE
    assert js.EXCLUSIVE_TOPOLOGY not in job["metadata"]["labels"]
    assert job["spec"]["suspend"] is True
    assert "subdomain" not in job["spec"]["template"]["spec"]
    assert js.headless_service(jobset)["metadata"]["name"] == "net"


def test_headless_service() -> None:
    service = js.headless_service(_jobset())
    assert service["metadata"]["name"] == "train"
    assert service["spec"] == {"clusterIP": "None", "selector": {js.JOBSET_NAME: "train"},
                               "publishNotReadyAddresses": True}


def _template(selector: dict[str, str] | None = None, tolerations: list[Any] | None = None,
              labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    pod: dict[str, Any] = dict(spec)
    if selector is not None:
        pod["nodeSelector"] = selector
    if tolerations is not None:
        pod["tolerations"] = tolerations
    return {"metadata": {"labels": labels} if labels else {}, "spec": pod}


@pytest.mark.parametrize(
    ("job", "jobset", "expected"),
    [
        # a new key is added; an existing key the JobSet sets is overwritten
        (_template({ZONE: "b", "pool": "gpu"}), _template({ZONE: "a"}),
         _template({ZONE: "a", "pool": "gpu"})),
        # a key removed from the JobSet's template stays on the Job
        (_template({ZONE: "b"}), _template({}), _template({ZONE: "b"})),
        # tolerations are unioned (existing first), never removed
        (_template(tolerations=[{"key": "x"}]), _template(tolerations=[GPU, {"key": "x"}]),
         _template(tolerations=[{"key": "x"}, GPU])),
        (_template(tolerations=[GPU]), _template(), _template(tolerations=[GPU])),
        # labels merge; other fields (affinity here) are not touched
        (_template(labels={"a": "1"}, affinity={"old": 1}),
         _template(labels={"b": "2"}, affinity={"new": 1}),
         _template(labels={"a": "1", "b": "2"}, affinity={"old": 1})),
    ],
)
def test_resume_merges_template_maps(job: Any, jobset: Any, expected: Any) -> None:
    assert js.resume_template(job, jobset) == expected


def _child(rjob: str, *, finished: str = "", active: int = 0, ready: int = 0,
           succeeded: int = 0, suspend: bool = False, parallelism: int = 4) -> dict[str, Any]:
    conditions = [{"type": finished, "status": "True"}] if finished else []
    return {"metadata": {"name": f"train-{rjob}", "labels": {js.REPLICATED_JOB: rjob}},
            "spec": {"parallelism": parallelism, "completions": parallelism, "suspend": suspend},
            "status": {"active": active, "ready": ready, "succeeded": succeeded,
                       "conditions": conditions}}  # fmt: skip


def test_replicated_job_statuses() -> None:
    jobs = [_child("launcher", finished="Complete", parallelism=1),
            _child("node", active=4, ready=4), _child("node", active=0, suspend=True),
            _child("other", active=1)]  # fmt: skip
    assert js.replicated_job_statuses(_jobset(), jobs) == [
        {"name": "launcher", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0},
        {"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 1},
    ]


@pytest.mark.parametrize(
    ("status", "depends", "reached"),
    [
        ({"name": "launcher", "ready": 1, "succeeded": 0, "failed": 0}, "Ready", True),
        ({"name": "launcher", "ready": 0, "succeeded": 0, "failed": 0}, "Ready", False),
        ({"name": "launcher", "ready": 1, "succeeded": 0, "failed": 0}, "Complete", False),
        ({"name": "launcher", "ready": 0, "succeeded": 1, "failed": 0}, "Complete", True),
        (None, "Ready", False),
    ],
)
def test_depends_on(status: Any, depends: str, reached: bool) -> None:
    jobset = _jobset()
    rjob = {**jobset["spec"]["replicatedJobs"][1],
            "dependsOn": [{"name": "launcher", "status": depends}]}
    assert js.dependency_reached(jobset, rjob, [status] if status else []) is reached
    assert js.dependency_reached(jobset, jobset["spec"]["replicatedJobs"][1], []) is True


@pytest.mark.parametrize(
    ("policy", "done", "complete"),
    [
        (None, ["launcher", "node"], False),  # All: 1 launcher + 2 node Jobs
        (None, ["launcher", "node", "node"], True),
        ({"operator": "All", "targetReplicatedJobs": ["launcher"]}, ["launcher"], True),
        ({"operator": "Any"}, ["node"], True),
        ({"operator": "Any", "targetReplicatedJobs": ["launcher"]}, ["node"], False),
    ],
)
def test_success_policy(policy: Any, done: list[str], complete: bool) -> None:
    jobset = _jobset(**({"successPolicy": policy} if policy else {}))
    successful = [_child(name, finished="Complete") for name in done]
    assert js.success_reached(jobset, successful) is complete
