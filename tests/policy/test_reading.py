"""Reading policies leniently: what real-world policies use is read; what cannot be read is a
record naming the policy and the field, with what it may select, never an error."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.network import PortRange, Protocol
from agent.policy import PolicySet
from agent.policy.reading import read_policies, read_policy
from agent.policy.rule import Policy, UnreadablePolicy
from tests.policy.builders import ccnp, cnp, ep, knp

APP = {"matchLabels": {"app": "web"}}

# Shapes used by Cilium's and Kubernetes' documentation and common recipe collections (written
# here from their field reference): every one must be read.
READABLE: list[tuple[str, dict[str, Any]]] = [
    ("host policy, VRRP without a port", ccnp("vrrp", {
        "nodeSelector": {"matchLabels": {"role": "lb"}},
        "ingress": [{"fromEntities": ["cluster"], "toPorts": [{"ports": [{"protocol": "VRRP"}]}]}],
    })),
    ("IGMP with port 0", cnp("igmp", {
        "endpointSelector": APP,
        "egress": [{"toEntities": ["world"], "toPorts": [{"ports": [{"port": "0", "protocol": "IGMP"}]}]}],
    })),
    ("GRE, ESP, AH, IPIP without ports", cnp("tunnels", {
        "endpointSelector": APP,
        "ingress": [{"toPorts": [{"ports": [{"protocol": p} for p in ("GRE", "ESP", "AH", "IPIP")]}]}],
    })),
    ("HTTP rules with headers", cnp("http", {
        "endpointSelector": APP,
        "ingress": [{"fromEndpoints": [{"matchLabels": {"role": "client"}}], "toPorts": [{
            "ports": [{"port": "80", "protocol": "TCP"}],
            "rules": {"http": [{"method": "GET", "path": "/public", "headers": ["X-Token: 1"]}]},
        }]}],
    })),
    ("Kafka rules", cnp("kafka", {
        "endpointSelector": APP,
        "ingress": [{"toPorts": [{"ports": [{"port": "9092", "protocol": "TCP"}],
                                  "rules": {"kafka": [{"role": "produce", "topic": "t"}]}}]}],
    })),
    ("DNS proxy and toFQDNs", cnp("dns", {
        "endpointSelector": APP,
        "egress": [
            {"toEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "kube-system",
                                              "k8s:k8s-app": "kube-dns"}}],
             "toPorts": [{"ports": [{"port": "53", "protocol": "ANY"}],
                          "rules": {"dns": [{"matchPattern": "*"}]}}]},
            {"toFQDNs": [{"matchName": "api.example.com"}]},
        ],
    })),
    ("generic L7 protocol", cnp("l7proto", {
        "endpointSelector": APP,
        "ingress": [{"toPorts": [{"ports": [{"port": "6379", "protocol": "TCP"}],
                                  "rules": {"l7proto": "r2d2", "l7": [{"cmd": "READ"}]}}]}],
    })),
    ("TLS interception and SNI", cnp("tls", {
        "endpointSelector": APP,
        "egress": [{"toPorts": [{
            "ports": [{"port": "443", "protocol": "TCP"}],
            "terminatingTLS": {"secret": {"name": "a"}}, "originatingTLS": {"secret": {"name": "b"}},
            "serverNames": ["one.example.com"], "rules": {"http": [{}]},
        }]}],
    })),
    ("custom Envoy listener", cnp("listener", {
        "endpointSelector": APP,
        "egress": [{"toPorts": [{"ports": [{"port": "80"}], "listener": {
            "envoyConfig": {"kind": "CiliumEnvoyConfig", "name": "e"}, "name": "l"}}]}],
    })),
    ("mutual authentication", cnp("auth", {
        "endpointSelector": APP,
        "ingress": [{"fromEndpoints": [{}], "authentication": {"mode": "required"}}],
    })),
    ("fromRequires (deprecated, still served)", cnp("requires", {
        "endpointSelector": APP,
        "ingress": [{"fromRequires": [{"matchLabels": {"env": "prod"}}]}],
    })),
    ("services, CIDR sets, cloud groups, nodes, entities", cnp("peers", {
        "endpointSelector": APP,
        "egress": [
            {"toServices": [{"k8sService": {"serviceName": "db", "namespace": "ml"}}]},
            {"toCIDRSet": [{"cidr": "10.0.0.0/8", "except": ["10.96.0.0/12"]}]},
            {"toGroups": [{"aws": {"securityGroupsIds": ["sg-1"]}}]},
            {"toNodes": [{"matchLabels": {"node-role": "infra"}}]},
            {"toEntities": ["kube-apiserver", "remote-node", "health"]},
        ],
        "ingressDeny": [{"fromEntities": ["world"]}],
        "enableDefaultDeny": {"egress": False},
    })),
    ("ICMP rules", cnp("icmp", {
        "endpointSelector": APP,
        "ingress": [{"icmps": [{"fields": [{"type": 8, "family": "IPv4"}]}]}],
    })),
    ("NetworkPolicy port range and ipBlock", knp("range", {
        "podSelector": {},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [{"ipBlock": {"cidr": "172.17.0.0/16", "except": ["172.17.1.0/24"]}}]}],
        "egress": [{"ports": [{"protocol": "TCP", "port": 32000, "endPort": 32768}]},
                   {"ports": [{"port": 53, "protocol": "UDP"}]}],
    })),
    ("NetworkPolicy deny all, allow all, named port", knp("recipes", {
        "podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{}, {"from": [{"namespaceSelector": {}}], "ports": [{"port": "http"}]}],
    })),
]


@pytest.mark.parametrize(("what", "obj"), READABLE, ids=[w for w, _ in READABLE])
def test_real_world_policies_are_read(what: str, obj: dict[str, Any]) -> None:
    assert isinstance(read_policy(obj), Policy), what


@pytest.mark.parametrize(
    ("obj", "field", "problem"),
    [
        (cnp("typo", {"endpointSelector": APP, "ingress": [{"fromEndpoint": [{}]}]}),
         "spec.ingress[0].fromEndpoint", "unknown field"),
        (cnp("proto", {"endpointSelector": APP, "ingress": [
            {"toPorts": [{"ports": [{"port": "80", "protocol": "QUIC"}]}]}]}),
         "spec.ingress[0].toPorts[0].ports[0].protocol", "unknown protocol 'QUIC'"),
        (cnp("vrrp-port", {"endpointSelector": APP, "ingress": [
            {"toPorts": [{"ports": [{"port": "112", "protocol": "VRRP"}]}]}]}),
         "spec.ingress[0].toPorts[0].ports[0].port", "VRRP has no ports"),
        (cnp("auth", {"endpointSelector": APP, "ingress": [
            {"authentication": {"mode": "sometimes"}}]}),
         "spec.ingress[0].authentication.mode", "unknown authentication mode 'sometimes'"),
        (knp("np", {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}),
         "spec.podSelector.matchExpressions[0].operator", "unknown operator 'Near'"),
    ],
)
def test_an_unreadable_policy_names_the_field_and_the_problem(
    obj: dict[str, Any], field: str, problem: str
) -> None:
    found = read_policy(obj)
    assert isinstance(found, UnreadablePolicy)
    assert found.field == field
    assert problem in found.problem
    assert found.id.endswith("/" + obj["metadata"]["name"])


NEW_FIELD = {"futureField": True}


@pytest.mark.parametrize(
    ("obj", "selected", "not_selected"),
    [
        # the selector is readable: exactly the pods it selects, in its namespace
        (cnp("a", {"endpointSelector": APP, **NEW_FIELD}), [ep({"app": "web"})],
         [ep({"app": "db"}), ep({"app": "web"}, ns="other")]),
        (knp("b", {"podSelector": APP, **NEW_FIELD}), [ep({"app": "web"})], [ep({"app": "db"})]),
        # the selector itself is unreadable: every pod of its namespace
        (cnp("c", {"endpointSelector": {"matchLabels": ["x"]}}), [ep({"app": "db"})],
         [ep({"app": "db"}, ns="other")]),
        # clusterwide: every namespace
        (ccnp("d", {"endpointSelector": {"matchLabels": ["x"]}}),
         [ep({"app": "db"}), ep({"app": "db"}, ns="other")], []),
        # a host policy selects nodes, never pods
        (ccnp("e", {"nodeSelector": {}, **NEW_FIELD}), [], [ep({"app": "web"})]),
        # specs: each block's selector
        (cnp("f", specs=[{"endpointSelector": APP, **NEW_FIELD},
                         {"endpointSelector": {"matchLabels": {"app": "db"}}}]),
         [ep({"app": "web"}), ep({"app": "db"})], [ep({"app": "cache"})]),
    ],
)
def test_the_jobs_an_unreadable_policy_may_select_are_uncertain(
    obj: dict[str, Any], selected: list[Any], not_selected: list[Any]
) -> None:
    reading = read_policies([obj])
    assert not reading.policies
    [record] = reading.unreadable
    policy_set = PolicySet((), unreadable=reading.unreadable)
    for endpoint in selected:
        assert policy_set.uncertain(endpoint) == (record,), endpoint
    for endpoint in not_selected:
        assert policy_set.uncertain(endpoint) == (), endpoint


def test_one_unreadable_policy_leaves_the_others_in_force() -> None:
    reading = read_policies([
        cnp("broken", {"endpointSelector": {}, "ingres": []}),
        cnp("deny-web", {"endpointSelector": APP, "ingress": [{}]}),
    ])
    assert [p.id for p in reading.policies] == ["CiliumNetworkPolicy/ml/deny-web"]
    [warning] = reading.warnings()
    assert "CiliumNetworkPolicy/ml/broken: spec.ingres: unknown field" in warning
    policy_set = PolicySet(reading.policies, unreadable=reading.unreadable)
    verdict = policy_set.check(ep({"app": "a"}), ep({"app": "web"}), PortRange.single(80))
    assert not verdict.allowed and verdict.policies == ("CiliumNetworkPolicy/ml/deny-web",)
    assert policy_set.uncertain(ep({"app": "web"}))[0].id == "CiliumNetworkPolicy/ml/broken"


def test_a_later_object_of_the_same_id_replaces_an_earlier_one() -> None:
    reading = read_policies([cnp("p", {"endpointSelector": {}, "bad": 1}),
                             cnp("p", {"endpointSelector": {}, "ingress": [{}]})])
    assert [p.id for p in reading.policies] == ["CiliumNetworkPolicy/ml/p"]
    assert not reading.unreadable


def test_extended_protocols_never_match_a_tcp_or_udp_flow() -> None:
    found = read_policy(cnp("vrrp", {"endpointSelector": APP, "ingress": [
        {"toPorts": [{"ports": [{"protocol": "VRRP"}]}]}]}))
    assert isinstance(found, Policy)
    policy_set = PolicySet([found])
    for proto in (Protocol.TCP, Protocol.UDP):
        assert not policy_set.check(ep({"app": "x"}), ep({"app": "web"}),
                                    PortRange.single(112, proto)).allowed
