"""The explanation, pure: query parsing (table-driven), the JSON shape scripts rely on, the
identity each side is judged by (labels the dataplane's filter leaves out, with why), and the
reachability table in the Kubernetes e2e tests' format."""

from __future__ import annotations

from typing import Any

import pytest

from agent.errors import ExplainError
from agent.model.cluster import ClusterState, ContainerPort, Namespace, Pod, PodPhase
from agent.model.network import PortRange, Protocol
from agent.policy import PolicySet, parse_policy
from agent.policy.dataplane import DataplaneEvidence, resolve_dataplane
from agent.policy.explain_report import render_explanation
from agent.policy.explanation import (
    PodIndex,
    Side,
    explain,
    matrix,
    parse_labels,
    parse_ports,
    parse_query,
)
from tests.policy.builders import cnp, knp

PORTS: dict[str, tuple[str, PortRange]] = {
    "bare": ("80", PortRange.single(80)),
    "protocol": ("53/UDP", PortRange.single(53, Protocol.UDP)),
    "lower case": ("53/udp", PortRange.single(53, Protocol.UDP)),
    "range": ("1000-2000/SCTP", PortRange(1000, 2000, Protocol.SCTP)),
    "any": ("7/any", PortRange(7, 7, Protocol.ANY)),
}


@pytest.mark.parametrize("case", PORTS.values(), ids=PORTS.keys())
def test_ports(case: tuple[str, PortRange]) -> None:
    text, expected = case
    assert parse_ports(text) == expected


BAD_PORTS = {
    "zero": ("0", "port: '0' is not a port (or range) within 1-65535"),
    "too big": ("65536", "port: '65536' is not a port (or range) within 1-65535"),
    "reversed": ("20-10", "port: '20-10' is not a port (or range) within 1-65535"),
    "name": ("http", "port: expected PORT[/PROTO] or FIRST-LAST[/PROTO], got 'http'"),
    "protocol": ("80/icmp", "port: unknown protocol 'icmp' (TCP, UDP, SCTP or ANY)"),
    "empty": ("", "port: give PORT[/PROTO], e.g. 23456/TCP"),
}


@pytest.mark.parametrize("case", BAD_PORTS.values(), ids=BAD_PORTS.keys())
def test_bad_ports(case: tuple[str, str]) -> None:
    text, message = case
    with pytest.raises(ExplainError) as info:
        parse_ports(text)
    assert str(info.value) == message


LABELS = {
    "pairs sorted": ("b=2,a=1", (("a", "1"), ("b", "2"))),
    "prefixed key, empty value": ("example.com/zone=,x=y", (("example.com/zone", ""), ("x", "y"))),
    "spaces and trailing comma": (" a=1 , ", (("a", "1"),)),
}


@pytest.mark.parametrize("case", LABELS.values(), ids=LABELS.keys())
def test_labels(case: tuple[str, Any]) -> None:
    text, expected = case
    assert parse_labels(text, field="from-labels") == expected


BAD_QUERIES: dict[str, tuple[dict[str, Any], str]] = {
    "no source": ({"source": None}, "from: give NAMESPACE/POD (or NAMESPACE with --from-labels)"),
    "bad namespace": ({"source": "ML/a"}, "from: 'ML' is not a valid namespace name"),
    "bad pod": ({"source": "ml/A_b"}, "from: 'A_b' is not a valid pod name"),
    "pod with labels": ({"from_labels": "a=b"},
                        "from: with --from-labels give the namespace only, not 'ml/w'"),
    "label without =": ({"source": "ml", "from_labels": "a"},
                        "from-labels: expected KEY=VALUE, got 'a'"),
    "bad key": ({"source": "ml", "from_labels": "/a=b"}, "from-labels: '/a' is not a valid label key"),
    "account of an existing pod": ({"from_service_account": "sa"},
                                   "from-service-account: only for a pod to be (with "
                                   "--from-labels); an existing pod has its own"),
    "bad account": ({"source": "ml", "from_labels": "a=b", "from_service_account": "S A"},
                    "from-service-account: 'S A' is not a valid name"),
    "long value": ({"source": "ml", "from_labels": "a=" + "x" * 64},
                   f"from-labels: '{'x' * 64}' is not a valid label value (key a)"),
}


@pytest.mark.parametrize("case", BAD_QUERIES.values(), ids=BAD_QUERIES.keys())
def test_bad_queries(case: tuple[dict[str, Any], str]) -> None:
    change, message = case
    args: dict[str, Any] = {"source": "ml/w", "destination": "ml/m", "port": "80", **change}
    with pytest.raises(ExplainError) as info:
        parse_query(**args)
    assert str(info.value) == message


def _pod(name: str, **labels: str) -> Pod:
    return Pod("ml", name, labels, node_name="n1", phase=PodPhase.RUNNING,
               ports=(ContainerPort(23456, "nccl"),))  # fmt: skip


STATE = ClusterState(
    namespaces={"ml": Namespace("ml", {"team": "research", "kubernetes.io/metadata.name": "ml"})},
    pods=(
        _pod("worker-0", role="worker", zone="a", **{"pod-template-hash": "5d8f",
                                                     "topology.kubernetes.io/zone": "a"}),
        _pod("master-0", role="master", zone="b"),
    ),
)
BLOCKING = [
    cnp("workers-out", {"endpointSelector": {"matchLabels": {"role": "worker"}},
                        "egress": [{"toEndpoints": [{"matchLabels": {"zone": "a"}}]}]}),
    cnp("master-in", {"endpointSelector": {"matchLabels": {"role": "master"}},
                      "ingressDeny": [{"fromEndpoints": [{"matchLabels": {"zone": "a"}}],
                                       "toPorts": [{"ports": [{"port": "nccl"}]}]}]}),
]
CILIUM = resolve_dataplane(DataplaneEvidence(cilium=("CiliumNetworkPolicy ml/x",)))


def _explain(manifests: list[dict[str, Any]], *, dataplane: Any = CILIUM) -> dict[str, Any]:
    policies = PolicySet((parse_policy(m) for m in manifests), dataplane=dataplane)
    query = parse_query(source="ml/worker-0", destination="ml/master-0", port="23456")
    return explain(PodIndex(STATE), policies, query, mirror_keys=("zone",)).to_dict()


def test_every_denying_hop_is_reported_with_its_rules() -> None:
    answer = _explain(BLOCKING)
    assert (answer["allowed"], answer["verdict"], answer["denied_at"]) == (
        False, "default_deny", ["egress", "ingress"])
    egress, ingress = answer["hops"]
    assert (egress["verdict"], egress["hubble"], egress["policies"], egress["rules"]) == (
        "default_deny", "POLICY_DENIED", ["CiliumNetworkPolicy/ml/workers-out"], [])
    assert (ingress["verdict"], ingress["hubble"]) == ("deny_rule", "POLICY_DENY")
    assert ingress["enforced"] is True  # a deny rule enforces the direction
    assert ingress["rules"] == [{
        "policy": "CiliumNetworkPolicy/ml/master-in", "kind": "CiliumNetworkPolicy",
        "section": "spec", "field": "ingressDeny", "index": 0, "path": "spec.ingressDeny[0]",
        "effect": "deny", "peer": "{io.kubernetes.pod.namespace=ml, zone=a}", "ports": "nccl/ANY",
    }]  # fmt: skip
    text = render_explanation(answer)
    assert text.splitlines()[0] == "ml/worker-0 -> ml/master-0 port 23456/TCP: DENIED at egress and ingress"


def test_a_flow_on_any_protocol_has_one_hop_entry_per_protocol() -> None:
    policies = PolicySet([parse_policy(knp("egress", {"podSelector": {}, "policyTypes": ["Egress"]}))])
    query = parse_query(source="ml/worker-0", destination="ml/master-0", port="23456/ANY")
    answer = explain(PodIndex(STATE), policies, query).to_dict()
    assert [(h["hop"], h["protocol"], h["verdict"]) for h in answer["hops"]] == [
        ("egress", "TCP", "default_deny"), ("egress", "UDP", "default_deny"),
        ("egress", "SCTP", "default_deny"), ("ingress", "TCP", "allowed"),
        ("ingress", "UDP", "allowed"), ("ingress", "SCTP", "allowed")]
    assert answer["denied_at"] == ["egress"]
    assert "egress TCP at ml/worker-0" in render_explanation(answer)


def test_identities_name_the_labels_the_filter_leaves_out() -> None:
    source = _explain([])["identities"]["from"]
    assert source["zone_label"] == {"zone": "a"}
    assert source["namespace_labels"] == {"kubernetes.io/metadata.name": "ml", "team": "research"}
    assert source["service_account"] == "default"
    assert source["labels"]["io.cilium.k8s.policy.serviceaccount"] == "default"
    assert "pod-template-hash" not in source["labels"]
    excluded = {e["key"]: e["why"] for e in source["excluded_labels"]}
    assert excluded["pod-template-hash"] == "!pod-template-hash (current Cilium default)"
    assert excluded["topology.kubernetes.io/zone"] == \
        "!topology\\.kubernetes\\.io (current Cilium default)"
    assert source["named_ports"] == [{"name": "nccl", "protocol": "TCP", "port": 23456}]
    plain = _explain([], dataplane=resolve_dataplane(DataplaneEvidence()))
    assert plain["identities"]["from"]["excluded_labels"] == []
    assert "topology.kubernetes.io/zone" in plain["identities"]["from"]["labels"]


def test_networkpolicy_policy_types_say_why_a_hop_is_enforced() -> None:
    answer = _explain([knp("egress", {"podSelector": {}, "policyTypes": ["Egress"]})])
    egress, ingress = answer["hops"]
    assert egress["selected_by"][0]["why"] == "policyTypes lists Egress"
    assert (egress["verdict"], egress["enforcing"]) == ("default_deny", ["NetworkPolicy/ml/egress"])
    assert ingress["selected_by"][0]["why"] == \
        "policyTypes does not list Ingress: it does not enforce ingress"
    assert ingress["enforced"] is False and ingress["verdict"] == "allowed"


def test_a_pod_to_be_is_judged_by_its_service_account() -> None:
    by_account = cnp("trainers-only", {
        "endpointSelector": {"matchLabels": {"role": "master"}},
        "ingress": [{"fromEndpoints": [{"matchLabels": {
            "io.cilium.k8s.policy.serviceaccount": "trainer"}}]}]})
    policies = PolicySet([parse_policy(by_account)], dataplane=CILIUM)
    for account, allowed in (("trainer", True), (None, False)):
        query = parse_query(source="ml", from_labels="role=worker", from_service_account=account,
                            destination="ml/master-0", port="23456")
        answer = explain(PodIndex(STATE), policies, query).to_dict()
        assert answer["allowed"] is allowed
        assert answer["identities"]["from"]["service_account"] == (account or "default")


def test_the_matrix_prints_as_the_e2e_truth_table() -> None:
    policies = PolicySet(parse_policy(m) for m in BLOCKING)
    sides = [Side("ml", pod="worker-0"), Side("ml", pod="master-0")]
    (table,) = matrix(PodIndex(STATE), policies, sides, [PortRange.single(23456)])
    # the master's ingressDeny makes its ingress default deny: nothing reaches it
    assert table.pretty() == "-\tml/worker-0\tml/master-0\nml/worker-0\t.\tX\nml/master-0\t.\tX"
    assert table.to_dict() == {"port": "23456/TCP", "pods": ["ml/worker-0", "ml/master-0"],
                               "allowed": [[True, False], [True, False]]}
