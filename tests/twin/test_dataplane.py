"""The dataplane: endpoints from pods, zone links, recompiling on policy changes, and the training
runtime's required flows and blocked-job behaviour with a stand-in compiler that denies cross-zone
traffic (the real policy evaluator is exercised by the seed-blocked end-to-end test)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from agent.twin.cluster import TwinCluster
from agent.twin.dataplane import DropReason, FlowCheck, FlowResult, PodEndpoint, endpoint_of
from agent.twin.resources import lookup
from agent.twin.training import JobPhase
from agent.twin.training_runtime import Flow, group_flows, required_flows
from tests.support import objects
from tests.support.objects import JOB_ROLE
from tests.twin.twin_fixtures import all_running, fast, pods, wait

ZONE_LABEL = "netpol.example.com/zone"


def _member(name: str, role: str | None = None) -> dict[str, Any]:
    """A pod of a training gang with job role `role` (none: a worker)."""
    return objects.pod(name, ns=None, labels={JOB_ROLE: role} if role else {}, phase=None, kind=False)


@pytest.mark.parametrize(
    ("pods_", "expected"),
    [
        # PyTorch: workers dial the master; the ring runs master -> w0 -> w1 -> master
        (
            [_member("m", "master"), _member("w0"), _member("w1")],
            [Flow("w0", "m", 1), Flow("w1", "m", 1), Flow("m", "w0", 1), Flow("w0", "w1", 1)],
        ),
        # MPI: the launcher dials every worker; it is not in the ring
        (
            [_member("l", "launcher"), _member("w0"), _member("w1")],
            [Flow("l", "w0", 1), Flow("l", "w1", 1), Flow("w0", "w1", 1)],
        ),
        ([_member("w0", "master")], []),
    ],
)
def test_required_flows(pods_: list[dict[str, Any]], expected: list[Flow]) -> None:
    assert required_flows(pods_, port=1) == expected


@pytest.mark.parametrize(
    ("coordinator", "workers", "expected"),
    [
        # every worker dials the coordinator; the workers' ring runs w0 -> w1 -> w2 -> w0
        ("c", ["w1", "w0", "w2"],
         [Flow("w1", "c", 1), Flow("w0", "c", 1), Flow("w2", "c", 1),
          Flow("w0", "w1", 1), Flow("w1", "w2", 1), Flow("w2", "w0", 1)]),
        # two workers: one ring flow (the reply direction of a connection is allowed)
        ("c", ["w0", "w1"], [Flow("w0", "c", 1), Flow("w1", "c", 1), Flow("w0", "w1", 1)]),
        (None, ["w0", "w1"], [Flow("w0", "w1", 1)]),  # no coordinator yet: only the ring
        ("c", [], []),
    ],
)
def test_group_flows(coordinator: str | None, workers: list[str], expected: list[Flow]) -> None:
    assert group_flows(coordinator, workers, port=1) == expected


def test_endpoint_of_pod() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "labels": {"a": "b"}},
        "spec": {
            "serviceAccountName": "trainer",
            "containers": [{"ports": [{"name": "http", "containerPort": 80}]}],
        },
    }
    assert endpoint_of(pod) == PodEndpoint("ml", "p", {"a": "b"}, "trainer", {("http", "TCP"): 80})


def deny_cross_zone(
    policies: Sequence[Mapping[str, Any]],
    _ns: Mapping[str, Mapping[str, str]],
    _cilium_config: Mapping[str, str] | None = None,
) -> FlowCheck:
    """Stand-in: with any policy stored, flows between pods of different zone labels are dropped."""

    def check(src: PodEndpoint, dst: PodEndpoint, _port: int, _proto: str) -> FlowResult:
        if policies and src.labels.get(ZONE_LABEL) != dst.labels.get(ZONE_LABEL):
            return FlowResult(False, DropReason.POLICY_DENIED)
        return FlowResult(True)

    return check


def test_blocked_job_drops_crash_loops_and_recovers_when_policies_go() -> None:
    with TwinCluster(fast("seed-blocked"), compiler=deny_cross_zone) as cluster:
        wait(
            cluster,
            lambda: cluster.runtime.job_state("ml", "llm-finetune").phase is JobPhase.BLOCKED,
        )
        wait(
            cluster,
            lambda: any(
                k.destination_pod == "llm-finetune-master-0" for k in cluster.runtime.drops()
            ),
        )
        drop = next(
            k for k in cluster.runtime.drops() if k.destination_pod == "llm-finetune-master-0"
        )
        assert drop.reason == "POLICY_DENIED" and drop.source_pod.startswith("llm-finetune-worker-")
        assert cluster.runtime.pod_utilization("ml", "llm-finetune-worker-0") < 0.05
        # the workers exhaust their attempts and exit with Error, then back off
        wait(cluster, lambda: any(
            cs.get("restartCount", 0) > 0 for p in pods(cluster) for cs in p["status"].get("containerStatuses", [])))  # fmt: skip
        wait(cluster, lambda: any(
            c["type"] == "Restarting" and c["status"] == "True"
            for c in cluster.store.get(lookup("pytorchjobs"), "llm-finetune", namespace="ml")["status"]["conditions"]))  # fmt: skip
        # removing the policies lets the job train
        for policy in ("zone-boundary-us-east-1a", "zone-boundary-us-east-1b"):
            cluster.store.delete(lookup("cnp"), policy, namespace="ml")
        wait(cluster, all_running(cluster, 5))
        wait(
            cluster,
            lambda: cluster.runtime.job_state("ml", "llm-finetune").phase is JobPhase.TRAINING,
            timeout=20,
        )
        assert 0.35 <= cluster.runtime.pod_utilization("ml", "llm-finetune-worker-0") <= 0.45


def test_network_change_listener_fires_on_policy_writes() -> None:
    with TwinCluster(fast("seed-blocked"), compiler=deny_cross_zone) as cluster:
        for policy in ("zone-boundary-us-east-1a", "zone-boundary-us-east-1b"):
            cluster.store.delete(lookup("cnp"), policy, namespace="ml")
        wait(
            cluster,
            lambda: cluster.runtime.job_state("ml", "llm-finetune").phase is JobPhase.TRAINING,
        )
        calls: list[int] = []
        cluster.dataplane.on_change(lambda: calls.append(1))
        cluster.store.create(
            lookup("cnp"),
            {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"endpointSelector": {}}},
        )
        wait(cluster, lambda: bool(calls))
        # the stand-in compiler now sees a policy: the split job is blocked
        wait(
            cluster,
            lambda: cluster.runtime.job_state("ml", "llm-finetune").phase is JobPhase.BLOCKED,
        )
        assert cluster.dataplane.zones.slowest(["a", "b"]) == cluster.dataplane.zones.inter
