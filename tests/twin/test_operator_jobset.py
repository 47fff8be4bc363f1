"""The JobSet controller on the whole twin: child Jobs and their pods' labels, the headless
Service, suspend (Jobs kept, pods deleted) and resume (template maps merged, a removed key
stays), dependsOn, completion, failure and exclusive placement per zone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent.twin import jobset_children as js
from agent.twin.cluster import TwinCluster
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from tests.twin.twin_fixtures import fast, pods, running, wait

JOBSETS = lookup("jobsets")
BATCH_JOBS = lookup("jobs", group="batch")
SERVICES = lookup("services")
NODES = lookup("nodes")
ZONE = "topology.kubernetes.io/zone"
NAME = "pytorch-ddp"
INDEX = "batch.kubernetes.io/job-completion-index"
GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture
def cluster() -> Iterator[TwinCluster]:
    with running(fast("jobset")) as twin:
        wait(twin, lambda: len(live(twin)) == 4 and all(
            p["status"].get("phase") == "Running" for p in live(twin)))
        yield twin


def live(cluster: TwinCluster, selector: str | None = None) -> list[dict[str, Any]]:
    return [p for p in pods(cluster, selector=selector or f"{js.JOBSET_NAME}={NAME}")
            if not p["metadata"].get("deletionTimestamp")]


def zone(cluster: TwinCluster, pod: dict[str, Any]) -> str:
    return str(cluster.store.get(NODES, pod["spec"]["nodeName"])["metadata"]["labels"][ZONE])


def jobset(cluster: TwinCluster, name: str = NAME) -> dict[str, Any]:
    return cluster.store.get(JOBSETS, name, namespace="ml")


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == kind), None)


def test_child_jobs_pods_and_headless_service(cluster: TwinCluster) -> None:
    owner = jobset(cluster)
    (job,) = cluster.store.list(BATCH_JOBS, namespace="ml")[0]
    assert job["metadata"]["name"] == "pytorch-ddp-workers-0"
    assert job["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
    assert job["spec"]["completionMode"] == "Indexed"  # the JobSet webhook's default
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    by_index = {int(p["metadata"]["annotations"][INDEX]): p for p in live(cluster)}
    assert sorted(by_index) == [0, 1, 2, 3]
    for index, pod in by_index.items():
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["name"].startswith(f"pytorch-ddp-workers-0-{index}-")
        assert meta["labels"][INDEX] == str(index)
        for key, value in ((js.JOBSET_NAME, NAME), (js.REPLICATED_JOB, "workers"),
                           (js.JOB_INDEX, "0"), (js.JOB_GLOBAL_INDEX, "0"),
                           (js.COORDINATOR, "pytorch-ddp-workers-0-0.pytorch-ddp"),
                           ("batch.kubernetes.io/job-name", "pytorch-ddp-workers-0")):
            assert meta["labels"][key] == value
        assert meta["ownerReferences"][0]["kind"] == "Job"
        assert (spec["hostname"], spec["subdomain"]) == (f"pytorch-ddp-workers-0-{index}", NAME)
        env = {e["name"]: e for e in spec["containers"][0]["env"]}
        assert env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == \
            f"metadata.annotations['{INDEX}']"
    service = cluster.store.get(SERVICES, NAME, namespace="ml")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {js.JOBSET_NAME: NAME}
    ready = [{"name": "workers", "ready": 1, "succeeded": 0, "failed": 0, "active": 1,
              "suspended": 0}]
    # the Job's status, then the JobSet's, follow the pods' (each controller in its own time)
    wait(cluster, lambda: jobset(cluster)["status"]["replicatedJobsStatus"] == ready)
    assert "conditions" not in jobset(cluster)["status"]  # nothing a condition reports yet
    assert {zone(cluster, p) for p in live(cluster)} == {"us-east-1a", "us-east-1b"}


def _set_selector(cluster: TwinCluster, selector: dict[str, str]) -> None:
    """A merge patch replaces the replicatedJobs list: read-modify-write the whole of it."""
    current = jobset(cluster)
    rjobs = current["spec"]["replicatedJobs"]
    rjobs[0]["template"]["spec"]["template"]["spec"]["nodeSelector"] = selector
    cluster.store.patch(JOBSETS, NAME, {"metadata": {
        "resourceVersion": current["metadata"]["resourceVersion"]},
        "spec": {"replicatedJobs": rjobs}}, namespace="ml", patch_type=PatchType.MERGE)


def _suspend(cluster: TwinCluster, value: bool) -> None:
    cluster.store.patch(JOBSETS, NAME, {"spec": {"suspend": value}}, namespace="ml",
                        patch_type=PatchType.MERGE)


def test_suspend_keeps_the_jobs_and_resume_merges_the_template(cluster: TwinCluster) -> None:
    (job,) = cluster.store.list(BATCH_JOBS, namespace="ml")[0]
    _suspend(cluster, True)
    wait(cluster, lambda: not pods(cluster, selector=f"{js.JOBSET_NAME}={NAME}"))
    (kept,) = cluster.store.list(BATCH_JOBS, namespace="ml")[0]
    assert kept["metadata"]["uid"] == job["metadata"]["uid"] and kept["spec"]["suspend"] is True
    wait(cluster, lambda: (condition(jobset(cluster), "Suspended") or {}).get("status") == "True")
    suspended = condition(jobset(cluster), "Suspended")
    assert suspended is not None
    assert (suspended["reason"], suspended["message"]) == ("SuspendedJobs", "jobset is suspended")
    wait(cluster, lambda: jobset(cluster)["status"]["replicatedJobsStatus"][0]["suspended"] == 1)
    _set_selector(cluster, {ZONE: "us-east-1a", "kubernetes.io/os": "linux"})
    _suspend(cluster, False)
    wait(cluster, lambda: len(live(cluster)) == 4 and all(
        p["spec"].get("nodeName") for p in live(cluster)))
    assert {zone(cluster, p) for p in live(cluster)} == {"us-east-1a"}
    wait(cluster, lambda: (condition(jobset(cluster), "Suspended") or {}).get("status") == "False")
    resumed = condition(jobset(cluster), "Suspended")
    assert resumed is not None and resumed["reason"] == "ResumeJobs"
    # suspend again and drop a key from the JobSet: the Job keeps it (maps merge on resume)
    _suspend(cluster, True)
    wait(cluster, lambda: not pods(cluster, selector=f"{js.JOBSET_NAME}={NAME}"))
    _set_selector(cluster, {ZONE: "us-east-1a"})
    _suspend(cluster, False)
    wait(cluster, lambda: len(live(cluster)) == 4)
    (after,) = cluster.store.list(BATCH_JOBS, namespace="ml")[0]
    assert after["spec"]["template"]["spec"]["nodeSelector"] == {
        ZONE: "us-east-1a", "kubernetes.io/os": "linux"}
    assert all(p["spec"]["nodeSelector"]["kubernetes.io/os"] == "linux" for p in live(cluster))
    assert after["metadata"]["uid"] == job["metadata"]["uid"]


def _plain_jobset(name: str, **extra: Any) -> dict[str, Any]:
    def rjob(rname: str, count: int, **more: Any) -> dict[str, Any]:
        return {"name": rname, "template": {"spec": {"parallelism": count, "completions": count,
                "template": {"metadata": {"annotations": {"twin.zonemedic.io/run-seconds": "0.3"}},
                             "spec": {"tolerations": [GPU], "containers": [
                                 {"name": "c", "image": "x",
                                  "resources": {"requests": {"cpu": "1"}}}]}}}}, **more}
    spec = {"replicatedJobs": [rjob("prep", 1),
                               rjob("work", 2, dependsOn=[{"name": "prep", "status": "Complete"}])]}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "ml", **extra}, "spec": spec}  # fmt: skip


def test_depends_on_then_completion() -> None:
    with TwinCluster(fast("jobset")) as cluster:
        seen: list[tuple[str, bool]] = []

        def on_job(event: Any) -> None:
            name = event.object["metadata"]["name"]
            if event.type == "ADDED" and name.startswith("chain-work"):
                prep = cluster.store.get(BATCH_JOBS, "chain-prep-0", namespace="ml")
                seen.append((name, condition(prep, "Complete") is not None))

        unsubscribe = cluster.store.subscribe(BATCH_JOBS, on_job)
        try:
            cluster.store.create(JOBSETS, _plain_jobset("chain"))
            wait(cluster, lambda: (condition(jobset(cluster, "chain"), "Completed") or {}).get(
                "status") == "True", timeout=20)
        finally:
            unsubscribe()
        assert seen == [("chain-work-0", True)]  # created only once prep had completed
        done = jobset(cluster, "chain")
        completed = condition(done, "Completed")
        assert completed is not None
        assert (completed["reason"], completed["message"]) == ("AllJobsCompleted",
                                                               "jobset completed successfully")
        assert done["status"]["terminalState"] == "Completed"
        statuses = {s["name"]: s["succeeded"] for s in done["status"]["replicatedJobsStatus"]}
        assert statuses == {"prep": 1, "work": 1}


def test_a_failed_child_job_fails_the_jobset(cluster: TwinCluster) -> None:
    body = _plain_jobset("fragile")
    for rjob in body["spec"]["replicatedJobs"]:
        rjob["template"]["spec"]["backoffLimit"] = 0
        rjob["template"]["spec"]["template"]["spec"]["restartPolicy"] = "Never"
        rjob["template"]["spec"]["template"]["metadata"]["annotations"] = {}
    cluster.store.create(JOBSETS, body)
    selector = f"{js.JOBSET_NAME}=fragile"
    wait(cluster, lambda: any(p["status"].get("phase") == "Running"
                              for p in pods(cluster, selector=selector)))
    (pod,) = pods(cluster, selector=selector)
    cluster.kubelet.crash("ml", pod["metadata"]["name"], message="boom")
    wait(cluster, lambda: (condition(jobset(cluster, "fragile"), "Failed") or {}).get(
        "status") == "True")
    failed = condition(jobset(cluster, "fragile"), "Failed")
    assert failed is not None and failed["reason"] == "FailedJobs"
    assert failed["message"] == ("jobset failed due to one or more job failures "
                                 "(first failed job: fragile-prep-0)")
    assert jobset(cluster, "fragile")["status"]["terminalState"] == "Failed"
    assert not cluster.store.list(BATCH_JOBS, namespace="ml",
                                  label_selector=f"{js.JOBSET_NAME}=fragile,"
                                                 f"{js.REPLICATED_JOB}=work")[0]


def test_exclusive_topology_puts_each_child_job_in_its_own_zone(cluster: TwinCluster) -> None:
    _suspend(cluster, True)  # free the GPUs the seeded JobSet holds
    wait(cluster, lambda: not pods(cluster, selector=f"{js.JOBSET_NAME}={NAME}"))
    body = _plain_jobset("apart", annotations={js.EXCLUSIVE_TOPOLOGY: ZONE})
    for rjob in body["spec"]["replicatedJobs"]:
        rjob.pop("dependsOn", None)
        rjob["template"]["spec"]["template"]["metadata"]["annotations"] = {}
    cluster.store.create(JOBSETS, body)
    selector = f"{js.JOBSET_NAME}=apart"
    wait(cluster, lambda: len(pods(cluster, selector=selector)) == 3 and all(
        p["spec"].get("nodeName") for p in pods(cluster, selector=selector)), timeout=20)
    by_job: dict[str, set[str]] = {}
    for pod in pods(cluster, selector=selector):
        by_job.setdefault(pod["metadata"]["labels"][js.REPLICATED_JOB], set()).add(
            zone(cluster, pod))
        if pod["metadata"]["annotations"][INDEX] == "0":
            affinity = pod["spec"]["affinity"]
            (same,) = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert same["topologyKey"] == ZONE
            assert same["labelSelector"]["matchExpressions"][0]["values"] == [
                pod["metadata"]["labels"][js.JOB_KEY]]
            assert pod["metadata"]["labels"][js.PRIORITY] == "0"
        else:
            assert ZONE in pod["spec"]["nodeSelector"]  # follows its leader's zone
    assert {k: len(v) for k, v in by_job.items()} == {"prep": 1, "work": 1}
    assert by_job["prep"] != by_job["work"]
