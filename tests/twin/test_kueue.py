"""The twin's Kueue end to end (in-process, fast pod timings): admission by quota, TAS placement per
annotation, the two-PodSet group, deactivation without requeue and reactivation, the fix through
Kueue, Kueue resuming a job someone else suspended, the webhooks, finished Workloads."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from agent.twin.apierror import ApiError
from agent.twin.cluster import TwinCluster
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from agent.twin.scenario import ScenarioError
from tests.support.waiting import wait
from tests.twin.twin_fixtures import PYTORCHJOBS, fast, pods, running

WORKLOADS = lookup("workloads", group="kueue.x-k8s.io")
CLUSTER_QUEUES = lookup("clusterqueues", group="kueue.x-k8s.io")
LOCAL_QUEUES = lookup("localqueues", group="kueue.x-k8s.io")
JOBS = lookup("jobs", group="batch")
NODES = lookup("nodes")
EVENTS = lookup("events")
ZONE = "topology.kubernetes.io/zone"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
GROUP = "kueue.x-k8s.io/podset-group-name"
GATE = {"name": "kueue.x-k8s.io/topology"}


@pytest.fixture
def kueue() -> Iterator[TwinCluster]:
    with running(fast("kueue")) as cluster:
        yield cluster


def workload(cluster: TwinCluster, job: str = "llm-finetune") -> dict[str, Any] | None:
    found = [w for w in cluster.store.list(WORKLOADS, namespace="ml")[0]
             if w["metadata"]["ownerReferences"][0]["name"] == job]  # fmt: skip
    return found[0] if found else None


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return {}


def zones(cluster: TwinCluster) -> dict[str, str]:
    """Pod name -> the zone of its node, for every running pod of the job."""
    node_zone = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE]
                 for n in cluster.store.list(NODES)[0]}  # fmt: skip
    return {p["metadata"]["name"]: node_zone[p["spec"]["nodeName"]] for p in pods(cluster)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")}


def running_pods(cluster: TwinCluster, count: int = 5) -> dict[str, str]:
    def check() -> dict[str, str] | None:
        found = zones(cluster)
        return found if len(found) == count else None

    return wait(check, timeout=20, what=lambda: f"{count} running pods, saw {zones(cluster)}")


def stored_job(cluster: TwinCluster, name: str = "llm-finetune") -> dict[str, Any]:
    return cluster.store.get(PYTORCHJOBS, name, namespace="ml")


def patch_job(cluster: TwinCluster, body: dict[str, Any], name: str = "llm-finetune") -> None:
    cluster.store.patch(PYTORCHJOBS, name, body, namespace="ml", patch_type=PatchType.MERGE)


def patch_workload(cluster: TwinCluster, body: dict[str, Any]) -> None:
    found = workload(cluster)
    assert found is not None
    cluster.store.patch(WORKLOADS, found["metadata"]["name"], body, namespace="ml",
                        patch_type=PatchType.MERGE)  # fmt: skip


def events_for(cluster: TwinCluster, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in cluster.store.list(EVENTS, namespace="ml")[0]
            if e["involvedObject"]["name"] == name and e["reason"] == reason]  # fmt: skip


def deactivate_and_drain(cluster: TwinCluster) -> dict[str, Any]:
    patch_workload(cluster, {"spec": {"active": False}})
    wait(lambda: not pods(cluster) and condition(workload(cluster), "QuotaReserved").get(
        "status") == "False", timeout=20, what="the job stopped and its quota released")
    found = workload(cluster)
    assert found is not None
    return found


def annotate(cluster: TwinCluster, annotations: dict[str, str]) -> None:
    specs = stored_job(cluster)["spec"]["pytorchReplicaSpecs"]
    body = {rtype: {"template": {"metadata": {"annotations": annotations}}} for rtype in specs}
    patch_job(cluster, {"spec": {"pytorchReplicaSpecs": body}})


# --- admission ----------------------------------------------------------------------------------


def test_a_queued_job_is_suspended_at_create_and_started_once_admitted(
    kueue: TwinCluster,
) -> None:
    running_pods(kueue)
    found = workload(kueue)
    assert found is not None and found["metadata"]["name"].startswith("pytorchjob-llm-finetune-")
    assert condition(found, "QuotaReserved")["status"] == "True"
    assert condition(found, "Admitted") | {"lastTransitionTime": None} == {
        "type": "Admitted", "status": "True", "reason": "Admitted",
        "message": "The workload is admitted", "observedGeneration": 1,
        "lastTransitionTime": None}  # fmt: skip
    assert found["status"]["admission"]["clusterQueue"] == "cluster-queue"
    assert stored_job(kueue)["spec"]["runPolicy"]["suspend"] is False
    assert events_for(kueue, "llm-finetune", "CreatedWorkload")
    assert [e["message"] for e in events_for(kueue, "llm-finetune", "Started")] == [
        "Admitted by clusterQueue cluster-queue"]
    # the job was created suspended by the webhook (a job without Kueue would have started)
    created = stored_job(kueue)
    assert created["metadata"]["generation"] >= 2
    wait(lambda: kueue.store.get(CLUSTER_QUEUES, "cluster-queue").get("status", {}).get(
        "admittedWorkloads") == 1, timeout=10, what="the ClusterQueue counting the Workload")
    status = kueue.store.get(CLUSTER_QUEUES, "cluster-queue")["status"]
    usage = {r["name"]: r["total"] for r in status["flavorsReservation"][0]["resources"]}
    assert usage == {"cpu": "18", "memory": "136Gi", "nvidia.com/gpu": "4"}
    assert condition(kueue.store.get(CLUSTER_QUEUES, "cluster-queue"), "Active")["reason"] == "Ready"


def second_job(name: str, *, gpus: int, queue: str = "user-queue") -> dict[str, Any]:
    base = fast("kueue").objects[-1]
    out = copy.deepcopy(base)
    out["metadata"] = {"name": name, "namespace": "ml",
                       "labels": {"kueue.x-k8s.io/queue-name": queue}}
    out["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = gpus
    return out


def test_admission_waits_for_quota_and_a_missing_queue_is_inadmissible(kueue: TwinCluster) -> None:
    running_pods(kueue)
    kueue.store.create(PYTORCHJOBS, second_job("big", gpus=16))
    kueue.store.create(PYTORCHJOBS, second_job("lost", gpus=1, queue="nope"))
    wait(lambda: condition(workload(kueue, "big"), "QuotaReserved").get("reason") == "Pending",
         timeout=10, what="the big job's Workload pending")  # fmt: skip
    big = workload(kueue, "big")
    assert condition(big, "QuotaReserved")["message"] == (
        "couldn't assign flavors to pod set worker: insufficient unused quota for nvidia.com/gpu "
        "in flavor default-flavor, 4 more needed")
    assert big is not None and big["status"]["resourceRequests"][1] == {
        "name": "worker", "resources": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "16"}}
    wait(lambda: condition(workload(kueue, "lost"), "QuotaReserved").get("reason") ==
         "Inadmissible", timeout=10, what="the lost job's Workload inadmissible")  # fmt: skip
    assert condition(workload(kueue, "lost"), "QuotaReserved")["message"] == (
        "LocalQueue nope doesn't exist")
    assert stored_job(kueue, "big")["spec"]["runPolicy"]["suspend"] is True
    assert not pods(kueue, selector="training.kubeflow.org/job-name=big")
    wait(lambda: kueue.store.get(LOCAL_QUEUES, "user-queue", namespace="ml").get("status", {}).get(
        "pendingWorkloads") == 1, timeout=10, what="the LocalQueue counting one pending Workload")
    # the first job leaves: its quota and room go to the big one
    kueue.store.delete(PYTORCHJOBS, "llm-finetune", namespace="ml")
    wait(lambda: condition(workload(kueue, "big"), "Admitted").get("status") == "True",
         timeout=20, what="the big job admitted once the quota is free")  # fmt: skip
    wait(lambda: stored_job(kueue, "big")["spec"]["runPolicy"]["suspend"] is False, timeout=10,
         what="the big job started")  # fmt: skip


# --- topology aware scheduling ------------------------------------------------------------------


def test_without_a_topology_request_tas_splits_master_and_workers(kueue: TwinCluster) -> None:
    placed = running_pods(kueue)
    assert placed["llm-finetune-master-0"] == "us-east-1b"
    assert {placed[f"llm-finetune-worker-{i}"] for i in range(4)} == {"us-east-1a"}
    found = workload(kueue)
    assert found is not None
    master, worker = found["status"]["admission"]["podSetAssignments"]
    assert master["topologyAssignment"] == {"levels": ["kubernetes.io/hostname"],
                                            "domains": [{"values": ["cpu-b-0"], "count": 1}]}
    assert worker["topologyAssignment"]["domains"] == [{"values": ["gpu-a-0"], "count": 4}]
    pod = kueue.store.get(lookup("pods"), "llm-finetune-master-0", namespace="ml")
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "cpu-b-0"}
    assert "schedulingGates" not in pod["spec"]
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/podset-unconstrained-topology"] == "true"
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "master"


@pytest.mark.parametrize(("scenario", "level"), [
    ("kueue-no-group", "topology.kubernetes.io/zone"),
    ("kueue-wide-level", "topology.kubernetes.io/region"),
])  # fmt: skip
def test_a_request_per_pod_set_without_a_group_is_honoured_and_still_splits(
    scenario: str, level: str
) -> None:
    with running(fast(scenario)) as cluster:
        placed = running_pods(cluster)
        assert placed["llm-finetune-master-0"] == "us-east-1b"
        assert {placed[f"llm-finetune-worker-{i}"] for i in range(4)} == {"us-east-1a"}
        found = workload(cluster)
        assert found is not None
        assert [p["topologyRequest"].get("required") for p in found["spec"]["podSets"]] == [
            level, level]
        assert all("podSetGroupName" not in p["topologyRequest"] for p in found["spec"]["podSets"])


def test_without_tas_kueue_admits_by_quota_and_kube_scheduler_splits_the_job() -> None:
    with running(fast("kueue-no-tas")) as cluster:
        placed = running_pods(cluster)
        assert placed["llm-finetune-master-0"] == "us-east-1b"
        assert {placed[f"llm-finetune-worker-{i}"] for i in range(4)} == {"us-east-1a"}
        found = workload(cluster)
        assert found is not None
        assert all("topologyAssignment" not in a
                   for a in found["status"]["admission"]["podSetAssignments"])  # fmt: skip
        assert all(not p["spec"].get("schedulingGates") for p in pods(cluster))


def test_gated_pods_wait_for_the_ungater(kueue: TwinCluster) -> None:
    running_pods(kueue)
    deactivate_and_drain(kueue)
    kueue.kueue.stop()  # type: ignore[union-attr]  # Kueue down: nothing removes the gates
    patch_workload(kueue, {"spec": {"active": True}})
    # with the manager stopped the job stays suspended; start it by hand as Kueue would have
    found = workload(kueue)
    assert found is not None
    template = stored_job(kueue)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    gated = copy.deepcopy(template)
    gated["spec"]["schedulingGates"] = [GATE]
    patch_job(kueue, {"spec": {"runPolicy": {"suspend": False}, "pytorchReplicaSpecs": {
        "Worker": {"template": gated}}}})
    wait(lambda: len([p for p in pods(kueue) if p["spec"].get("schedulingGates")]) == 4,
         timeout=10, what="four gated worker pods")  # fmt: skip
    gated_pod = next(p for p in pods(kueue) if p["spec"].get("schedulingGates"))
    assert not gated_pod["spec"].get("nodeName")
    assert condition(gated_pod, "PodScheduled")["reason"] == "SchedulingGated"


# --- the two-PodSet group, deactivation and the fix through Kueue -------------------------------


def test_deactivation_evicts_without_requeue_and_reactivation_readmits(kueue: TwinCluster) -> None:
    running_pods(kueue)
    found = deactivate_and_drain(kueue)
    assert condition(found, "Evicted") | {"lastTransitionTime": None} == {
        "type": "Evicted", "status": "True", "reason": "Deactivated",
        "message": "The workload is deactivated", "observedGeneration": 2,
        "lastTransitionTime": None}  # fmt: skip
    assert condition(found, "Requeued")["status"] == "False"
    assert condition(found, "Requeued")["reason"] == "Deactivated"
    assert condition(found, "Admitted")["status"] == "False"
    assert "admission" not in found["status"]
    assert stored_job(kueue)["spec"]["runPolicy"]["suspend"] is True
    assert [e["message"] for e in events_for(kueue, "llm-finetune", "Stopped")] == [
        "The workload is deactivated"]
    # not requeued: once everything settled it is still not admitted and the job stays suspended
    wait(kueue.idle, timeout=10, what="the twin idle")
    assert condition(workload(kueue), "QuotaReserved")["status"] == "False"
    assert not pods(kueue)
    patch_workload(kueue, {"spec": {"active": True}})
    wait(lambda: condition(workload(kueue), "Admitted").get("status") == "True", timeout=20,
         what="the Workload admitted again")  # fmt: skip
    back = workload(kueue)
    assert condition(back, "Requeued")["reason"] == "Reactivated"
    assert condition(back, "Evicted")["status"] == "False"
    assert condition(back, "Evicted")["message"] == "Previously: The workload is deactivated"
    running_pods(kueue)


def test_reactivating_the_old_workload_after_annotating_the_job_cannot_start_it(
    kueue: TwinCluster,
) -> None:
    # Annotations do not make a Workload stale: reactivated, the old one is admitted again with
    # its old pod sets (no topology request, so implied TAS), and starting the job would add
    # podset-unconstrained-topology beside the new required annotation, which Kueue's own
    # validating webhook refuses. The job stays suspended while its Workload holds the quota.
    running_pods(kueue)
    old = deactivate_and_drain(kueue)
    annotate(kueue, {REQUIRED: ZONE, GROUP: "llm"})
    patch_workload(kueue, {"spec": {"active": True}})
    wait(lambda: condition(workload(kueue), "Admitted").get("status") == "True", timeout=20,
         what="the old Workload admitted again")  # fmt: skip
    found = workload(kueue)
    assert found is not None and found["metadata"]["uid"] == old["metadata"]["uid"]
    assert all("required" not in p["topologyRequest"] for p in found["spec"]["podSets"])
    wait(kueue.idle, timeout=10, what="the twin idle")
    assert stored_job(kueue)["spec"]["runPolicy"]["suspend"] is True
    assert not pods(kueue)
    with pytest.raises(ApiError, match="must not contain more than one topology annotation"):
        annotate(kueue, {REQUIRED: ZONE, "kueue.x-k8s.io/podset-unconstrained-topology": "true"})


def test_the_fix_through_kueue_puts_the_group_in_one_zone(kueue: TwinCluster) -> None:
    running_pods(kueue)
    old = deactivate_and_drain(kueue)
    annotate(kueue, {REQUIRED: ZONE, GROUP: "llm"})
    kueue.store.delete(WORKLOADS, old["metadata"]["name"], namespace="ml")
    wait(lambda: (w := workload(kueue)) is not None and w["metadata"]["uid"] != old["metadata"][
        "uid"] and condition(w, "Admitted").get("status") == "True", timeout=20,
         what="a new Workload admitted")  # fmt: skip
    placed = running_pods(kueue)
    assert set(placed.values()) == {"us-east-1a"}
    found = workload(kueue)
    assert found is not None
    assert [p["topologyRequest"] for p in found["spec"]["podSets"]] == [
        {"required": ZONE, "podIndexLabel": "training.kubeflow.org/replica-index",
         "podSetGroupName": "llm"}] * 2
    master, worker = found["status"]["admission"]["podSetAssignments"]
    assert master["topologyAssignment"]["domains"] == [{"values": ["gpu-a-0"], "count": 1}]
    assert worker["topologyAssignment"]["domains"] == [{"values": ["gpu-a-0"], "count": 4}]
    assert stored_job(kueue)["spec"]["runPolicy"]["suspend"] is False


def test_a_group_that_no_zone_can_hold_stays_pending_with_kueues_message(
    kueue: TwinCluster,
) -> None:
    running_pods(kueue)
    old = deactivate_and_drain(kueue)
    annotate(kueue, {REQUIRED: ZONE, GROUP: "llm"})
    worker = stored_job(kueue)["spec"]["pytorchReplicaSpecs"]["Worker"]
    containers = copy.deepcopy(worker["template"]["spec"]["containers"])
    containers[0]["resources"]["requests"]["memory"] = "100Gi"  # five per GPU node: ten per zone
    patch_job(kueue, {"spec": {"pytorchReplicaSpecs": {"Worker": {
        "replicas": 12, "template": {"spec": {"containers": containers}}}}}})
    kueue.store.delete(WORKLOADS, old["metadata"]["name"], namespace="ml")

    def pending() -> dict[str, Any] | None:
        found = workload(kueue)
        fresh = found is not None and found["metadata"]["uid"] != old["metadata"]["uid"]
        return found if fresh and condition(found, "QuotaReserved").get("reason") == "Pending" else None

    found = wait(pending, timeout=20, what="the new grouped Workload pending")
    assert condition(found, "QuotaReserved")["message"] == (
        'couldn\'t assign flavors to pod set master: topology "default" allows to fit only 10 out '
        'of 12 pod(s); couldn\'t assign flavors to pod set worker: topology "default" allows to '
        "fit only 10 out of 12 pod(s)")
    assert stored_job(kueue)["spec"]["runPolicy"]["suspend"] is True


# --- Kueue owns suspend ---------------------------------------------------------------------


def test_kueue_resumes_a_job_someone_else_suspended(kueue: TwinCluster) -> None:
    running_pods(kueue)
    patch_job(kueue, {"spec": {"runPolicy": {"suspend": True}}})
    wait(lambda: len(events_for(kueue, "llm-finetune", "Started")) == 1 and stored_job(kueue)["spec"][
        "runPolicy"]["suspend"] is False, timeout=20, what="Kueue unsuspending the job")
    wait(lambda: events_for(kueue, "llm-finetune", "Started")[0].get("count") == 2, timeout=10,
         what="a second Started event")  # fmt: skip
    assert condition(workload(kueue), "Admitted")["status"] == "True"
    running_pods(kueue)


def test_a_running_job_is_stopped_while_its_workload_is_not_admitted(kueue: TwinCluster) -> None:
    running_pods(kueue)
    deactivate_and_drain(kueue)
    patch_job(kueue, {"spec": {"runPolicy": {"suspend": False}}})
    wait(lambda: stored_job(kueue)["spec"]["runPolicy"]["suspend"] is True, timeout=10,
         what="Kueue suspending the job again")  # fmt: skip
    wait(lambda: not pods(kueue), timeout=20, what="the pods it had started gone")
    # still evicted (inactive): stopped again for the same reason, the event counted twice
    [stopped] = events_for(kueue, "llm-finetune", "Stopped")
    assert (stopped["message"], stopped["count"]) == ("The workload is deactivated", 2)


# --- webhooks -------------------------------------------------------------------------------


def test_a_job_without_the_queue_label_is_not_kueues(kueue: TwinCluster) -> None:
    unqueued = second_job("free", gpus=1)
    del unqueued["metadata"]["labels"]
    created = kueue.store.create(PYTORCHJOBS, unqueued)
    assert created["spec"]["runPolicy"]["suspend"] is False
    wait(lambda: len(pods(kueue, selector="training.kubeflow.org/job-name=free")) == 2,
         timeout=10, what="the unqueued job's pods")  # fmt: skip
    assert workload(kueue, "free") is None


def test_the_validating_webhook_refuses_bad_topology_annotations(kueue: TwinCluster) -> None:
    bad = second_job("bad", gpus=1)
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["annotations"] = {
        REQUIRED: ZONE, "kueue.x-k8s.io/podset-preferred-topology": ZONE, GROUP: "7"}
    with pytest.raises(ApiError) as refused:
        kueue.store.create(PYTORCHJOBS, bad)
    assert refused.value.code == 403
    assert refused.value.message == (
        'admission webhook "vpytorchjob.kb.io" denied the request: [spec.pytorchReplicaSpecs'
        "[Master].template.metadata.annotations: Invalid value: must not contain more than one "
        'topology annotation: ["kueue.x-k8s.io/podset-required-topology", '
        '"kueue.x-k8s.io/podset-preferred-topology", '
        '"kueue.x-k8s.io/podset-unconstrained-topology"], spec.pytorchReplicaSpecs[Master]'
        ".template.metadata.annotations[kueue.x-k8s.io/podset-group-name]: Invalid value: "
        '"7": must not be a number]')
    with pytest.raises(ApiError, match="PyTorchJob|pytorchjobs"):
        kueue.store.get(PYTORCHJOBS, "bad", namespace="ml")


def test_the_queue_name_cannot_change_while_the_job_runs(kueue: TwinCluster) -> None:
    running_pods(kueue)
    with pytest.raises(ApiError) as refused:
        patch_job(kueue, {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "other"}}})
    assert refused.value.code == 403
    assert refused.value.message.endswith(
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "other": field is immutable')


def test_the_pod_sets_of_a_workload_holding_quota_cannot_change(kueue: TwinCluster) -> None:
    running_pods(kueue)
    found = workload(kueue)
    assert found is not None
    sets = copy.deepcopy(found["spec"]["podSets"])
    sets[1]["count"] = 2
    with pytest.raises(ApiError) as refused:
        patch_workload(kueue, {"spec": {"podSets": sets}})
    assert refused.value.code == 403 and "vworkload.kb.io" in refused.value.message


# --- other kinds and the end of a job -------------------------------------------------------


def test_a_queued_batch_job_runs_through_kueue(kueue: TwinCluster) -> None:
    running_pods(kueue)
    created = kueue.store.create(JOBS, {
        "metadata": {"name": "preprocess", "namespace": "ml",
                     "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}],
        }}},
    })  # fmt: skip
    assert created["spec"]["suspend"] is True
    wait(lambda: (w := next((w for w in kueue.store.list(WORKLOADS, namespace="ml")[0]
                             if w["metadata"]["name"].startswith("job-preprocess-")), None))
         and condition(w, "Admitted").get("status") == "True", timeout=15,
         what="the batch Job's Workload admitted")  # fmt: skip
    wait(lambda: len([p for p in pods(kueue, selector="batch.kubernetes.io/job-name=preprocess")
                      if p["spec"].get("nodeName")]) == 2, timeout=15,
         what="the batch Job's pods ungated and bound")  # fmt: skip
    bound = pods(kueue, selector="batch.kubernetes.io/job-name=preprocess")
    assert all(p["spec"]["nodeSelector"].get("kubernetes.io/hostname") for p in bound)


def test_a_workload_finishes_when_its_job_succeeds() -> None:
    scenario = fast("kueue")
    objects = copy.deepcopy(scenario.objects)
    objects[-1]["metadata"]["annotations"] = {"twin.zonemedic.io/steps": "2",
                                              "twin.zonemedic.io/compute-seconds": "0.05"}
    with running(replace(scenario, objects=objects)) as cluster:
        wait(lambda: condition(workload(cluster), "Finished").get("status") == "True",
             timeout=30, what="the Workload finished")  # fmt: skip
        found = workload(cluster)
        assert condition(found, "Finished")["reason"] == "Succeeded"
        wait(lambda: not (workload(cluster) or {}).get("metadata", {}).get("finalizers"),
             timeout=10, what="the finalizer dropped")  # fmt: skip
        wait(lambda: cluster.store.get(CLUSTER_QUEUES, "cluster-queue").get("status", {}).get(
            "reservingWorkloads") == 0, timeout=10, what="the quota released")


def test_scenario_objects_of_kueue_need_kueue() -> None:
    cluster = TwinCluster(replace(fast("kueue"), kueue=None))
    with pytest.raises(ScenarioError, match="kueue.x-k8s.io objects need Kueue"):
        cluster.start()  # and stops what it started
