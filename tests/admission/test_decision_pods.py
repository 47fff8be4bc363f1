"""The admission decision for a group placed pod by pod: the first pod's zone is chosen for the
whole gang, later pods follow the kept zone, and pods the webhook does not place say why."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from agent.admission.decision import Decider, View
from agent.admission.jsonpatch import apply
from agent.admission.subject import Subject, identify
from agent.model.admission import AdmissionOutcome
from agent.model.workload import KUEUE
from agent.remediation.template import apply_merge_patch, nodes_in_zone, retarget
from agent.settings import DiagnosisSettings
from tests.support import objects as o
from tests.support.admission import GROUP, POD_GROUP, POD_SETTINGS, base_items, lab_pod

ZONE = "topology.kubernetes.io/zone"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}


def pod_subject(obj: dict[str, Any], settings: DiagnosisSettings = POD_SETTINGS) -> Subject | None:
    return identify(obj, group="", version="v1", kind="Pod", namespace="ml", groups=settings.groups)


def decided(obj: dict[str, Any], view: View, *, enforce: bool = True, kept: str | None = None,
            settings: DiagnosisSettings = POD_SETTINGS) -> Any:  # fmt: skip
    subject = pod_subject(obj, settings)
    assert subject is not None
    return Decider(settings).decide(subject, view, enforce=enforce, kept=kept)


def test_a_pod_is_a_subject_only_of_a_group_placed_pod_by_pod() -> None:
    pod = lab_pod("coord", "coordinator")
    found = pod_subject(pod)
    assert found is not None and found.pod and found.group == POD_GROUP
    assert [t.path for t in found.templates] == [()]
    assert pod_subject(pod, DiagnosisSettings(groups=[GROUP])) is None  # admit_pods not set
    assert pod_subject(o.pod("other", labels={"app": "web"}, phase=None)) is None


def test_the_first_pod_is_placed_for_the_whole_gang_with_the_planners_template_changes(
    view_of: Callable[..., View],
) -> None:
    pod = lab_pod("coord", "coordinator")
    decision = decided(pod, view_of())
    # b denies the gang's flows once its pods carry zone: b; c has no GPU for the gang's 4
    assert (decision.outcome, decision.zone, decision.kept) == (AdmissionOutcome.PLACED, "a", False)
    assert decision.warning.startswith("zonemedic: pinned Pod ml/coord (group lab) to zone a")
    assert "(not in b)" in decision.warning and "4 GPUs needed" in decision.warning
    patched = apply(pod, list(decision.patch))
    nodes = [n for n in base_items() if n.get("kind") == "Node"]
    change = retarget(pod, replica="template", path=(), zone="a", zone_nodes=nodes_in_zone(nodes, "a"),
                      mirror_keys=("zone",), affinity_to=None)  # fmt: skip
    assert change is not None
    assert patched == apply_merge_patch(pod, change.fragment())  # exactly the planner's changes
    assert patched["spec"]["nodeSelector"] == {ZONE: "a"}
    assert patched["metadata"]["labels"]["zone"] == "a"
    assert patched["spec"]["tolerations"] == [GPU_TOLERATION]
    assert patched["spec"]["containers"] == pod["spec"]["containers"]  # nothing else is touched
    assert "affinity" not in patched["spec"]  # no self pod affinity for a group (the planner's rule)


def test_later_pods_follow_the_kept_zone(view_of: Callable[..., View]) -> None:
    coordinator = o.pod("coord", node_name="a1", labels={"app": "lab", "role": "coordinator", "zone": "a"},
                        ports=[(None, 29500)])  # fmt: skip
    worker = lab_pod("worker-0", "worker", gpus=2)
    decision = decided(worker, view_of(coordinator), kept="a")
    assert (decision.outcome, decision.zone, decision.kept) == (AdmissionOutcome.PLACED, "a", True)
    assert "the group's first object was placed in a" in decision.warning
    assert apply(worker, list(decision.patch))["spec"]["nodeSelector"] == {ZONE: "a"}
    # the kept zone is the only one tried: a zone the gang's flows are denied in is said so
    denied = decided(worker, view_of(coordinator), kept="b")
    assert (denied.outcome, denied.patch) == (AdmissionOutcome.NO_ZONE, ())
    assert "no zone (b) allows every flow it needs" in denied.warning


def test_warn_mode_says_what_it_would_do(view_of: Callable[..., View]) -> None:
    decision = decided(lab_pod("coord", "coordinator"), view_of(), enforce=False)
    assert (decision.outcome, decision.zone, decision.patch) == (AdmissionOutcome.WARNED, "a", ())
    assert decision.warning.startswith("zonemedic (mode warn): would pin Pod ml/coord (group lab) to zone a")


def test_without_size_the_gang_is_what_is_known(view_of: Callable[..., View]) -> None:
    settings = DiagnosisSettings(pod_zone_label="zone", groups=[replace(POD_GROUP, size=None, gpus=None)])
    # a lone first pod is still placed (its zone is kept for the group's later pods)
    alone = decided(lab_pod("coord", "coordinator"), view_of(), settings=settings)
    assert (alone.outcome, alone.zone) == (AdmissionOutcome.PLACED, "a")
    assert "0 GPUs needed" in alone.warning
    # a 6-GPU worker with its coordinator running in a: a (8 free) has room
    coordinator = o.pod("coord", node_name="a1", labels={"app": "lab", "role": "coordinator", "zone": "a"},
                        ports=[(None, 29500)])  # fmt: skip
    worker = decided(lab_pod("w-0", "worker", gpus=6), view_of(coordinator), settings=settings)
    assert (worker.outcome, worker.zone) == (AdmissionOutcome.PLACED, "a")


def test_the_groups_gpus_must_fit_in_the_zone(view_of: Callable[..., View]) -> None:
    settings = DiagnosisSettings(pod_zone_label="zone", groups=[replace(POD_GROUP, gpus=12)])
    decision = decided(lab_pod("coord", "coordinator"), view_of(), settings=settings)
    assert (decision.outcome, decision.patch) == (AdmissionOutcome.NO_ZONE, ())
    assert "12 free GPUs for the whole job" in decision.warning


UNCHANGED = [
    ("pinned by its author", lab_pod("p", "worker", spec={"nodeSelector": {ZONE: "b"}}),
     AdmissionOutcome.CONSTRAINED, "every pod template already pins zone b"),
    ("a batch Job's pod", lab_pod("p", "worker", owner=("batch/v1", "Job", "workers")),
     AdmissionOutcome.SKIPPED, "its Job workers is placed at its own creation"),
    ("a training operator's pod", lab_pod("p", "worker", owner=("kubeflow.org/v1", "PyTorchJob", "llm")),
     AdmissionOutcome.SKIPPED, "its PyTorchJob llm is placed at its own creation"),
    ("a Deployment's pod", lab_pod("p", "worker", labels={"pod-template-hash": "5d8f"},
                                   owner=("apps/v1", "ReplicaSet", "web-5d8f")),
     AdmissionOutcome.SKIPPED, "its ReplicaSet web-5d8f is a Deployment's"),
    ("Kueue's pod group", lab_pod("p", "worker", labels={KUEUE.queue_label: "user-queue"}),
     AdmissionOutcome.NO_ZONE, "Kueue-managed: zonemedic writes no nodeSelector on it"),
    ("a protected namespace", lab_pod("p", "worker", ns="kube-system"),
     AdmissionOutcome.SKIPPED, "namespace kube-system is protected"),
]


@pytest.mark.parametrize(("label", "obj", "outcome", "why"), UNCHANGED, ids=[c[0] for c in UNCHANGED])
def test_pods_it_does_not_place_pass_unchanged_saying_why(
    view_of: Callable[..., View], label: str, obj: dict[str, Any], outcome: AdmissionOutcome, why: str,
) -> None:
    namespace = obj["metadata"]["namespace"]
    subject = identify(obj, group="", version="v1", kind="Pod", namespace=namespace,
                       groups=POD_SETTINGS.groups)  # fmt: skip
    assert subject is not None
    decision = Decider(POD_SETTINGS).decide(subject, view_of(), enforce=True)
    assert (decision.outcome, decision.patch) == (outcome, ())
    assert "passed unchanged" in decision.warning and why in decision.warning, decision.warning


@pytest.mark.parametrize(("owner", "placed"), [
    (("apps/v1", "StatefulSet", "db"), True),
    (("apps/v1", "ReplicaSet", "bare"), True),  # a ReplicaSet without a Deployment
    (("example.com/v1", "Runner", "r"), True),
])  # fmt: skip
def test_pods_of_controllers_it_does_not_patch_are_placed(
    view_of: Callable[..., View], owner: tuple[str, str, str], placed: bool,
) -> None:
    decision = decided(lab_pod("p", "coordinator", owner=owner), view_of())
    assert (decision.outcome is AdmissionOutcome.PLACED) is placed, decision.warning
