"""Helpers for tests that run the whole twin in-process: a small scenario and wait helpers."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from agent.twin.cluster import TwinCluster
from agent.twin.resources import lookup
from agent.twin.scenario import Scenario, load_scenario, parse_scenario

PODS = lookup("pods")
SERVICES = lookup("services")
PYTORCHJOBS = lookup("pytorchjobs")

# Fast model timings so a test sees pods start and crash in a fraction of a second.
FAST_MODEL = {
    "pod_start_seconds": 0.05,
    "crash_backoff_seconds": 0.2,
    "crash_backoff_max_seconds": 0.4,
    "training": {"connect_attempts": 2, "connect_retry_seconds": 0.05},
}


def fast(name: str, **model: Any) -> Scenario:
    """A packaged scenario with fast timings."""
    base = load_scenario(name)
    data = {
        "name": base.name,
        "seed": base.seed,
        "model": {**FAST_MODEL, **model},
        "nodes": [],
        "objects": copy.deepcopy(base.objects),
    }
    scenario = parse_scenario(data, name=base.name, where="test")
    return Scenario(
        name=scenario.name,
        description=base.description,
        seed=base.seed,
        model=scenario.model if not base.model.pod_zone_label else _with_label(scenario, base),
        nodes=base.nodes,
        namespaces=base.namespaces,
        objects=scenario.objects,
    )


def _with_label(scenario: Scenario, base: Scenario) -> Any:
    from dataclasses import replace

    return replace(scenario.model, pod_zone_label=base.model.pod_zone_label)


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
