"""The admission decision: where a job being created goes, and the patch, against the planner."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from agent.admission.decision import Decider, View
from agent.admission.jsonpatch import apply
from agent.admission.subject import Subject, identify
from agent.model.admission import AdmissionOutcome
from agent.model.finding import Finding
from agent.model.job import JobRef
from agent.model.verdict import Verdict
from agent.model.workload import KUEUE, JobKind
from agent.remediation.plan import LiveObjects, Plan
from agent.remediation.planner import plan_remediation
from agent.remediation.template import TemplateState
from tests.support import objects as o
from tests.support.admission import SETTINGS, base_items, make_view, pytorch

ZONE = "topology.kubernetes.io/zone"




def subject_of(obj: dict[str, Any], *, ns: str = "ml") -> Subject:
    api_version = str(obj["apiVersion"])
    group, _, version = api_version.rpartition("/")
    found = identify(obj, group=group, version=version, kind=str(obj["kind"]), namespace=ns,
                     groups=SETTINGS.groups)  # fmt: skip
    assert found is not None
    return found


def planned_by_planner(obj: dict[str, Any], kind: JobKind, zone: str, view: View) -> Plan:
    """What the remediation planner writes for the job, planned as the agent plans a split job."""
    nodes = [n for n in base_items() if n.get("kind") == "Node"]
    gpus_only = copy.deepcopy(obj)
    for spec in (gpus_only["spec"].get("pytorchReplicaSpecs") or {}).values():
        for c in spec["template"]["spec"]["containers"]:
            for section in c.get("resources", {}).values():
                for key in [k for k in section if "gpu" not in k]:
                    del section[key]
    finding = Finding(job=JobRef(kind, "ml", obj["metadata"]["name"]),
                      verdict=Verdict.ZONE_SPLIT_BLOCKED, zones={}, coordinator=None,
                      remediable=True, target_zone=zone)  # fmt: skip
    plan = plan_remediation(finding, LiveObjects(job=gpus_only, pods=(), nodes=nodes, bound_pods=()),
                            mirror_keys=("zone",))  # fmt: skip
    assert isinstance(plan, Plan), plan
    return plan


def test_a_pytorchjob_is_pinned_where_the_policies_allow_it_with_the_planners_own_changes(
    view_of: Callable[..., View],
) -> None:
    view = view_of()
    obj = pytorch()
    decision = Decider(SETTINGS).decide(subject_of(obj), view, enforce=True)
    assert decision.outcome is AdmissionOutcome.PLACED
    assert decision.zone == "a"  # b denies its flows; c has no GPU
    assert "pinned PyTorchJob ml/llm to zone a" in decision.warning
    assert "not in b" in decision.warning and "8 GPUs needed" in decision.warning
    patched = apply(obj, list(decision.patch))
    plan = planned_by_planner(obj, JobKind.PYTORCH, "a", view)
    (target,) = plan.targets
    assert target.state_of(patched) is TemplateState.PLANNED  # exactly the planner's fields
    assert target.state_of(obj) is TemplateState.ORIGINAL
    for replica in ("Master", "Worker"):
        template = patched["spec"]["pytorchReplicaSpecs"][replica]["template"]
        assert template["spec"]["nodeSelector"] == {ZONE: "a"}
        assert template["metadata"]["labels"]["zone"] == "a"
        assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                "effect": "NoSchedule"} in template["spec"]["tolerations"]  # fmt: skip
        # requests the room check cannot see are kept as they were
        assert template["spec"]["containers"] == obj["spec"]["pytorchReplicaSpecs"][replica][
            "template"]["spec"]["containers"]


def test_warn_mode_says_what_it_would_do_and_returns_no_patch(view_of: Callable[..., View]) -> None:
    decision = Decider(SETTINGS).decide(subject_of(pytorch()), view_of(), enforce=False)
    assert decision.outcome is AdmissionOutcome.WARNED
    assert decision.patch == ()
    assert decision.zone == "a"
    assert decision.warning.startswith("zonemedic (mode warn): would pin PyTorchJob ml/llm to zone a")


def test_a_zone_without_room_is_passed_over_for_the_next(view_of: Callable[..., View]) -> None:
    # a's GPUs are taken by a running pod: the job (8 GPUs) fits nowhere the policies allow
    busy = o.pod("other-0", ns="ml", node_name="a1", gpus=4)
    decision = Decider(SETTINGS).decide(subject_of(pytorch()), view_of(busy), enforce=True)
    assert decision.outcome is AdmissionOutcome.NO_ZONE
    assert "free: a: 4" in decision.warning
    # a smaller job fits in a
    small = Decider(SETTINGS).decide(subject_of(pytorch(gpus=2)), view_of(busy), enforce=True)
    assert (small.outcome, small.zone) == (AdmissionOutcome.PLACED, "a")


CASES = [
    ("already pinned to one zone", pytorch(spec={"nodeSelector": {ZONE: "b"}}),
     AdmissionOutcome.CONSTRAINED, "every pod template already pins zone b"),
    ("pinned by node affinity", pytorch(spec={"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["c"]}]}]}}}}),
     AdmissionOutcome.CONSTRAINED, "every pod template already pins zone c"),
    ("one pod", pytorch(workers=0), AdmissionOutcome.NOT_NEEDED, "it runs one pod"),
    ("a TrainJob", o.trainjob("tj"), AdmissionOutcome.DEFERRED,
     "zonemedic places its JobSet when the Trainer creates it"),
]


@pytest.mark.parametrize(("label", "obj", "outcome", "why"), CASES, ids=[c[0] for c in CASES])
def test_jobs_it_cannot_or_need_not_help_pass_unchanged_saying_why(
    view_of: Callable[..., View], label: str, obj: dict[str, Any], outcome: AdmissionOutcome, why: str,
) -> None:
    decision = Decider(SETTINGS).decide(subject_of(obj), view_of(), enforce=True)
    assert (decision.outcome, decision.patch) == (outcome, ())
    assert "passed unchanged" in decision.warning and why in decision.warning, decision.warning


def test_a_protected_namespace_is_left_alone(view_of: Callable[..., View]) -> None:
    obj = pytorch()
    obj["metadata"]["namespace"] = "kube-system"
    decision = Decider(SETTINGS).decide(subject_of(obj, ns="kube-system"), view_of(), enforce=True)
    assert decision.outcome is AdmissionOutcome.SKIPPED
    assert "namespace kube-system is protected" in decision.warning


def test_no_zone_allows_the_flows_then_the_policies_need_fixing(view_of: Callable[..., View]) -> None:
    deny_all = o.cnp("deny-all", {"endpointSelector": {}, "ingressDeny": [{"fromEndpoints": [{}]}]})
    decision = Decider(SETTINGS).decide(subject_of(pytorch()), view_of(deny_all), enforce=True)
    assert decision.outcome is AdmissionOutcome.NO_ZONE
    assert "fix the policies" in decision.warning


def test_one_zone_cluster_needs_nothing() -> None:
    view = make_view([o.node("a1", "a", gpus=8), o.namespace("ml")])
    decision = Decider(SETTINGS).decide(subject_of(pytorch()), view, enforce=True)
    assert decision.outcome is AdmissionOutcome.NOT_NEEDED
    assert "the cluster has one zone" in decision.warning


def test_a_jobset_gets_the_zone_pin_without_affinity(view_of: Callable[..., View]) -> None:
    obj = o.jobset("js", [o.replicated_job("node", replicas=2, nodes=1, gpus=4)])
    for rjob in obj["spec"]["replicatedJobs"]:
        rjob["template"]["spec"]["template"]["metadata"] = {"labels": {"zone": "b"}}
    decision = Decider(SETTINGS).decide(subject_of(obj), view_of(), enforce=True)
    assert (decision.outcome, decision.zone) == (AdmissionOutcome.PLACED, "a")
    template = apply(obj, list(decision.patch))["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {ZONE: "a"}
    assert template["metadata"]["labels"]["zone"] == "a"
    assert "affinity" not in template["spec"]  # a JobSet's affinity is immutable: the planner pins by nodeSelector


def test_a_trainjobs_jobset_is_placed_at_its_creation(view_of: Callable[..., View]) -> None:
    obj = o.jobset("tj", [o.replicated_job("node", replicas=2, nodes=1, gpus=2)], trainjob=True)
    decision = Decider(SETTINGS).decide(subject_of(obj), view_of(), enforce=True)
    assert decision.outcome is AdmissionOutcome.PLACED
    assert decision.zone in ("a", "b")
    patched = apply(obj, list(decision.patch))
    assert patched["metadata"]["ownerReferences"] == obj["metadata"]["ownerReferences"]


def kueue_items(*, tas: bool) -> list[dict[str, Any]]:
    topology = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology", "metadata": {"name": "default"},
                "spec": {"levels": [{"nodeLabel": ZONE}, {"nodeLabel": "kubernetes.io/hostname"}]}}
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "gpu"},
              "spec": ({"topologyName": "default"} if tas else {})}
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "cq"},
             "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                 {"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 16}]}]}]}}
    local = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
             "metadata": {"name": "user-queue", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}}
    return [topology, flavor, queue, local]  # fmt: skip


def test_a_kueue_job_gets_kueues_topology_annotations_and_never_a_node_selector() -> None:
    view = make_view([*base_items(), *kueue_items(tas=True)])
    obj = pytorch(labels={KUEUE.queue_label: "user-queue"})
    decision = Decider(SETTINGS).decide(subject_of(obj), view, enforce=True)
    assert decision.outcome is AdmissionOutcome.PLACED and decision.kueue
    patched = apply(obj, list(decision.patch))
    for replica in ("Master", "Worker"):
        template = patched["spec"]["pytorchReplicaSpecs"][replica]["template"]
        assert template["metadata"]["annotations"] == {KUEUE.topology_annotation: ZONE,
                                                       KUEUE.group_annotation: "llm"}
        assert "nodeSelector" not in template["spec"]
    assert "the policies allow its flows in a" in decision.warning


def test_a_kueue_job_without_topology_aware_scheduling_passes_unchanged() -> None:
    view = make_view([*base_items(), *kueue_items(tas=False)])
    obj = pytorch(labels={KUEUE.queue_label: "user-queue"})
    decision = Decider(SETTINGS).decide(subject_of(obj), view, enforce=True)
    assert (decision.outcome, decision.patch) == (AdmissionOutcome.NO_ZONE, ())
    assert "Topology Aware Scheduling is not configured" in decision.warning


def test_a_kueue_job_whose_two_podsets_both_have_several_pods_passes_unchanged() -> None:
    """Kueue groups exactly two PodSets of which one is a single pod: a group annotation on two
    PodSets of two pods each would make Kueue's webhook refuse the job's creation."""
    view = make_view([*base_items(), *kueue_items(tas=True)])
    tlabels = {"zone": "b"}
    ps = {"containers": [o.container(cpu="1", ports=[("tfjob-port", 2222)])]}
    worker = {"containers": [o.container(gpus=2, cpu="2", memory="8Gi", ports=[("tfjob-port", 2222)])]}
    obj = o.training_job("TFJob", "tf", replicas={"PS": o.replica(2, ps, labels=tlabels),
                                                  "Worker": o.replica(2, worker, labels=tlabels)},
                         labels={KUEUE.queue_label: "user-queue"}, status=False)  # fmt: skip
    decision = Decider(SETTINGS).decide(subject_of(obj), view, enforce=True)
    assert (decision.outcome, decision.patch) == (AdmissionOutcome.NO_ZONE, ())
    assert "passed unchanged" in decision.warning and "PodSet" in decision.warning, decision.warning


def lab(name: str, role: str, *, gpus: int, replicas: int = 1) -> dict[str, Any]:
    template = {"metadata": {"labels": {"app": "lab", "role": role, "zone": "b"}},
                "spec": {"containers": [o.container(gpus=gpus, cpu="1", ports=[(None, 29500)])]}}
    return o.deployment(name, template=template, replicas=replicas)


def test_a_groups_objects_follow_the_kept_decision(view_of: Callable[..., View]) -> None:
    decider = Decider(SETTINGS)
    first = decider.decide(subject_of(lab("coord", "coordinator", gpus=0, replicas=1)), view_of(),
                           enforce=True)  # fmt: skip
    # one coordinator pod alone: nothing to co-locate yet
    assert first.outcome is AdmissionOutcome.NOT_NEEDED
    coord = decider.decide(subject_of(lab("workers", "worker", gpus=2, replicas=2)), view_of(),
                           enforce=True)  # fmt: skip
    assert (coord.outcome, coord.zone) == (AdmissionOutcome.PLACED, "a")
    template = apply(lab("workers", "worker", gpus=2, replicas=2), list(coord.patch))["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {ZONE: "a"}
    assert "podAffinity" not in (template["spec"].get("affinity") or {})  # the group planner's rule
    later = decider.decide(subject_of(lab("more", "worker", gpus=2, replicas=2)), view_of(),
                           enforce=True, kept="a")  # fmt: skip
    assert (later.outcome, later.zone, later.kept) == (AdmissionOutcome.PLACED, "a", True)
    assert "the group's first object was placed in a" in later.warning
    # a later object of one pod joins the kept zone too (the group's other pods may not be in
    # the view yet); without a kept zone it has nothing to co-locate
    single = subject_of(lab("one-more", "worker", gpus=2, replicas=1))
    joined = decider.decide(single, view_of(), enforce=True, kept="a")
    assert (joined.outcome, joined.zone, joined.kept) == (AdmissionOutcome.PLACED, "a", True)
    assert decider.decide(single, view_of(), enforce=True).outcome is AdmissionOutcome.NOT_NEEDED


def test_a_groups_kueue_workload_gets_no_node_selector(view_of: Callable[..., View]) -> None:
    obj = lab("workers", "worker", gpus=2, replicas=2)
    obj["metadata"]["labels"] = {KUEUE.queue_label: "user-queue"}
    decision = Decider(SETTINGS).decide(subject_of(obj), view_of(), enforce=True)
    assert (decision.outcome, decision.patch) == (AdmissionOutcome.NO_ZONE, ())
    assert "Kueue-managed: zonemedic writes no nodeSelector on it" in decision.warning
