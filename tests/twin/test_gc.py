"""Dangling dependents (created after their owner was deleted) are collected; owned ones stay."""

from __future__ import annotations

from typing import Any

from agent.twin.apierror import ApiError
from tests.support import objects
from tests.twin.twin_fixtures import PODS, PYTORCHJOBS, fast, running, wait


def owned_pod(name: str, owner: dict[str, Any]) -> dict[str, Any]:
    """A pod whose one owner reference is `owner`."""
    return objects.pod(name, owner_refs=[owner], phase=None,
                       containers=[objects.container(name="c", image="x")])


def exists(cluster: Any, name: str) -> bool:
    try:
        cluster.store.get(PODS, name, namespace="ml")
    except ApiError:
        return False
    return True


def test_dangling_dependent_is_collected_and_a_live_owner_keeps_its_pod() -> None:
    with running(fast("seed-degraded")) as cluster:
        job = cluster.store.get(PYTORCHJOBS, "llm-finetune", namespace="ml")
        live = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": "llm-finetune",
            "uid": job["metadata"]["uid"],
        }
        gone = {**live, "uid": "00000000-0000-0000-0000-000000000000"}
        cluster.store.create(PODS, owned_pod("kept", live))
        cluster.store.create(PODS, owned_pod("dangling", gone))
        wait(cluster, lambda: not exists(cluster, "dangling"))
        wait(cluster, cluster.idle)
        assert exists(cluster, "kept")
