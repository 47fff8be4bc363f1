"""Which dataplane enforces a cluster's policies, and which identity filter that implies."""

from __future__ import annotations

import pytest

from agent.model.network import PortRange
from agent.policy import PolicySet, parse_policy
from agent.policy.dataplane import DataplaneEvidence, DataplaneKind, resolve_dataplane
from agent.settings import DataplaneSetting
from tests.policy.builders import cnp, ep, knp

CNP_SEEN = ("CiliumNetworkPolicy ml/a",)
TOPOLOGY = "topology.kubernetes.io/zone"
P = PortRange.single(23456)


@pytest.mark.parametrize(
    ("evidence", "setting", "kind", "reason"),
    [
        (DataplaneEvidence(), DataplaneSetting.AUTO, DataplaneKind.KUBERNETES, "no Cilium"),
        (DataplaneEvidence(cilium=CNP_SEEN), DataplaneSetting.AUTO, DataplaneKind.CILIUM,
         "CiliumNetworkPolicy ml/a"),
        (DataplaneEvidence(cilium_config={}), DataplaneSetting.AUTO, DataplaneKind.CILIUM,
         "ConfigMap kube-system/cilium-config"),
        (DataplaneEvidence(cilium=CNP_SEEN), DataplaneSetting.KUBERNETES,
         DataplaneKind.KUBERNETES, "setting diagnosis.dataplane: kubernetes"),
        (DataplaneEvidence(), DataplaneSetting.CILIUM, DataplaneKind.CILIUM,
         "setting diagnosis.dataplane: cilium"),
    ],
)
def test_the_dataplane_is_learnt_from_the_cluster_unless_set(
    evidence: DataplaneEvidence, setting: DataplaneSetting, kind: DataplaneKind, reason: str
) -> None:
    dataplane = resolve_dataplane(evidence, setting=setting)
    assert dataplane.kind is kind
    assert reason in dataplane.reason
    assert dataplane.identity.keeps(TOPOLOGY) is (kind is DataplaneKind.KUBERNETES)


@pytest.mark.parametrize(
    ("evidence", "labels", "version", "key", "kept"),
    [
        # cilium-config's labels key
        (DataplaneEvidence(cilium_config={"labels": "k8s:!team"}), None, None, "team", False),
        # the setting replaces cilium-config's value
        (DataplaneEvidence(cilium_config={"labels": "k8s:!team"}), "k8s:!other", None, "team",
         True),
        # the release: from the setting, else the Cilium agent's image tag
        (DataplaneEvidence(cilium=CNP_SEEN), None, "1.18.4", TOPOLOGY, True),
        (DataplaneEvidence(cilium=CNP_SEEN, cilium_image="quay.io/cilium/cilium:v1.18.2@sha256:ab"),
         None, None, TOPOLOGY, True),
        (DataplaneEvidence(cilium=CNP_SEEN, cilium_image="quay.io/cilium/cilium:v1.19.0"),
         None, None, TOPOLOGY, False),
        (DataplaneEvidence(cilium=CNP_SEEN, cilium_image="quay.io/cilium/cilium:v1.18.2"),
         None, "1.19", TOPOLOGY, False),
    ],
)
def test_the_cilium_filter_comes_from_settings_cilium_config_and_the_release(
    evidence: DataplaneEvidence, labels: str | None, version: str | None, key: str, kept: bool
) -> None:
    dataplane = resolve_dataplane(evidence, cilium_labels=labels, cilium_version=version)
    assert dataplane.kind is DataplaneKind.CILIUM
    assert dataplane.identity.keeps(key) is kept


def test_a_bad_cilium_config_pattern_warns_and_falls_back_to_the_default() -> None:
    dataplane = resolve_dataplane(DataplaneEvidence(cilium_config={"labels": "k8s:!("}))
    assert dataplane.kind is DataplaneKind.CILIUM
    [warning] = dataplane.warnings
    assert "kube-system/cilium-config labels" in warning and "default" in warning
    assert not dataplane.identity.keeps("pod-template-hash")


def test_plain_kubernetes_sets_cilium_policies_aside_and_says_so() -> None:
    policies = [
        parse_policy(cnp("deny-all", {"endpointSelector": {}, "ingress": [{}]})),
        parse_policy(knp("zone-a", {"podSelector": {"matchLabels": {TOPOLOGY: "zone-a"}},
                                    "ingress": [{"from": [{"podSelector": {
                                        "matchLabels": {TOPOLOGY: "zone-a"}}}]}]})),
    ]
    dataplane = resolve_dataplane(DataplaneEvidence(), setting=DataplaneSetting.KUBERNETES)
    policy_set = PolicySet(policies, dataplane=dataplane)
    assert policy_set.ignored == ("CiliumNetworkPolicy/ml/deny-all",)
    assert any("not enforced" in w for w in policy_set.warnings())
    a, b = ep({TOPOLOGY: "zone-a"}), ep({TOPOLOGY: "zone-b"})
    assert policy_set.check(a, ep({TOPOLOGY: "zone-a", "x": "1"}), P).allowed
    assert not policy_set.check(b, a, P).allowed  # the NetworkPolicy reads the zone label
    # the same policies under Cilium: the CNP denies everything, the zone label is not seen
    cilium = PolicySet(policies)
    assert not cilium.check(a, ep({TOPOLOGY: "zone-a", "x": "1"}), P).allowed
