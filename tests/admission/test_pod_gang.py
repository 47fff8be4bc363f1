"""The gang of a group placed pod by pod: which pods are left to their controller, the pods still
to come as modelled, and the GPUs the gang needs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agent.admission.pod_gang import gang_gpus, gang_manifests, placed_through
from agent.admission.subject import Subject, identify, planned_pods
from agent.model.cluster import Pod
from agent.settings import GroupSpec
from agent.snapshot.manifests import parse_pod
from tests.support import objects as o
from tests.support.admission import POD_GROUP, lab_pod


@pytest.mark.parametrize(("refs", "labels", "why"), [
    (None, {}, None),
    ([o.owner_ref(("batch/v1", "Job", "w"))], {}, "its Job w is placed at its own creation"),
    ([o.owner_ref(("jobset.x-k8s.io/v1alpha2", "JobSet", "js"))], {}, "its JobSet js is placed"),
    ([o.owner_ref(("kubeflow.org/v1", "MPIJob", "m"))], {}, "its MPIJob m is placed"),
    ([o.owner_ref(("apps/v1", "ReplicaSet", "web-1"))], {"pod-template-hash": "1"}, "is a Deployment's"),
    ([o.owner_ref(("apps/v1", "ReplicaSet", "bare"))], {}, None),
    ([o.owner_ref(("apps/v1", "StatefulSet", "db"))], {}, None),
    ([{"apiVersion": "batch/v1", "kind": "Job", "name": "w"}], {}, None),  # not its controller
])  # fmt: skip
def test_pods_left_to_their_controller(refs: list[dict[str, Any]] | None, labels: dict[str, str],
                                       why: str | None) -> None:  # fmt: skip
    found = placed_through(o.pod("p", labels=labels, owner_refs=refs))
    assert (found is None) if why is None else (found is not None and why in found), found


def test_a_pod_created_bound_to_a_node_is_left_alone() -> None:
    found = placed_through(o.pod("p", node_name="a1", phase=None))
    assert found is not None and "it is created bound to node a1" in found


def subject(obj: dict[str, Any], group: GroupSpec = POD_GROUP) -> Subject:
    found = identify(obj, group="", version="v1", kind="Pod", namespace="ml", groups=[group])
    assert found is not None
    return found


def live(*pods: dict[str, Any]) -> list[Pod]:
    return [parse_pod(p) for p in pods]


def roles(manifests: list[dict[str, Any]]) -> list[str]:
    return [m["metadata"]["labels"].get("role", "") for m in manifests]


def gpus(manifest: dict[str, Any]) -> str | None:
    resources = manifest["spec"]["containers"][0].get("resources", {})
    value = {**resources.get("limits", {}), **resources.get("requests", {})}.get("nvidia.com/gpu")
    return str(value) if value is not None else None


RUNNING_COORDINATOR = o.pod("c", node_name="a1", labels={"app": "lab", "role": "coordinator"})
RUNNING_WORKER = o.pod("w-0", node_name="a1", labels={"app": "lab", "role": "worker"}, gpus=2)


@pytest.mark.parametrize(("pod", "running", "size", "want_roles", "want_gpus"), [
    # the coordinator first: two workers to come, their resources unknown
    (lab_pod("c", "coordinator"), [], 3, ["coordinator", "worker", "worker"], [None, None, None]),
    # a worker first: a coordinator to come, then a worker like it
    (lab_pod("w-0", "worker", gpus=2), [], 3, ["worker", "coordinator", "worker"], ["2", None, "2"]),
    # the coordinator running: one worker to come, like this one
    (lab_pod("w-0", "worker", gpus=2), [RUNNING_COORDINATOR], 3, ["worker", "worker"], ["2", "2"]),
    # the gang complete with this pod: nothing modelled
    (lab_pod("w-1", "worker", gpus=2), [RUNNING_COORDINATOR, RUNNING_WORKER], 3, ["worker"], ["2"]),
    # no size: what is known
    (lab_pod("c", "coordinator"), [], None, ["coordinator"], [None]),
])  # fmt: skip
def test_the_gang_is_the_pod_and_the_pods_still_to_come(
    pod: dict[str, Any], running: list[dict[str, Any]], size: int | None,
    want_roles: list[str], want_gpus: list[str | None],
) -> None:
    found = subject(pod, replace(POD_GROUP, size=size))
    manifests = gang_manifests(found, planned_pods(found), live=live(*running))
    assert roles(manifests) == want_roles
    assert [gpus(m) for m in manifests] == want_gpus
    assert len({m["metadata"]["name"] for m in manifests}) == len(manifests)
    assert all(m["metadata"]["labels"]["app"] == "lab" for m in manifests)


@pytest.mark.parametrize(("group_gpus", "modelled", "want"), [(None, 2, 2), (8, 2, 8), (1, 6, 6)])
def test_the_gangs_gpus_are_the_modelled_or_the_groups_when_more(
    group_gpus: int | None, modelled: int, want: int
) -> None:
    assert gang_gpus(subject(lab_pod("c", "coordinator"), replace(POD_GROUP, gpus=group_gpus)), modelled) == want
