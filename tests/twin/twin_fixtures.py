"""Helpers for tests that run the whole twin in-process: a small scenario and wait helpers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from agent.twin.cluster import TwinCluster
from agent.twin.resources import lookup
from agent.twin.scenario import Scenario, load_scenario

PODS = lookup("pods")
SERVICES = lookup("services")
PYTORCHJOBS = lookup("pytorchjobs")


def fast(name: str) -> Scenario:
    """A packaged scenario with fast model timings: pods start and crash in a fraction of a second."""
    base = load_scenario(name)
    model = replace(
        base.model,
        pod_start_seconds=0.05,
        pod_stop_seconds=0.1,
        crash_backoff_seconds=0.2,
        crash_backoff_max_seconds=0.4,
        training=replace(base.model.training, connect_attempts=2, connect_retry_seconds=0.05),
    )
    return replace(base, model=model)


@contextmanager
def running(scenario: Scenario, *, speed: float = 1.0) -> Iterator[TwinCluster]:
    cluster = TwinCluster(scenario, speed=speed).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def pods(
    cluster: TwinCluster, namespace: str = "ml", selector: str | None = None
) -> list[dict[str, Any]]:
    return cluster.store.list(PODS, namespace=namespace, label_selector=selector)[0]


def wait(cluster: TwinCluster, predicate: Callable[[], bool], *, timeout: float = 15.0) -> None:
    assert cluster.wait_until(predicate, timeout=timeout), "condition not reached in time"


def all_running(cluster: TwinCluster, count: int, namespace: str = "ml") -> Callable[[], bool]:
    def check() -> bool:
        found = [p for p in pods(cluster, namespace) if not p["metadata"].get("deletionTimestamp")]
        return len(found) == count and all(p["status"].get("phase") == "Running" for p in found)

    return check
