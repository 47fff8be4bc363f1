"""The Kubeflow Trainer controller on the whole twin, driven through the official client over
HTTP: TrainJob -> JobSet (name, owner, nodes, env, resources, initializer first), the remediation
sequence with runtime patches per release (v2.3: patch and resume in one request; v2.2: patch
while suspended, then resume), an affinity patch the JobSet webhook refuses, MPI's hostfile and
launcher, and completion."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from agent.twin import jobset_children as js
from agent.twin import kubeconfig
from agent.twin.cluster import TwinCluster
from agent.twin.resources import lookup
from agent.twin.training import JobPhase
from tests.support.waiting import wait as wait_for
from tests.twin.twin_fixtures import fast, pods, wait

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
JOBSETS = lookup("jobsets")
BATCH_JOBS = lookup("jobs", group="batch")
NODES = lookup("nodes")
ZONE = "topology.kubernetes.io/zone"
GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
DENIED = 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '


@pytest.fixture
def twin(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[TwinCluster, Any]]:
    with TwinCluster(fast(request.param)) as cluster:
        server = cluster.serve_api()
        api = config.new_client_from_config(
            config_file=str(kubeconfig.write(tmp_path / "kubeconfig", server.url)))
        try:
            yield cluster, client.CustomObjectsApi(api)
        finally:
            api.close()


def gang(cluster: TwinCluster, name: str) -> list[dict[str, Any]]:
    return [p for p in pods(cluster, selector=f"{js.JOBSET_NAME}={name}")
            if not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") not in ("Succeeded", "Failed")]


def zones(cluster: TwinCluster, found: list[dict[str, Any]]) -> dict[str, str]:
    return {p["metadata"]["name"]: str(cluster.store.get(NODES, p["spec"]["nodeName"])[
        "metadata"]["labels"][ZONE]) for p in found if p["spec"].get("nodeName")}


def running(cluster: TwinCluster, name: str, count: int) -> bool:
    found = gang(cluster, name)
    return len(found) == count and all(p["status"].get("phase") == "Running" for p in found)


def inactive(cluster: TwinCluster, name: str) -> bool:
    status = cluster.store.get(JOBSETS, name, namespace="ml").get("status") or {}
    return all(s["active"] == 0 for s in status.get("replicatedJobsStatus") or [])


def entry(rjob: str, **pod: Any) -> dict[str, Any]:
    return {"manager": "zonemedic.io/remediation", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": rjob, "template": {"spec": {"template": {"spec": pod}}}}]}}}}


def denial(err: ApiException) -> tuple[int, str, str]:
    body = orjson.loads(err.body)
    return err.status, body["reason"], body["message"]


@pytest.mark.parametrize("twin", ["trainjob"], indirect=True)
def test_trainjob_becomes_a_jobset(twin: tuple[TwinCluster, Any]) -> None:
    cluster, custom = twin
    init_done_when_nodes_came: list[bool] = []

    def on_job(event: Any) -> None:
        if event.type == "ADDED" and event.object["metadata"]["name"] == "llm-pretrain-node-0":
            init = cluster.store.get(BATCH_JOBS, "llm-pretrain-dataset-initializer-0",
                                     namespace="ml")
            init_done_when_nodes_came.append(any(
                c["type"] == "Complete" and c["status"] == "True"
                for c in (init.get("status") or {}).get("conditions") or []))

    unsubscribe = cluster.store.subscribe(BATCH_JOBS, on_job, since="0")
    try:
        wait(cluster, lambda: running(cluster, "llm-pretrain", 4), timeout=20)
    finally:
        unsubscribe()
    assert init_done_when_nodes_came == [True]
    trainjob = custom.get_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs",
                                                   "llm-pretrain")
    jobset = custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "ml", "jobsets",
                                                 "llm-pretrain")
    (owner,) = jobset["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "TrainJob", trainjob["metadata"]["uid"], True)
    node = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "node")
    assert (node["template"]["spec"]["parallelism"], node["template"]["spec"]["completions"]) == (4, 4)
    rank0 = next(p for p in gang(cluster, "llm-pretrain")
                 if p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "0")
    container = rank0["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PET_MASTER_ADDR"] == "llm-pretrain-node-0-0.llm-pretrain"
    assert (env["PET_MASTER_PORT"], env["PET_NNODES"], env["PET_NPROC_PER_NODE"]) == (
        "29500", "4", "auto")
    assert (rank0["spec"]["hostname"], rank0["spec"]["subdomain"]) == (
        "llm-pretrain-node-0-0", "llm-pretrain")
    assert container["image"] == "registry.example.com/llm-pretrain:2.0"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "4"
    assert set(zones(cluster, gang(cluster, "llm-pretrain")).values()) == {"us-east-1a",
                                                                           "us-east-1b"}
    wait(cluster, lambda: {s["name"]: s.get("active") for s in (custom.get_namespaced_custom_object(
        GROUP, VERSION, "ml", "trainjobs", "llm-pretrain").get("status") or {}).get(
        "jobsStatus") or []} == {"dataset-initializer": 0, "node": 1})
    assert "conditions" not in custom.get_namespaced_custom_object(
        GROUP, VERSION, "ml", "trainjobs", "llm-pretrain")["status"]  # no Created / Running


@pytest.mark.parametrize("twin", ["trainjob"], indirect=True)
def test_v23_remediation_patch_and_resume_in_one_request(twin: tuple[TwinCluster, Any]) -> None:
    cluster, custom = twin
    wait(cluster, lambda: running(cluster, "llm-pretrain", 4), timeout=20)
    fix = entry("node", nodeSelector={ZONE: "us-east-1a"})
    with pytest.raises(ApiException) as err:  # suspending with the patch: Jobs still active
        custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", "llm-pretrain",
                                              {"spec": {"suspend": True, "runtimePatches": [fix]}})
    assert denial(err.value) == (403, "Forbidden", DENIED + "spec.runtimePatches: Forbidden: "
                                 "RuntimePatches cannot be modified when the JobSet's "
                                 "ReplicatedJob node is still active")
    custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", "llm-pretrain",
                                          {"spec": {"suspend": True}})
    wait(cluster, lambda: inactive(cluster, "llm-pretrain"))
    custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", "llm-pretrain",
                                          {"spec": {"suspend": False, "runtimePatches": [fix]}})
    wait(cluster, lambda: running(cluster, "llm-pretrain", 4)
         and set(zones(cluster, gang(cluster, "llm-pretrain")).values()) == {"us-east-1a"},
         timeout=20)
    jobset = cluster.store.get(JOBSETS, "llm-pretrain", namespace="ml")
    node = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "node")
    assert node["template"]["spec"]["template"]["spec"]["nodeSelector"] == {ZONE: "us-east-1a"}
    def resumed() -> dict[str, Any] | None:
        found = custom.get_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs",
                                                    "llm-pretrain")
        conditions = (found.get("status") or {}).get("conditions") or []
        return found if [c["status"] for c in conditions] == ["False"] else None

    trainjob = wait_for(resumed, timeout=10, what="the TrainJob's Suspended condition False")
    (suspended,) = trainjob["status"]["conditions"]
    assert (suspended["type"], suspended["status"], suspended["reason"], suspended["message"]) == (
        "Suspended", "False", "Resumed", "TrainJob is resumed")
    (patch,) = trainjob["spec"]["runtimePatches"]
    assert patch["time"]  # the Trainer's defaulting webhook stamps each written entry
    wait(cluster, lambda: cluster.runtime.job_state("ml", "llm-pretrain").phase
         is JobPhase.TRAINING)
    timing = cluster.runtime.job_state("ml", "llm-pretrain").timing
    assert timing is not None and 0.8 < timing.utilization < 0.9  # co-located: ~86%


@pytest.mark.parametrize("twin", ["trainjob"], indirect=True)
def test_an_affinity_patch_is_refused_by_the_jobset_webhook(twin: tuple[TwinCluster, Any]) -> None:
    cluster, custom = twin
    wait(cluster, lambda: running(cluster, "llm-pretrain", 4), timeout=20)
    custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", "llm-pretrain",
                                          {"spec": {"suspend": True}})
    wait(cluster, lambda: inactive(cluster, "llm-pretrain"))
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": ZONE, "operator": "In", "values": ["us-east-1a"]}]}]}}}
    # the TrainJob accepts it (affinity is a field runtime patches may set) ...
    custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", "llm-pretrain",
                                          {"spec": {"runtimePatches": [entry("node", affinity=affinity)]}})
    expected = ('TrainJob resources reconciliation failed: admission webhook "vjobset.kb.io" '
                'denied the request: JobSet.jobset.x-k8s.io "llm-pretrain" is invalid: '
                "spec.replicatedJobs: Invalid value: []v1alpha2.ReplicatedJob{...}: field is "
                "immutable")

    def refused() -> bool:
        return any(e["reason"] == "TrainJobResourcesCreationFailed" and e["type"] == "Warning"
                   and e["message"] == expected and e["involvedObject"]["name"] == "llm-pretrain"
                   for e in cluster.store.list(lookup("events"), namespace="ml")[0])

    # ... but the JobSet it would change cannot take it, and keeps its template
    wait(cluster, refused)
    jobset = cluster.store.get(JOBSETS, "llm-pretrain", namespace="ml")
    node = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "node")
    assert "affinity" not in node["template"]["spec"]["template"]["spec"]


@pytest.mark.parametrize("twin", ["trainjob-mpi"], indirect=True)
def test_v22_mpi_launcher_blocked_then_moved_alone(twin: tuple[TwinCluster, Any]) -> None:
    cluster, custom = twin
    # all five placed (created is not enough: the launcher may not be bound yet)
    wait(cluster, lambda: len(zones(cluster, gang(cluster, "mpi-pretrain"))) == 5, timeout=20)
    hostfile = cluster.store.get(lookup("configmaps"), "mpi-pretrain-mpi-hostfile", namespace="ml")
    assert hostfile["data"]["hostfile"] == "".join(
        f"mpi-pretrain-node-0-{i}.mpi-pretrain slots=1\n" for i in range(4))
    cluster.store.get(lookup("secrets"), "mpi-pretrain-mpi-ssh-auth", namespace="ml")
    placed = zones(cluster, gang(cluster, "mpi-pretrain"))
    launcher = next(n for n in placed if "-launcher-" in n)
    assert placed[launcher] == "us-east-1b"
    assert {z for n, z in placed.items() if n != launcher} == {"us-east-1a"}

    def drops() -> dict[tuple[str, str], int]:
        return {(k.source_pod, k.destination_pod): v for k, v in cluster.runtime.drops().items()
                if k.reason == "POLICY_DENIED"}

    wait(cluster, lambda: any(src == launcher for src, _ in drops()))
    assert all(src == launcher and "-node-" in dst for src, dst in drops())
    fix = entry("launcher", nodeSelector={ZONE: "us-east-1a"}, tolerations=[GPU])
    custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", "mpi-pretrain",
                                          {"spec": {"suspend": True}})
    wait(cluster, lambda: inactive(cluster, "mpi-pretrain"))
    with pytest.raises(ApiException) as err:  # v2.2: the new object must be suspended
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, "ml", "trainjobs", "mpi-pretrain",
            {"spec": {"suspend": False, "runtimePatches": [fix]}})
    assert denial(err.value) == (403, "Forbidden", DENIED + "spec.runtimePatches: Forbidden: "
                                 "RuntimePatches can only be modified when the TrainJob is "
                                 "suspended")
    custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", "mpi-pretrain",
                                          {"spec": {"runtimePatches": [fix]}})
    custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", "mpi-pretrain",
                                          {"spec": {"suspend": False}})
    wait(cluster, lambda: running(cluster, "mpi-pretrain", 5)
         and set(zones(cluster, gang(cluster, "mpi-pretrain")).values()) == {"us-east-1a"},
         timeout=20)
    wait(cluster, lambda: cluster.runtime.job_state("ml", "mpi-pretrain").phase
         is JobPhase.TRAINING)
    state = cluster.runtime.job_state("ml", "mpi-pretrain")
    assert len(state.participants) == 4  # the launcher holds no GPU rank
    assert all("-node-" in name for name in state.participants)
    # only the launcher moved: the node Jobs' templates carry no zone pin
    node_job = cluster.store.get(BATCH_JOBS, "mpi-pretrain-node-0", namespace="ml")
    assert ZONE not in (node_job["spec"]["template"]["spec"].get("nodeSelector") or {})


@pytest.mark.parametrize("twin", ["trainjob"], indirect=True)
def test_a_trainjob_completes(twin: tuple[TwinCluster, Any]) -> None:
    _, custom = twin
    custom.create_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob",
        "metadata": {"name": "short", "annotations": {"twin.zonemedic.io/steps": "3",
                                                      "twin.zonemedic.io/compute-seconds": "0.05"}},
        "spec": {"runtimeRef": {"name": "torch-distributed-with-dataset"},
                 "trainer": {"numNodes": 1, "resourcesPerNode": {
                     "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}}})

    def complete() -> dict[str, Any] | None:
        status = custom.get_namespaced_custom_object(GROUP, VERSION, "ml", "trainjobs",
                                                     "short").get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["type"] == "Complete"), None)

    done = wait_for(complete, timeout=30, what="the TrainJob's Complete condition")
    assert (done["status"], done["reason"], done["message"]) == (
        "True", "AllJobsCompleted", "jobset completed successfully")
