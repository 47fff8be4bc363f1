"""Parsing single manifests into model objects: fields read, defaults, and typed errors; pods
that share sub-objects (as the watch cache hands them) parsed alike through `PodParts`."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.cluster import ContainerPort, DeclaredCoordinator, PodPhase
from agent.model.network import Protocol
from agent.model.workload import JobKind
from agent.snapshot.manifests import (
    ManifestError,
    PodParts,
    parse_node,
    parse_pod,
    parse_pod_checked,
    parse_training_job,
)
from tests.support.objects import jobset, node, pod, replicated_job, training_job, trainjob


def _with(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`obj` with the dotted `path` set to `value` (list indexes as digits)."""
    target: Any = obj
    parts = path.split(".")
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
    last = parts[-1]
    if last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return obj


@pytest.mark.parametrize(
    ("manifest", "field", "expected"),
    [
        (pod("p", gpus=2), "gpu_request", 2),
        (
            _with(
                pod("p"),
                "spec.containers.0.resources",
                {"requests": {"nvidia.com/gpu": 3}, "limits": {"nvidia.com/gpu": "3"}},
            ),
            "gpu_request",
            3,
        ),
        (
            _with(
                pod("p", gpus=1),
                "spec.initContainers",
                [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
            ),
            "gpu_request",
            4,
        ),
        (pod("p"), "gpu_request", 0),
        (pod("p"), "phase", PodPhase.PENDING),
        (pod("p", node_name="n1"), "phase", PodPhase.RUNNING),
        (pod("p", phase="Succeeded", node_name="n"), "live", False),
        (pod("p"), "service_account", "default"),
        (pod("p", service_account="trainer"), "service_account", "trainer"),
        (_with(pod("p"), "spec.serviceAccount", "legacy"), "service_account", "legacy"),
        (_with(pod("p"), "metadata.namespace", None), "namespace", "default"),
        (
            pod("p", ports=[("rdzv", 29500), (None, 80)]),
            "ports",
            (ContainerPort(29500, "rdzv"), ContainerPort(80)),
        ),
        (
            _with(pod("p", ports=[("dns", 53)]), "spec.containers.0.ports.0.protocol", "UDP"),
            "ports",
            (ContainerPort(53, "dns", Protocol.UDP),),
        ),
        (pod("p", owner=("batch/v1", "Job", "j")), "controller.name", "j"),
        (pod("p", node_name=""), "node_name", None),
    ],
)
@pytest.mark.parametrize("with_parts", [False, True], ids=["alone", "parts"])
def test_pod_fields(manifest: dict[str, Any], field: str, expected: Any, with_parts: bool) -> None:
    parts = PodParts() if with_parts else None
    value: Any = parse_pod(manifest, parts=parts)
    if parts is not None:  # a second pod with the same (shared) sub-objects: the same answer
        assert parse_pod(manifest, parts=parts) == value
    for part in field.split("."):
        value = getattr(value, part)
    assert value == expected


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("metadata.name", None, "metadata.name"),
        ("metadata.name", 7, "metadata.name"),
        ("metadata", [], "metadata"),
        ("metadata.labels", ["a"], "metadata.labels"),
        ("metadata.labels", {"app": 3}, "metadata.labels.app"),
        ("metadata.ownerReferences", [{"name": "x"}], "metadata.ownerReferences[0].kind"),
        ("spec.containers", {"name": "x"}, "spec.containers"),
        ("spec.containers.0", "main", "spec.containers[0]"),
        (
            "spec.containers.0.ports",
            [{"containerPort": "http"}],
            "spec.containers[0].ports[0].containerPort",
        ),
        (
            "spec.containers.0.ports",
            [{"containerPort": 70000}],
            "spec.containers[0].ports[0].containerPort",
        ),
        (
            "spec.containers.0.ports",
            [{"containerPort": 80, "protocol": "ICMP"}],
            "spec.containers[0].ports[0].protocol",
        ),
        (
            "spec.containers.0.resources",
            {"limits": {"nvidia.com/gpu": "0.5"}},
            "spec.containers[0].resources.limits.nvidia.com/gpu",
        ),
        ("spec.containers.0.resources", {"requests": []}, "spec.containers[0].resources.requests"),
        ("spec.nodeName", 5, "spec.nodeName"),
        ("spec.serviceAccountName", 0, "spec.serviceAccountName"),
        ("spec.serviceAccount", ["sa"], "spec.serviceAccount"),
        ("metadata.namespace", 3, "metadata.namespace"),
        ("metadata.labels", {3: "x"}, "metadata.labels.3"),
        ("status.phase", "Sleeping", "status.phase"),
        ("status.phase", ["Running"], "status.phase"),
        ("status.phase", None, "status.phase"),
        ("spec", "none", "spec"),
        ("status", [], "status"),
    ],
)
@pytest.mark.parametrize("with_parts", [False, True], ids=["alone", "parts"])
def test_pod_errors_name_the_field(path: str, value: Any, field: str, with_parts: bool) -> None:
    parts = PodParts() if with_parts else None
    manifest = _with(pod("p", ports=[("x", 1)]), path, value)
    for _ in range(2):  # an error is never remembered as a parsed part
        with pytest.raises(ManifestError) as info:
            parse_pod(manifest, parts=parts)
        assert info.value.field == field


def test_shared_containers_and_owners_are_parsed_once_per_object() -> None:
    first = pod("p-0", gpus=2, ports=[("rdzv", 29500)], owner=("kubeflow.org/v1", "PyTorchJob", "j"))
    second = pod("p-1", gpus=2, ports=[("rdzv", 29500)], owner=("kubeflow.org/v1", "PyTorchJob", "j"))
    # the cache hands pods of a job one containers list and one owner-reference list
    second["spec"]["containers"] = first["spec"]["containers"]
    second["metadata"]["ownerReferences"] = first["metadata"]["ownerReferences"]
    parts = PodParts()
    a, b = parse_pod(first, parts=parts), parse_pod(second, parts=parts)
    assert (a.name, b.name) == ("p-0", "p-1")
    assert a.ports is b.ports and a.owners is b.owners  # one parsed form, shared
    assert (b.gpu_request, b.ports, b.controller.name) == (2, (ContainerPort(29500, "rdzv"),), "j")
    # an equal list that is another object is parsed on its own, to an equal result
    third = pod("p-2", gpus=2, ports=[("rdzv", 29500)], owner=("kubeflow.org/v1", "PyTorchJob", "j"))
    c = parse_pod(third, parts=parts)
    assert (c.ports, c.owners, c.gpu_request) == (a.ports, a.owners, 2)
    # a full table starts afresh and stays right
    small = PodParts(capacity=1)
    assert [parse_pod(m, parts=small) for m in (first, third, second)] == [a, c, b]


@pytest.mark.parametrize(
    ("manifest", "gpus", "cordoned", "zone"),
    [
        (node("n", "zone-a", gpus=8), 8, False, "zone-a"),
        (node("n", "zone-b", gpus=0), 0, False, "zone-b"),
        (node("n", None, gpus=4, cordoned=True), 4, True, None),
    ],
)
def test_node_fields(manifest: dict[str, Any], gpus: int, cordoned: bool, zone: str | None) -> None:
    parsed = parse_node(manifest)
    assert (parsed.gpu_allocatable, parsed.unschedulable, parsed.zone) == (gpus, cordoned, zone)


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("status.allocatable.nvidia.com/gpu", "many", "status.allocatable.nvidia.com/gpu"),
        ("spec.unschedulable", "yes", "spec.unschedulable"),
        ("spec.taints", [{"effect": "NoSchedule"}], "spec.taints[0].key"),
    ],
)
def test_node_errors(path: str, value: Any, field: str) -> None:
    manifest = node("n", "zone-a", gpus=8)
    if path.startswith("status.allocatable."):
        manifest["status"]["allocatable"]["nvidia.com/gpu"] = value
    else:
        _with(manifest, path, value)
    with pytest.raises(ManifestError) as info:
        parse_node(manifest)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("manifest", "suspend", "managed_by", "finished"),
    [
        (training_job("PyTorchJob", "j"), False, None, False),
        (training_job("PyTorchJob", "j", run_policy={"suspend": True}), True, None, False),
        (
            training_job("PyTorchJob", "j", run_policy={"managedBy": "kueue.x-k8s.io/multikueue"}),
            False,
            "kueue.x-k8s.io/multikueue",
            False,
        ),
        (training_job("PyTorchJob", "j", conditions=["Created", "Succeeded"]), False, None, True),
        (training_job("PyTorchJob", "j", conditions=["Failed"]), False, None, True),
        (training_job("PyTorchJob", "j", conditions=["Running"]), False, None, False),
    ],
)
def test_training_job_fields(
    manifest: dict[str, Any], suspend: bool, managed_by: str | None, finished: bool
) -> None:
    parsed = parse_training_job(manifest, JobKind.PYTORCH)
    assert (parsed.suspend, parsed.managed_by, parsed.finished) == (suspend, managed_by, finished)


def test_training_job_wrong_type() -> None:
    with pytest.raises(ManifestError, match=r"spec\.runPolicy\.suspend: expected true or false"):
        parse_training_job(training_job("TFJob", "j", run_policy={"suspend": "yes"}), JobKind.TF)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("metadata.labels", None), ("metadata.labels", {}), ("metadata.namespace", None),
        ("metadata.namespace", ""), ("spec.nodeName", ""), ("spec.nodeName", None),
        ("spec.serviceAccountName", ""), ("spec.serviceAccountName", "trainer"),
        ("spec.serviceAccount", "legacy"), ("spec.initContainers", [
            {"name": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]),
        ("status.phase", "Succeeded"), ("status", None), ("spec.containers", None),
        ("metadata.ownerReferences", None),
    ],
)
def test_the_short_path_parses_what_the_checked_path_parses(path: str, value: Any) -> None:
    manifest = _with(pod("p", ports=[("x", 1)], gpus=2, node_name="n1",
                         owner=("v1", "PyTorchJob", "j")), path, value)
    for parts in (None, PodParts()):
        assert parse_pod(manifest, parts=parts) == parse_pod_checked(
            manifest, parts=parts, shared=None)


@pytest.mark.parametrize(
    ("manifest", "kind", "expected"),
    [
        (jobset("j", [replicated_job("dataset-initializer"), replicated_job("node", nodes=2)],
                trainjob=True, suspend=True, managed_by="kueue.x-k8s.io/multikueue",
                conditions=["Completed"]),
         JobKind.JOBSET,
         (True, "kueue.x-k8s.io/multikueue", True, ("node",), {"dataset-initializer"}, None, "TrainJob")),
        (jobset("j", [replicated_job("fetch", step="model-initializer"), replicated_job("w")],
                coordinator={"replicatedJob": "w", "jobIndex": 2}),
         JobKind.JOBSET, (False, None, False, ("w",), {"fetch"}, DeclaredCoordinator("w", 2, 0), None)),
        # a JobSet's "Complete" is no condition of its kind (the TrainJob says Complete)
        (jobset("j", [replicated_job("w")], conditions=["Complete"]), JobKind.JOBSET,
         (False, None, False, ("w",), set(), None, None)),
        (trainjob("t", suspend=True, conditions=["Complete"]), JobKind.TRAINJOB,
         (True, None, True, (), set(), None, None)),
    ],
    ids=["owned-jobset", "declared-coordinator", "jobset-complete-is-not-its-word", "trainjob"],
)
def test_jobset_and_trainjob_fields(manifest: dict[str, Any], kind: JobKind, expected: tuple[Any, ...]) -> None:
    parsed = parse_training_job(manifest, kind)
    controller = parsed.controller.kind if parsed.controller is not None else None
    assert (parsed.suspend, parsed.managed_by, parsed.finished, parsed.gang, set(parsed.outside),
            parsed.coordinator, controller) == expected


@pytest.mark.parametrize(
    ("coordinator", "message"),
    [
        ("workers", r"spec\.coordinator: expected a mapping, got str"),
        ({"jobIndex": 0}, r"spec\.coordinator\.replicatedJob"),
        ({"replicatedJob": "w", "podIndex": -1}, r"spec\.coordinator\.podIndex: expected a non-negative integer"),
        ({"replicatedJob": "w", "jobIndex": "0"}, r"spec\.coordinator\.jobIndex: expected a non-negative integer"),
    ],
)
def test_a_bad_jobset_coordinator_names_the_field(coordinator: Any, message: str) -> None:
    manifest = jobset("j", [replicated_job("w")])
    manifest["spec"]["coordinator"] = coordinator
    with pytest.raises(ManifestError, match=message):
        parse_training_job(manifest, JobKind.JOBSET)
