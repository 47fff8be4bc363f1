"""The dataplane with the real policy evaluator (agent.policy): verdicts and Hubble drop reasons,
and the seed-blocked job unblocked by co-locating it."""

from __future__ import annotations

from typing import Any

import pytest

from agent.twin.cluster import TwinCluster
from agent.twin.dataplane import DropReason, PodEndpoint
from agent.twin.dataplane_policy import compile_policies
from agent.twin.patch import PatchType
from agent.twin.training import JobPhase
from tests.support.objects import cnp
from tests.twin.twin_fixtures import PYTORCHJOBS, all_running, fast, pods, wait

ZONE = "netpol.example.com/zone"


BOUNDARY = [
    cnp(f"zone-{z}", {"endpointSelector": {"matchLabels": {ZONE: z}},
                      "ingress": [{"fromEndpoints": [{"matchLabels": {ZONE: z}}]}]})
    for z in ("a", "b")
]  # fmt: skip
DENY_SSH = cnp(
    "deny-ssh",
    {
        "endpointSelector": {},
        "ingressDeny": [{"fromEndpoints": [{}], "toPorts": [{"ports": [{"port": "22"}]}]}],
    },
)
BROKEN = cnp(
    "broken", {"endpointSelector": {"matchExpressions": [{"key": "x", "operator": "Near"}]}}
)
K8S_DENY_ALL = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "deny-all", "namespace": "locked"}, "spec": {"podSelector": {}}}  # fmt: skip


def ep(name: str, zone: str, namespace: str = "ml") -> PodEndpoint:
    return PodEndpoint(namespace, name, {ZONE: zone})


@pytest.mark.parametrize(
    ("policies", "src", "dst", "port", "allowed", "reason"),
    [
        ([], ep("w", "a"), ep("m", "b"), 23456, True, None),
        (BOUNDARY, ep("w", "a"), ep("m", "b"), 23456, False, DropReason.POLICY_DENIED),
        (BOUNDARY, ep("w", "a"), ep("w2", "a"), 23456, True, None),
        ([DENY_SSH], ep("l", "a"), ep("w", "a"), 22, False, DropReason.POLICY_DENY),
        # a deny rule also enforces default deny on its direction (Cilium): other ports are dropped
        ([DENY_SSH], ep("l", "a"), ep("w", "a"), 23456, False, DropReason.POLICY_DENIED),
        ([BROKEN], ep("w", "a"), ep("m", "b"), 23456, True, None),  # an invalid policy is ignored
        ([K8S_DENY_ALL], ep("w", "a"), ep("m", "a", "locked"), 80, False, DropReason.POLICY_DENIED),
    ],
)
def test_verdicts_and_drop_reasons(
    policies: list[dict[str, Any]],
    src: PodEndpoint,
    dst: PodEndpoint,
    port: int,
    allowed: bool,
    reason: DropReason | None,
) -> None:
    check = compile_policies(policies, {"ml": {"team": "research"}, "locked": {}})
    result = check(src, dst, port, "TCP")
    assert result.allowed is allowed
    assert result.drop_reason == reason
    if not allowed and reason is DropReason.POLICY_DENY:
        assert result.policies == ("CiliumNetworkPolicy/ml/deny-ssh",)


def test_seed_blocked_is_blocked_by_its_policies_and_co_location_unblocks_it() -> None:
    with TwinCluster(fast("seed-blocked")) as cluster:
        wait(
            cluster,
            lambda: cluster.runtime.job_state("ml", "llm-finetune").phase is JobPhase.BLOCKED,
        )
        state = cluster.runtime.job_state("ml", "llm-finetune")
        assert {reason for _, reason in state.denied} == {DropReason.POLICY_DENIED}
        zone = "topology.kubernetes.io/zone"
        fix = {"spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {"Master": {"template": {"spec": {
            "nodeSelector": {zone: "us-east-1a"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}}}}}  # fmt: skip
        cluster.store.patch(
            PYTORCHJOBS, "llm-finetune", fix, namespace="ml", patch_type=PatchType.MERGE
        )
        wait(cluster, lambda: not pods(cluster))
        cluster.store.patch(PYTORCHJOBS, "llm-finetune", {"spec": {"runPolicy": {"suspend": False}}},
                            namespace="ml", patch_type=PatchType.MERGE)  # fmt: skip
        wait(cluster, all_running(cluster, 5))
        wait(
            cluster,
            lambda: cluster.runtime.job_state("ml", "llm-finetune").phase is JobPhase.TRAINING,
        )
        assert 0.80 <= cluster.runtime.pod_utilization("ml", "llm-finetune-worker-0") <= 0.90


@pytest.mark.parametrize(
    ("scenario", "low", "high", "zones"),
    [
        ("healthy", 0.80, 0.90, {"us-east-1a"}),
        ("seed-degraded", 0.35, 0.45, {"us-east-1a", "us-east-1b"}),
    ],
)
def test_scenarios_train_at_their_calibrated_utilization(
    scenario: str, low: float, high: float, zones: set[str]
) -> None:
    with TwinCluster(fast(scenario)) as cluster:
        wait(
            cluster,
            lambda: cluster.runtime.job_state("ml", "llm-finetune").phase is JobPhase.TRAINING,
        )
        assert {cluster.dataplane.zone_of(p) for p in pods(cluster)} == zones
        for i in range(4):
            assert low <= cluster.runtime.pod_utilization("ml", f"llm-finetune-worker-{i}") <= high


TEAM = cnp("team-only", {"endpointSelector": {}, "ingress": [
    {"fromEndpoints": [{"matchLabels": {"team": "a"}}]}]})
HTTP_ON_TRAINING = cnp("http", {"endpointSelector": {}, "ingress": [{"fromEndpoints": [{}], "toPorts": [
    {"ports": [{"port": "23456", "protocol": "TCP"}], "rules": {"http": [{}]}}]}]})


def test_the_twin_follows_the_agents_semantics_identities_l7_and_named_ports() -> None:
    a = PodEndpoint("ml", "a", {"team": "a"})
    b = PodEndpoint("ml", "b", {"team": "b"})
    # cilium-config's labels: `team` left out of identities, the selector never matches
    assert compile_policies([TEAM], {}, None)(a, b, 80, "TCP").allowed
    assert not compile_policies([TEAM], {}, {"labels": "k8s:!team"})(a, b, 80, "TCP").allowed
    # an L7 rule on the training port: the proxy fails the non-HTTP flow
    dropped = compile_policies([HTTP_ON_TRAINING], {}, None)(a, b, 23456, "TCP")
    assert (dropped.allowed, dropped.drop_reason) == (False, DropReason.L7_PROXY)
    # a TCP rule naming a port resolves on TCP only
    nccl = cnp("nccl", {"endpointSelector": {}, "ingress": [{"toPorts": [
        {"ports": [{"port": "nccl", "protocol": "TCP"}]}]}]})
    udp = PodEndpoint("ml", "u", {}, named_ports={("nccl", "UDP"): 23456})
    tcp = PodEndpoint("ml", "t", {}, named_ports={("nccl", "TCP"): 23456})
    check = compile_policies([nccl], {}, None)
    assert check(a, tcp, 23456, "TCP").allowed and not check(a, udp, 23456, "TCP").allowed


def test_the_twin_reads_its_cilium_config_configmap() -> None:
    from agent.twin.resources import lookup

    with TwinCluster(fast("healthy")) as cluster:
        a, b = {"metadata": {"name": "a", "namespace": "ml", "labels": {"team": "a"}}}, {
            "metadata": {"name": "b", "namespace": "ml", "labels": {"team": "b"}}}
        cluster.store.create(lookup("ciliumnetworkpolicies"), TEAM, namespace="ml")
        wait(cluster, lambda: cluster.dataplane.check(a, b, 80).allowed)
        cluster.store.create(lookup("configmaps"), {
            "metadata": {"name": "cilium-config", "namespace": "kube-system"},
            "data": {"labels": "k8s:!team"}}, namespace="kube-system")  # fmt: skip
        wait(cluster, lambda: not cluster.dataplane.check(a, b, 80).allowed)
