"""Why Kueue let a job split, table-driven over the job's PodSet requests and the cluster's Kueue
configuration, and the configuration each cause proposes (parsed back as YAML)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import yaml

from agent.diagnosis.diagnose import diagnose_cluster
from agent.diagnosis.kueue import kueue_advice
from agent.model.cluster import ZONE_LABEL, TrainingJobObject
from agent.model.kueue import (
    ClusterQueue,
    KueueCause,
    KueueFlavor,
    KueueObjects,
    KueueTopology,
    KueueWorkload,
    LocalQueue,
    PodSetAssignment,
    PodSetTopology,
    wanted_annotations,
)
from agent.model.workload import KUEUE, JobKind
from agent.settings import DiagnosisSettings
from agent.snapshot.collection import parse_objects
from tests.support import objects

REGION = "topology.kubernetes.io/region"
HOST = "kubernetes.io/hostname"


def job(topology: dict[str, PodSetTopology] | None = None, *, queue: str | None = "user-queue",
        pod_sets: tuple[str, ...] = ("Master", "Worker")) -> TrainingJobObject:
    labels = {KUEUE.queue_label: queue} if queue else {}
    return TrainingJobObject(kind=JobKind.PYTORCH, namespace="ml", name="llm", labels=labels,
                             topology=topology or {}, pod_sets=pod_sets)  # fmt: skip


def kueue(*, levels: tuple[str, ...] | None = (ZONE_LABEL, HOST), topology_name: str | None = "t",
          admitted_flavor: str | None = None) -> KueueObjects:
    topologies = {"t": KueueTopology("t", levels)} if levels is not None else {}
    workloads = {}
    if admitted_flavor is not None:
        workloads[("ml", "pytorchjob-llm-1")] = KueueWorkload(
            "ml", "pytorchjob-llm-1", queue="user-queue", admitted=True, cluster_queue="cq",
            owner_kind="PyTorchJob", owner_name="llm",
            assignments=(PodSetAssignment("worker", {"nvidia.com/gpu": admitted_flavor}),))
    return KueueObjects(
        topologies=topologies,
        flavors={"gpu": KueueFlavor("gpu", topology_name), "plain": KueueFlavor("plain")},
        cluster_queues={"cq": ClusterQueue("cq", ("gpu",))},
        local_queues={("ml", "user-queue"): LocalQueue("ml", "user-queue", "cq")},
        workloads=workloads,
    )  # fmt: skip


ZONE = PodSetTopology(required=ZONE_LABEL, group="g")

CASES: list[tuple[str, TrainingJobObject, KueueObjects, KueueCause | None, bool]] = [
    ("no request", job(), kueue(), KueueCause.NO_REQUEST, True),
    ("unconstrained only", job({"Master": PodSetTopology(unconstrained=True),
                                "Worker": PodSetTopology(unconstrained=True)}), kueue(),
     KueueCause.NO_REQUEST, True),
    ("one pod set bare", job({"Master": ZONE}), kueue(), KueueCause.NO_REQUEST, True),
    ("region", job({"Master": PodSetTopology(required=REGION), "Worker": PodSetTopology(
        required=REGION)}), kueue(levels=(REGION, ZONE_LABEL, HOST)), KueueCause.WIDER_THAN_ZONE,
     True),
    ("a level the topology lacks", job({"Master": PodSetTopology(required="rack"),
                                        "Worker": ZONE}), kueue(), KueueCause.WIDER_THAN_ZONE, True),
    ("preferred", job({"Master": PodSetTopology(preferred=ZONE_LABEL, group="g"), "Worker": ZONE}),
     kueue(), KueueCause.PREFERRED_ONLY, True),
    ("ungrouped", job({"Master": PodSetTopology(required=ZONE_LABEL),
                       "Worker": PodSetTopology(required=ZONE_LABEL)}), kueue(),
     KueueCause.UNGROUPED, True),
    ("two groups", job({"Master": PodSetTopology(required=ZONE_LABEL, group="a"),
                        "Worker": PodSetTopology(required=ZONE_LABEL, group="b")}), kueue(),
     KueueCause.UNGROUPED, True),
    ("three pod sets cannot be grouped", job({}, pod_sets=("Chief", "PS", "Worker")), kueue(),
     KueueCause.NO_REQUEST, False),
    ("no topology", job(), kueue(levels=None), KueueCause.TAS_NOT_CONFIGURED, False),
    ("no zone level", job(), kueue(levels=(HOST,)), KueueCause.TAS_NOT_CONFIGURED, False),
    ("no topologyName", job(), kueue(topology_name=None), KueueCause.TAS_NOT_CONFIGURED, False),
    ("admitted on a flavor without TAS", job(), kueue(admitted_flavor="plain"),
     KueueCause.TAS_NOT_CONFIGURED, False),
    ("admitted on the TAS flavor", job(), kueue(admitted_flavor="gpu"), KueueCause.NO_REQUEST, True),
    ("zone and grouped: something else split it", job({"Master": ZONE, "Worker": ZONE}), kueue(),
     None, False),
    ("not Kueue's", job(queue=None), kueue(), None, False),
]  # fmt: skip


@pytest.mark.parametrize(("obj", "objects", "cause", "fixable"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_the_cause(obj: TrainingJobObject, objects: KueueObjects, cause: KueueCause | None,
                   fixable: bool) -> None:  # fmt: skip
    advice = kueue_advice(obj, objects)
    assert (advice.cause if advice is not None else None) == cause
    assert (advice.agent_fixable if advice is not None else False) == fixable


def test_no_job_object_no_advice() -> None:
    assert kueue_advice(None, kueue()) is None


def test_tas_not_configured_proposes_a_topology_and_the_flavor_naming_it() -> None:
    advice = kueue_advice(job(), kueue(levels=None))
    assert advice is not None and advice.queue == "user-queue" and advice.cluster_queue == "cq"
    docs = list(yaml.safe_load_all(advice.proposal))
    topology, flavor, annotations = docs
    assert topology["kind"] == "Topology"
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [ZONE_LABEL, HOST]
    assert (flavor["kind"], flavor["metadata"]["name"], flavor["spec"]["topologyName"]) == (
        "ResourceFlavor", "gpu", topology["metadata"]["name"])
    assert set(annotations["spec"]["pytorchReplicaSpecs"]) == {"Master", "Worker"}


def test_an_existing_zone_topology_is_reused() -> None:
    objects = kueue(topology_name=None)
    advice = kueue_advice(job(), objects)
    assert advice is not None
    flavor = next(iter(yaml.safe_load_all(advice.proposal)))
    assert flavor["kind"] == "ResourceFlavor" and flavor["spec"]["topologyName"] == "t"


def test_the_job_side_proposal_is_a_merge_patch_of_the_templates() -> None:
    advice = kueue_advice(job({"Master": PodSetTopology(preferred=ZONE_LABEL)}), kueue())
    assert advice is not None
    patch: dict[str, Any] = yaml.safe_load(advice.proposal)
    specs = patch["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["template"]["metadata"]["annotations"] == {
        KUEUE.topology_annotation: ZONE_LABEL, KUEUE.group_annotation: "llm",
        KUEUE.preferred_annotation: None}
    assert specs["Worker"]["template"]["metadata"]["annotations"] == {
        KUEUE.topology_annotation: ZONE_LABEL, KUEUE.group_annotation: "llm"}


@pytest.mark.parametrize(("name", "group"), [("llm", "llm"), ("42", "job-42")])
def test_the_group_name_is_never_a_number(name: str, group: str) -> None:
    wanted = wanted_annotations(name, ("Master", "Worker"), {})
    assert {a[KUEUE.group_annotation] for a in wanted.values()} == {group}


def test_a_gang_of_more_than_two_pod_sets_gets_advice_only_saying_why() -> None:
    obj = TrainingJobObject(kind=JobKind.JOBSET, namespace="ml", name="llm",
                            labels={KUEUE.queue_label: "user-queue"},
                            pod_sets=("driver", "workers", "ps"))  # fmt: skip
    advice = kueue_advice(obj, kueue())
    assert advice is not None and not advice.agent_fixable
    assert "spans 3 PodSets (driver, workers, ps)" in advice.message
    assert "groups exactly two, one of them a single pod" in advice.message
    assert "zonemedic writes nothing" in advice.message
    patch, flavor = list(yaml.safe_load_all(advice.proposal))
    # each PodSet asked for one zone, none grouped (a group of three is refused by Kueue)
    for rjob in patch["spec"]["replicatedJobs"]:
        annotations = rjob["template"]["spec"]["template"]["metadata"]["annotations"]
        assert annotations == {KUEUE.topology_annotation: ZONE_LABEL}
    assert flavor["kind"] == "ResourceFlavor"
    assert flavor["spec"] == {"nodeLabels": {ZONE_LABEL: "<zone>"}, "topologyName": "t"}


@pytest.mark.parametrize(("kind", "field"), [(JobKind.TRAINJOB, "runtimePatches"),
                                             (JobKind.JOBSET, "replicatedJobs")])  # fmt: skip
def test_a_trainer_family_job_is_fixable_and_proposes_its_own_change(kind: JobKind, field: str) -> None:
    obj = TrainingJobObject(kind=kind, namespace="ml", name="llm",
                            labels={KUEUE.queue_label: "user-queue"}, pod_sets=("node",))  # fmt: skip
    advice = kueue_advice(obj, kueue())
    assert advice is not None and advice.agent_fixable and advice.cause is KueueCause.NO_REQUEST
    (doc,) = list(yaml.safe_load_all(advice.proposal))
    entries: list[dict[str, Any]] = doc["spec"][field]
    if kind is JobKind.TRAINJOB:
        (entry,) = entries
        assert entry["manager"] == "zonemedic.io/remediation"
        entries = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    (rjob,) = entries
    assert rjob["name"] == "node"
    assert rjob["template"]["spec"]["template"]["metadata"]["annotations"] == {
        KUEUE.topology_annotation: ZONE_LABEL}


def counted(counts: dict[str, int], *, kind: JobKind = JobKind.PYTORCH,
            pod_sets: tuple[str, ...] = ("Master", "Worker")) -> TrainingJobObject:
    return TrainingJobObject(kind=kind, namespace="ml", name="llm",
                             labels={KUEUE.queue_label: "user-queue"}, pod_sets=pod_sets,
                             pod_counts=counts)  # fmt: skip


def with_workload(objects: KueueObjects, **kw: Any) -> KueueObjects:
    """`objects` with the job's admitted Workload (PodSets in Kueue's lower-case names)."""
    wl = KueueWorkload("ml", "pytorchjob-llm-1", queue="user-queue", admitted=True,
                       cluster_queue="cq", owner_kind=kw.pop("owner_kind", "PyTorchJob"),
                       owner_name="llm", **kw)  # fmt: skip
    return replace(objects, workloads={("ml", wl.name): wl})


GROUPING: list[tuple[str, TrainingJobObject, KueueObjects, bool]] = [
    ("a single-pod coordinator and its workers", counted({"Master": 1, "Worker": 4}), kueue(), True),
    ("counts unknown: grouped, the plan checks the Workload", counted({}), kueue(), True),
    ("two PodSets of more than one pod each", counted({"Master": 2, "Worker": 4}), kueue(), False),
    ("the Workload's counts win over the job's", counted({"Master": 1, "Worker": 4}),
     with_workload(kueue(), pod_sets=("master", "worker"), counts={"master": 2, "worker": 4}), False),
    ("the Workload's single pod", counted({}),
     with_workload(kueue(), pod_sets=("master", "worker"), counts={"master": 1, "worker": 4}), True),
    ("one PodSet of many pods", counted({"node": 4}, kind=JobKind.JOBSET, pod_sets=("node",)),
     kueue(), True),
]  # fmt: skip


@pytest.mark.parametrize(("obj", "objects", "fixable"), [c[1:] for c in GROUPING],
                         ids=[c[0] for c in GROUPING])
def test_two_pod_sets_are_grouped_only_when_one_is_a_single_pod(
    obj: TrainingJobObject, objects: KueueObjects, fixable: bool
) -> None:
    advice = kueue_advice(obj, objects, zone="us-east-1a")
    assert advice is not None and advice.agent_fixable is fixable
    docs = list(yaml.safe_load_all(advice.proposal))
    assert [d.get("kind") for d in docs] == ([None] if fixable else [None, "ResourceFlavor"])
    if not fixable:
        assert "each run more than one pod (Master: 2 pods and Worker: 4 pods)" in advice.message
        assert "groups exactly two, one of them a single pod" in advice.message
        assert "a flavor of us-east-1a" in advice.message and "zonemedic writes nothing" in advice.message
        # a zone-level request per PodSet, no group name: Kueue refuses a group of two such PodSets
        for spec in docs[0]["spec"]["pytorchReplicaSpecs"].values():
            assert spec["template"]["metadata"]["annotations"] == {KUEUE.topology_annotation: ZONE_LABEL}


@pytest.mark.parametrize(("zone", "where"), [("us-east-1b", "us-east-1b"), (None, "<zone>")])
def test_the_pinned_flavor_names_the_target_zone_when_known(zone: str | None, where: str) -> None:
    obj = TrainingJobObject(kind=JobKind.JOBSET, namespace="ml", name="llm",
                            labels={KUEUE.queue_label: "user-queue"},
                            pod_sets=("driver", "workers", "ps"))  # fmt: skip
    advice = kueue_advice(obj, kueue(), zone=zone)
    assert advice is not None and not advice.agent_fixable
    _, flavor = list(yaml.safe_load_all(advice.proposal))
    assert flavor["metadata"]["name"] == f"gpu-{where}"
    assert flavor["spec"] == {"nodeLabels": {ZONE_LABEL: where}, "topologyName": "t"}


INJECTED = PodSetTopology(unconstrained=True)  # what Kueue puts in a running template asking for no level
OWN: list[tuple[str, dict[str, PodSetTopology], dict[str, PodSetTopology], dict[str, str | None]]] = [
    ("Kueue's injected unconstrained request is not the job's", {"workers": INJECTED}, {},
     {KUEUE.topology_annotation: ZONE_LABEL}),
    ("the job's own unconstrained request is removed", {"workers": INJECTED}, {"workers": INJECTED},
     {KUEUE.topology_annotation: ZONE_LABEL, KUEUE.unconstrained_annotation: None}),
    ("the job's own preferred level is removed", {"workers": INJECTED},
     {"workers": PodSetTopology(preferred=ZONE_LABEL)},
     {KUEUE.topology_annotation: ZONE_LABEL, KUEUE.preferred_annotation: None}),
]  # fmt: skip


@pytest.mark.parametrize(("live", "own", "annotations"), [c[1:] for c in OWN], ids=[c[0] for c in OWN])
def test_a_jobsets_advice_shows_only_the_change_to_its_own_annotations(
    live: dict[str, PodSetTopology], own: dict[str, PodSetTopology], annotations: dict[str, str | None]
) -> None:
    obj = TrainingJobObject(kind=JobKind.JOBSET, namespace="ml", name="llm",
                            labels={KUEUE.queue_label: "user-queue"}, pod_sets=("workers",),
                            topology=live)  # fmt: skip
    objects = with_workload(kueue(), owner_kind="JobSet", pod_sets=("workers",), requests=own)
    advice = kueue_advice(obj, objects)
    assert advice is not None and advice.agent_fixable
    (doc,) = list(yaml.safe_load_all(advice.proposal))
    (rjob,) = doc["spec"]["replicatedJobs"]
    assert rjob["template"]["spec"]["template"]["metadata"]["annotations"] == annotations


def test_without_its_workload_the_advice_reads_the_jobs_templates() -> None:
    obj = TrainingJobObject(kind=JobKind.JOBSET, namespace="ml", name="llm",
                            labels={KUEUE.queue_label: "user-queue"}, pod_sets=("workers",),
                            topology={"workers": INJECTED})  # fmt: skip
    advice = kueue_advice(obj, kueue())
    assert advice is not None
    (doc,) = list(yaml.safe_load_all(advice.proposal))
    (rjob,) = doc["spec"]["replicatedJobs"]
    assert rjob["template"]["spec"]["template"]["metadata"]["annotations"] == {
        KUEUE.topology_annotation: ZONE_LABEL, KUEUE.unconstrained_annotation: None}


def tfjob_dump(*, ps: int) -> list[dict[str, Any]]:
    """A TFJob Kueue admitted with TAS and no request: `ps` parameter servers and two workers
    (one GPU each), split between zone-a (room for all) and zone-b; its Workload's PodSets
    carry the counts and the job's own templates."""
    replicas = {"PS": objects.replica(ps, {"containers": [objects.container(gpus=1)]}),
                "Worker": objects.replica(2, {"containers": [objects.container(gpus=1)]})}  # fmt: skip
    job_obj = objects.training_job("TFJob", "tf", labels={KUEUE.queue_label: "user-queue"},
                                   uid="uid-tf", replicas=replicas)  # fmt: skip
    pods = [objects.job_pod("TFJob", "tf", "ps", i, node_name="b1") for i in range(ps)]
    pods += [objects.job_pod("TFJob", "tf", "worker", i, node_name="a1") for i in range(2)]
    kueue_api = "kueue.x-k8s.io/v1beta1"
    workload = {
        "apiVersion": kueue_api, "kind": "Workload",
        "metadata": {"name": "tfjob-tf-1", "namespace": "ml", "ownerReferences": [
            {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "tf", "uid": "uid-tf",
             "controller": True}]},
        "spec": {"queueName": "user-queue", "podSets": [
            {"name": "ps", "count": ps, "template": {"spec": {}}},
            {"name": "worker", "count": 2, "template": {"spec": {}}}]},
        "status": {"conditions": [{"type": "Admitted", "status": "True"}],
                   "admission": {"clusterQueue": "cq", "podSetAssignments": [
                       {"name": "ps", "flavors": {"nvidia.com/gpu": "gpu"}},
                       {"name": "worker", "flavors": {"nvidia.com/gpu": "gpu"}}]}},
    }  # fmt: skip
    return [
        objects.node("a1", "zone-a", gpus=8), objects.node("b1", "zone-b", gpus=8),
        job_obj, *pods, workload,
        {"apiVersion": kueue_api, "kind": "Topology", "metadata": {"name": "t"},
         "spec": {"levels": [{"nodeLabel": ZONE_LABEL}, {"nodeLabel": HOST}]}},
        {"apiVersion": kueue_api, "kind": "ResourceFlavor", "metadata": {"name": "gpu"},
         "spec": {"topologyName": "t"}},
        {"apiVersion": kueue_api, "kind": "ClusterQueue", "metadata": {"name": "cq"},
         "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
             {"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "16"}]}]}]}},
        {"apiVersion": kueue_api, "kind": "LocalQueue",
         "metadata": {"name": "user-queue", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}},
    ]  # fmt: skip


@pytest.mark.parametrize(("ps", "remediable"), [(1, True), (2, False)])
def test_the_diagnosis_says_before_approval_that_two_multi_pod_pod_sets_cannot_be_grouped(
    ps: int, remediable: bool
) -> None:
    snap = parse_objects(tfjob_dump(ps=ps), source="test")
    result = diagnose_cluster(snap.state, snap.policy_set(DiagnosisSettings()),
                              settings=DiagnosisSettings())  # fmt: skip
    (finding,) = [f for f in result.findings if f.job.name == "tf"]
    advice = finding.kueue
    assert advice is not None and finding.target_zone == ("zone-a" if remediable else None)
    assert (finding.remediable, advice.agent_fixable) == (remediable, remediable)
    docs = list(yaml.safe_load_all(advice.proposal))
    if remediable:
        assert [d.get("kind") for d in docs] == [None]
        return
    assert "two PodSets each run more than one pod (PS: 2 pods and Worker: 2 pods)" in advice.message
    assert any("each run more than one pod" in r for r in finding.reasons)
    patch, flavor = docs
    assert all(KUEUE.group_annotation not in s["template"]["metadata"]["annotations"]
               for s in patch["spec"]["tfReplicaSpecs"].values())  # fmt: skip
    # the zone where the policies allow every flow and the job's GPUs fit
    assert flavor["spec"]["nodeLabels"] == {ZONE_LABEL: "zone-a"}
