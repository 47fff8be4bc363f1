"""Fixtures shared by the remediation tests that run against the lab: a migrated SQLite template
(once per module) and a fresh incident store copied from it per test; and, for the Kueue tests
(test_remediator_kueue, test_remediator_kueue_trainer, test_kill_kueue_rollback), what they
share: the ClusterQueue's GPU quota taken away, the settings that give up waiting for Kueue's
admission quickly, where the namespace's live pods run, the writes the agent's ServiceAccount
made, the namespace's Workloads.

Who uses it: the tests of this folder (test_kill* take the template only; they open stores with
their own budgets). What it does not do: start the lab (see `tests.remediation.harness`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.model.cluster import ZONE_LABEL
from agent.model.workload import KUEUE_WORKLOAD
from agent.settings import RemediationSettings
from agent.store.repository import IncidentStore
from agent.twin.faults import AuditEntry
from tests.remediation.harness import FAST, Lab, migrated_template, new_store


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return migrated_template(tmp_path_factory.mktemp("db"))


@pytest.fixture
def store(template: Path, tmp_path: Path) -> Iterator[IncidentStore]:
    s, _ = new_store(template, tmp_path)
    yield s
    s.close()


def _no_gpu_quota(lab: Lab) -> None:
    from agent.twin.patch import PatchType
    from agent.twin.resources import lookup

    lab.cluster.store.patch(lookup("clusterqueues", group="kueue.x-k8s.io"), "cluster-queue",
                            {"spec": {"resourceGroups": [{
                                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                                "flavors": [{"name": "default-flavor", "resources": [
                                    {"name": "cpu", "nominalQuota": "200"},
                                    {"name": "memory", "nominalQuota": "2Ti"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": "0"}]}]}]}},
                            patch_type=PatchType.MERGE)  # fmt: skip


@pytest.fixture
def no_gpu_quota() -> Callable[[Lab], None]:
    """Takes the twin ClusterQueue's GPU quota to zero (as its admin): Kueue admits no GPU job
    from then on (the job's re-queue waits, then the run rolls back)."""
    return _no_gpu_quota


@pytest.fixture
def admission_given_up() -> RemediationSettings:
    """FAST, giving up on Kueue's admission after a second and a half."""
    return replace(FAST, schedule_timeout=timedelta(seconds=1.5))


def _live_pod_zones(lab: Lab, namespace: str = "ml") -> dict[str, int]:
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"].get(ZONE_LABEL)
             for n in lab.api.json("GET", "/api/v1/nodes")["items"]}  # fmt: skip
    out: dict[str, int] = {}
    for pod in lab.api.json("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]:
        if pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        zone = str(nodes.get(pod["spec"].get("nodeName")))
        out[zone] = out.get(zone, 0) + 1
    return out


@pytest.fixture
def live_pod_zones() -> Callable[..., dict[str, int]]:
    """How many of a namespace's pods not finished (default `ml`) each zone holds (pending: "None")."""
    return _live_pod_zones


def _agent_writes(lab: Lab, verbs: tuple[str, ...]) -> list[AuditEntry]:
    assert lab.cluster.api is not None
    return [e for e in lab.cluster.api.accounting.audited()
            if e.user.startswith("system:serviceaccount:") and e.verb in verbs]  # fmt: skip


@pytest.fixture
def agent_writes() -> Callable[[Lab, tuple[str, ...]], list[AuditEntry]]:
    """The twin's audit entries of the requests the agent's ServiceAccount made with these verbs (dry runs included)."""
    return _agent_writes


def _workloads(lab: Lab) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = lab.api.json(
        "GET", f"/apis/{KUEUE_WORKLOAD.api_version}/namespaces/ml/{KUEUE_WORKLOAD.plural}")["items"]
    return found


@pytest.fixture
def workloads() -> Callable[[Lab], list[dict[str, Any]]]:
    """The Kueue Workloads of the `ml` namespace, as the API serves them."""
    return _workloads
