"""Features that decide a flow beyond L3/L4 allow and deny: L7 rules (the proxy), the requires
clauses, and the caveats of features not modelled exactly (table-driven)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from agent.model.network import Caveat, DenyReason, Endpoint, FlowVerdict, Hop, PortRange, Protocol
from agent.policy import PolicySet, parse_policy
from tests.policy.builders import cnp, ep, knp

MASTER = ep({"role": "master", "team": "a"}, ports={"pytorchjob-port": 23456})
WORKER = ep({"role": "worker", "team": "a"})
OUTSIDER = ep({"role": "worker", "team": "b"})
SEL_MASTER = {"matchLabels": {"role": "master"}}
FROM_WORKERS = {"fromEndpoints": [{"matchLabels": {"role": "worker"}}]}
P = PortRange.single(23456)
HTTP = {"http": [{"method": "GET"}]}
M = "CiliumNetworkPolicy/ml/m"
N = "CiliumNetworkPolicy/ml/n"


def _ports(port: str = "23456", proto: str = "TCP", **extra: Any) -> list[dict[str, Any]]:
    return [{"ports": [{"port": port, "protocol": proto}], **extra}]


@dataclass(frozen=True)
class Case:
    name: str
    policies: list[dict[str, Any]]
    src: Endpoint
    dst: Endpoint
    ports: PortRange
    allowed: bool
    reason: DenyReason | None = None
    policy_ids: tuple[str, ...] = ()


CASES = [
    # -- L7 rules: the port's traffic goes through the proxy, a non-L7 flow fails there --------
    Case("HTTP rules on the training port", [cnp("m", {"endpointSelector": SEL_MASTER,
         "ingress": [{**FROM_WORKERS, "toPorts": _ports(rules=HTTP)}]})],
         WORKER, MASTER, P, False, DenyReason.L7_PROXY, (M,)),
    Case("Kafka rules on a named port", [cnp("m", {"endpointSelector": SEL_MASTER,
         "ingress": [{**FROM_WORKERS, "toPorts": _ports("pytorchjob-port",
                                                        rules={"kafka": [{"topic": "t"}]})}]})],
         WORKER, MASTER, P, False, DenyReason.L7_PROXY, (M,)),
    Case("DNS rules at egress on the port", [cnp("m", {"endpointSelector": {},
         "egress": [{"toEndpoints": [{}], "toPorts": _ports(proto="ANY",
                                                             rules={"dns": [{"matchPattern": "*"}]})}]})],
         WORKER, MASTER, P, False, DenyReason.L7_PROXY, (M,)),
    Case("L7 on another port leaves the training port alone", [cnp("m", {"endpointSelector": SEL_MASTER,
         "ingress": [{**FROM_WORKERS, "toPorts": _ports()},
                     {**FROM_WORKERS, "toPorts": _ports("8080", rules=HTTP)}]})],
         WORKER, MASTER, P, True),
    Case("an L3 allow of another policy is redirected too (L7 wildcard)", [
         cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS]}),
         cnp("n", {"endpointSelector": SEL_MASTER,
                   "ingress": [{"fromEndpoints": [{"matchLabels": {"role": "ps"}}],
                                "toPorts": _ports(rules=HTTP)}]})],
         WORKER, MASTER, P, False, DenyReason.L7_PROXY, (N,)),
    Case("without default deny only the L7 rule's own peers are redirected", [
         cnp("n", {"endpointSelector": SEL_MASTER, "enableDefaultDeny": {"ingress": False},
                   "ingress": [{"fromEndpoints": [{"matchLabels": {"role": "ps"}}],
                                "toPorts": _ports(rules=HTTP)}]})],
         WORKER, MASTER, P, True),
    Case("an empty rules object is no L7 rule", [cnp("m", {"endpointSelector": SEL_MASTER,
         "ingress": [{**FROM_WORKERS, "toPorts": _ports(rules={})}]})],
         WORKER, MASTER, P, True),
    Case("UDP traffic is not sent to an HTTP proxy on TCP", [cnp("m", {"endpointSelector": SEL_MASTER,
         "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "23456", "protocol": "UDP"}]}]},
                     {**FROM_WORKERS, "toPorts": _ports(rules=HTTP)}]})],
         WORKER, MASTER, PortRange.single(23456, Protocol.UDP), True),
    # -- fromRequires / toRequires: ANDed into the endpoint selectors of every selecting policy --
    Case("fromRequires narrows another policy's fromEndpoints", [
         cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS]}),
         cnp("n", {"endpointSelector": SEL_MASTER,
                   "ingress": [{"fromRequires": [{"matchLabels": {"team": "a"}}]}]})],
         OUTSIDER, MASTER, P, False, DenyReason.DEFAULT_DENY, (M, N)),
    Case("a peer meeting fromRequires is allowed", [
         cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS]}),
         cnp("n", {"endpointSelector": SEL_MASTER,
                   "ingress": [{"fromRequires": [{"matchLabels": {"team": "a"}}]}]})],
         WORKER, MASTER, P, True),
    Case("fromRequires alone grants nothing", [
         cnp("n", {"endpointSelector": SEL_MASTER,
                   "ingress": [{"fromRequires": [{"matchLabels": {"team": "a"}}]}]})],
         WORKER, MASTER, P, False, DenyReason.DEFAULT_DENY, (N,)),
    Case("fromRequires gets the policy's namespace", [
         cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [
             {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "other", "role": "worker"}}]}]}),
         cnp("n", {"endpointSelector": SEL_MASTER,
                   "ingress": [{"fromRequires": [{"matchLabels": {"team": "a"}}]}]})],
         ep({"role": "worker", "team": "a"}, ns="other"), MASTER, P, False,
         DenyReason.DEFAULT_DENY, (M, N)),
    Case("toRequires narrows egress", [
         cnp("m", {"endpointSelector": {"matchLabels": {"role": "worker"}},
                   "egress": [{"toEndpoints": [{}], "toRequires": [{"matchLabels": {"team": "b"}}]}]})],
         WORKER, MASTER, P, False, DenyReason.DEFAULT_DENY, (M,)),
    Case("entities are not narrowed by fromRequires", [
         cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [
             {"fromEntities": ["cluster"]}, {"fromRequires": [{"matchLabels": {"team": "z"}}]}]})],
         WORKER, MASTER, P, True),
    Case("a Kubernetes NetworkPolicy's peers are narrowed too", [
         knp("k", {"podSelector": SEL_MASTER, "ingress": [{"from": [{"podSelector": {}}]}]}),
         cnp("n", {"endpointSelector": SEL_MASTER,
                   "ingress": [{"fromRequires": [{"matchLabels": {"team": "a"}}]}]})],
         OUTSIDER, MASTER, P, False, DenyReason.DEFAULT_DENY, (N, "NetworkPolicy/ml/k")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_features(case: Case) -> None:
    policy_set = PolicySet([parse_policy(p) for p in case.policies])
    verdict = policy_set.check(case.src, case.dst, case.ports)
    assert verdict.allowed is case.allowed, verdict
    if not case.allowed:
        assert (verdict.reason, verdict.policies) == (case.reason, case.policy_ids)
        assert verdict.hop in (Hop.INGRESS, Hop.EGRESS)


@pytest.mark.parametrize(
    ("rule", "feature"),
    [
        ({**FROM_WORKERS, "authentication": {"mode": "required"}}, "authentication.mode: required"),
        ({**FROM_WORKERS, "authentication": {"mode": "test-always-fail"}},
         "authentication.mode: test-always-fail"),
        ({**FROM_WORKERS, "toPorts": _ports(listener={"envoyConfig": {"kind": "CiliumEnvoyConfig",
                                                                      "name": "e"}, "name": "l"})},
         "toPorts.listener"),
        ({**FROM_WORKERS, "toPorts": _ports(serverNames=["a.example.com"])}, "toPorts.serverNames"),
    ],
)
def test_a_feature_not_modelled_exactly_on_a_deciding_rule_is_a_caveat(
    rule: dict[str, Any], feature: str
) -> None:
    policy_set = PolicySet([parse_policy(cnp("m", {"endpointSelector": SEL_MASTER,
                                                   "ingress": [rule]}))])
    verdict = policy_set.check(WORKER, MASTER, P)
    assert verdict.allowed
    assert [(c.policy, c.feature) for c in verdict.caveats] == [(M, feature)]
    assert all(c.detail for c in verdict.caveats)


def test_a_rule_that_did_not_decide_the_flow_adds_no_caveat() -> None:
    policy_set = PolicySet([parse_policy(cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [
        FROM_WORKERS,
        {"fromEndpoints": [{"matchLabels": {"role": "ps"}}], "authentication": {"mode": "required"}},
        {**FROM_WORKERS, "toPorts": _ports("8080"), "authentication": {"mode": "required"}},
    ]}))])
    assert policy_set.check(WORKER, MASTER, P) == FlowVerdict(allowed=True)


def test_requires_in_a_deny_rule_is_a_caveat_of_the_endpoint() -> None:
    policy_set = PolicySet([parse_policy(cnp("m", {"endpointSelector": SEL_MASTER,
        "ingress": [FROM_WORKERS],
        "ingressDeny": [{"fromEndpoints": [{"matchLabels": {"role": "ps"}}],
                         "fromRequires": [{"matchLabels": {"team": "a"}}]}],
    }))])  # fmt: skip
    verdict = policy_set.check(WORKER, MASTER, P)
    assert verdict.allowed
    assert verdict.caveats == (Caveat(M, "fromRequires in ingressDeny (not applied to deny rules)", ""),)
