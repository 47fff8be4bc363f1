"""The twin's Kueue integration of TrainJob (Trainer v2.3) and JobSet, in process: Kueue's own
runtime-patch entry on a TrainJob, the pod sets of its runtime's JobSet, admission written into
that entry (the JobSet carrying it), implied TAS splitting the one pod set across zones, the
deactivation emptying the entry, and the fix through Kueue (zone-level request, Workload deleted
and rebuilt) landing both kinds in one zone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent.twin.cluster import TwinCluster
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from tests.support.waiting import wait
from tests.twin.twin_fixtures import fast, pods, running

WORKLOADS = lookup("workloads", group="kueue.x-k8s.io")
TRAINJOBS = lookup("trainjobs")
JOBSETS = lookup("jobsets")
JOBS = lookup("jobs", group="batch")
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
NODES = lookup("nodes")
ZONE = "topology.kubernetes.io/zone"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_MANAGER = "kueue.x-k8s.io/manager"
OURS = "zonemedic.io/remediation"


@pytest.fixture
def trainjob() -> Iterator[TwinCluster]:
    with running(fast("kueue-trainjob")) as cluster:
        yield cluster


@pytest.fixture
def jobset() -> Iterator[TwinCluster]:
    with running(fast("kueue-jobset")) as cluster:
        yield cluster


def the_workload(cluster: TwinCluster) -> dict[str, Any] | None:
    found = cluster.store.list(WORKLOADS, namespace="ml")[0]
    return found[0] if len(found) == 1 else None


def condition(obj: dict[str, Any] | None, kind: str) -> str | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return str(c["status"])
    return None


def running_zones(cluster: TwinCluster, count: int = 4) -> dict[str, int]:
    def check() -> dict[str, int] | None:
        node_zone = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE]
                     for n in cluster.store.list(NODES)[0]}  # fmt: skip
        live = [p for p in pods(cluster) if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]  # fmt: skip
        if len(live) != count:
            return None
        out: dict[str, int] = {}
        for p in live:
            zone = node_zone[p["spec"]["nodeName"]]
            out[zone] = out.get(zone, 0) + 1
        return out

    return wait(check, timeout=25, what=f"{count} running pods")


def kueue_entry(cluster: TwinCluster) -> dict[str, Any]:
    job = cluster.store.get(TRAINJOBS, "llm-pretrain", namespace="ml")
    (entry,) = [p for p in job["spec"]["runtimePatches"] if p["manager"] == KUEUE_MANAGER]
    return dict(entry)


def deactivate(cluster: TwinCluster) -> None:
    found = the_workload(cluster)
    assert found is not None
    cluster.store.patch(WORKLOADS, found["metadata"]["name"], {"spec": {"active": False}},
                        namespace="ml", patch_type=PatchType.MERGE)  # fmt: skip
    wait(lambda: not pods(cluster) and condition(the_workload(cluster), "QuotaReserved") == "False",
         timeout=25, what="the job stopped and its quota released")  # fmt: skip


def renew_children(cluster: TwinCluster) -> None:
    """Delete the suspended child Jobs: the JobSet's resume merges its template's annotations over
    theirs and never removes one, so a child keeping Kueue's first `podset-unconstrained-topology`
    beside the new required level would be refused by Kueue's Job webhook; the JobSet controller
    creates them again from the annotated template."""
    for job in cluster.store.list(JOBS, namespace="ml")[0]:
        cluster.store.delete(JOBS, job["metadata"]["name"], namespace="ml")
    wait(lambda: [j for j in cluster.store.list(JOBS, namespace="ml")[0]
                  if UNCONSTRAINED not in j["spec"]["template"]["metadata"].get("annotations", {})],
         timeout=25, what="the child Jobs created again")  # fmt: skip


def requeue(cluster: TwinCluster, old_uid: str) -> dict[str, Any]:
    found = the_workload(cluster)
    assert found is not None
    cluster.store.delete(WORKLOADS, found["metadata"]["name"], namespace="ml")

    def rebuilt() -> dict[str, Any] | None:
        wl = the_workload(cluster)
        ok = wl is not None and wl["metadata"]["uid"] != old_uid and condition(wl, "Admitted") == "True"
        return wl if ok else None

    return wait(rebuilt, timeout=25, what="a rebuilt Workload admitted")


def test_a_queued_trainjob_gets_kueues_entry_and_its_runtimes_pod_sets(trainjob: TwinCluster) -> None:
    assert running_zones(trainjob) == {"us-east-1a": 1, "us-east-1b": 3}  # implied TAS split it
    wl = the_workload(trainjob)
    assert wl is not None and wl["metadata"]["name"].startswith("trainjob-llm-pretrain-")
    (pod_set,) = wl["spec"]["podSets"]  # the `node` replicated job: rank 0 and the others
    assert (pod_set["name"], pod_set["count"]) == ("node", 4)
    assert pod_set["topologyRequest"] == {
        "podIndexLabel": "batch.kubernetes.io/job-completion-index",
        "subGroupIndexLabel": "jobset.sigs.k8s.io/job-index", "subGroupCount": 1}
    entry = kueue_entry(trainjob)  # the admission went into Kueue's entry, not the runtime
    (rjob,) = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    template = rjob["template"]["spec"]["template"]
    assert rjob["name"] == "node"
    assert template["metadata"]["labels"] == {"kueue.x-k8s.io/podset": "node"}
    assert template["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == wl["metadata"]["name"]
    assert template["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/topology"}]
    js = trainjob.store.get(JOBSETS, "llm-pretrain", namespace="ml")
    assert js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"][
        "kueue.x-k8s.io/podset"] == "node"  # the Trainer carried it into the JobSet


def test_the_fix_through_kueue_places_a_trainjob_in_one_zone(trainjob: TwinCluster) -> None:
    running_zones(trainjob)
    old = the_workload(trainjob)
    assert old is not None
    deactivate(trainjob)
    job = trainjob.store.get(TRAINJOBS, "llm-pretrain", namespace="ml")
    assert job["spec"]["suspend"] is True
    assert "replicatedJobs" not in kueue_entry(trainjob)["trainingRuntimeSpec"]["template"]["spec"]
    ours = {"manager": OURS, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"metadata": {
            "annotations": {REQUIRED: ZONE}}}}}}]}}}}  # fmt: skip
    patches = list(job["spec"]["runtimePatches"])
    trainjob.store.patch(TRAINJOBS, "llm-pretrain", {"spec": {"runtimePatches": [*patches, ours]}},
                         namespace="ml", patch_type=PatchType.MERGE)  # fmt: skip
    renew_children(trainjob)
    rebuilt = requeue(trainjob, old["metadata"]["uid"])
    assert rebuilt["spec"]["podSets"][0]["topologyRequest"]["required"] == ZONE
    (assignment,) = rebuilt["status"]["admission"]["podSetAssignments"]
    assert assignment["topologyAssignment"]["levels"] == ["kubernetes.io/hostname"]
    assert running_zones(trainjob) == {"us-east-1a": 4}
    assert trainjob.store.get(TRAINJOBS, "llm-pretrain", namespace="ml")["spec"]["suspend"] is False


def test_the_fix_through_kueue_places_a_jobset_in_one_zone(jobset: TwinCluster) -> None:
    assert running_zones(jobset) == {"us-east-1a": 1, "us-east-1b": 3}
    old = the_workload(jobset)
    assert old is not None and old["metadata"]["name"].startswith("jobset-pytorch-ddp-")
    deactivate(jobset)
    js = jobset.store.get(JOBSETS, "pytorch-ddp", namespace="ml")
    assert js["spec"]["suspend"] is True
    rjobs = js["spec"]["replicatedJobs"]
    template = rjobs[0]["template"]["spec"]["template"]
    assert "kueue.x-k8s.io/podset" not in (template["metadata"].get("labels") or {})  # restored
    template.setdefault("metadata", {}).setdefault("annotations", {})[REQUIRED] = ZONE
    jobset.store.patch(JOBSETS, "pytorch-ddp", {"spec": {"replicatedJobs": rjobs}}, namespace="ml",
                       patch_type=PatchType.MERGE)  # fmt: skip
    renew_children(jobset)
    rebuilt = requeue(jobset, old["metadata"]["uid"])
    assert rebuilt["spec"]["podSets"][0]["topologyRequest"]["required"] == ZONE
    assert running_zones(jobset) == {"us-east-1a": 4}
