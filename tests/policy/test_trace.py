"""The evaluator's decision trace: every hop, the blocks that enforce it and why, every matching
rule (policy, section, rule index), and a verdict equal to `check`'s."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.network import DenyReason, Hop, PortRange, Protocol
from agent.policy import PolicySet, parse_policy
from agent.policy.rule import Enforcement
from agent.policy.trace import RuleEffect
from tests.policy.builders import cnp, ep, knp

MASTER = ep({"app": "trainer", "role": "master"})
WORKER = ep({"app": "trainer", "role": "worker"})
TCP_80 = PortRange.single(80)

EGRESS_CLOSED = cnp("egress-closed", {"endpointSelector": {"matchLabels": {"role": "worker"}},
                                     "egress": [{"toEndpoints": [{"matchLabels": {"app": "web"}}]}]})
INGRESS_DENY = cnp("no-workers", {
    "endpointSelector": {"matchLabels": {"role": "master"}},
    "ingress": [{"fromEndpoints": [{}]}],
    "ingressDeny": [{"fromEndpoints": [{"matchLabels": {"app": "web"}}]},
                    {"fromEndpoints": [{"matchLabels": {"role": "worker"}}],
                     "toPorts": [{"ports": [{"port": "80", "protocol": "TCP"}]}]}],
})
OPEN_SPECS = cnp("open", specs=[
    {"endpointSelector": {"matchLabels": {"role": "worker"}}, "egress": [{"toEndpoints": [{}]}]},
    {"endpointSelector": {"matchLabels": {"role": "master"}},
     "ingress": [{"fromEndpoints": [{"matchLabels": {"app": "web"}}]},
                 {"fromEndpoints": [{"matchLabels": {"app": "trainer"}}],
                  "toPorts": [{"ports": [{"port": "1", "endPort": 1000}]}]}]},
])
NO_DEFAULT_DENY = cnp("audit", {"endpointSelector": {}, "enableDefaultDeny": {"ingress": False},
                                "ingress": [{"fromEndpoints": [{"matchLabels": {"app": "web"}}]}]})
NP_EGRESS_ONLY = knp("egress-only", {"podSelector": {}, "policyTypes": ["Egress"]})
NP_IMPLIED = knp("implied", {"podSelector": {"matchLabels": {"role": "master"}}, "ingress": [{}]})

# policies, ports -> (allowed, [(hop, reason, enforcing policies)], [(policy, path, effect)])
CASES: dict[str, tuple[list[dict[str, Any]], PortRange, bool, list[Any], list[Any]]] = {
    "no policy: nothing enforced": ([], TCP_80, True, [], []),
    "both hops deny, both reported": (
        [EGRESS_CLOSED, INGRESS_DENY], TCP_80, False,
        [(Hop.EGRESS, DenyReason.DEFAULT_DENY, ("CiliumNetworkPolicy/ml/egress-closed",)),
         (Hop.INGRESS, DenyReason.DENY_RULE, ("CiliumNetworkPolicy/ml/no-workers",))],
        [("CiliumNetworkPolicy/ml/no-workers", "spec.ingressDeny[1]", RuleEffect.DENY)],
    ),
    "deny rule on another port: the allow rule decides": (
        [INGRESS_DENY], PortRange.single(81), True, [],
        [("CiliumNetworkPolicy/ml/no-workers", "spec.ingress[0]", RuleEffect.ALLOW)],
    ),
    "specs: the rule of the second block allows": (
        [OPEN_SPECS], TCP_80, True, [],
        [("CiliumNetworkPolicy/ml/open", "specs[0].egress[0]", RuleEffect.ALLOW),
         ("CiliumNetworkPolicy/ml/open", "specs[1].ingress[1]", RuleEffect.ALLOW)],
    ),
    "specs: a port past the range is denied by default": (
        [OPEN_SPECS], PortRange.single(2000), False,
        [(Hop.INGRESS, DenyReason.DEFAULT_DENY, ("CiliumNetworkPolicy/ml/open",))],
        [("CiliumNetworkPolicy/ml/open", "specs[0].egress[0]", RuleEffect.ALLOW)],
    ),
    "enableDefaultDeny false: selected, not enforced": ([NO_DEFAULT_DENY], TCP_80, True, [], []),
    "NetworkPolicy policyTypes Egress only": (
        [NP_EGRESS_ONLY], TCP_80, False,
        [(Hop.EGRESS, DenyReason.DEFAULT_DENY, ("NetworkPolicy/ml/egress-only",))], [],
    ),
    "ANY protocol: each protocol is a hop entry": (
        [NP_EGRESS_ONLY], PortRange(80, 80, Protocol.ANY), False,
        [(Hop.EGRESS, DenyReason.DEFAULT_DENY, ("NetworkPolicy/ml/egress-only",))] * 3, [],
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_trace(case: tuple[list[dict[str, Any]], PortRange, bool, list[Any], list[Any]]) -> None:
    manifests, ports, allowed, denials, matched = case
    policies = PolicySet(parse_policy(m) for m in manifests)
    trace = policies.trace(WORKER, MASTER, ports)
    assert trace.verdict == policies.check(WORKER, MASTER, ports)
    assert trace.verdict.allowed is allowed
    assert [(h.hop, h.reason, h.verdict.policies if h.verdict else ()) for h in trace.denials()] \
        == denials
    assert [(m.policy, m.path, m.effect) for h in trace.hops for m in h.matched] == matched
    protocols = 3 if ports.protocol is Protocol.ANY else 1
    assert [h.hop for h in trace.hops] == [Hop.EGRESS] * protocols + [Hop.INGRESS] * protocols


ENFORCEMENT: dict[str, tuple[dict[str, Any], Hop, Enforcement, bool]] = {
    "CNP with egress rules": (EGRESS_CLOSED, Hop.EGRESS, Enforcement.RULES, True),
    "CNP enableDefaultDeny.ingress false": (NO_DEFAULT_DENY, Hop.INGRESS,
                                            Enforcement.DEFAULT_DENY_OFF, False),
    "CNP selecting without ingress rules": (EGRESS_CLOSED, Hop.INGRESS, Enforcement.NO_RULES, False),
    "NetworkPolicy policyTypes [Egress], egress": (NP_EGRESS_ONLY, Hop.EGRESS,
                                                   Enforcement.POLICY_TYPES, True),
    "NetworkPolicy policyTypes [Egress], ingress": (NP_EGRESS_ONLY, Hop.INGRESS,
                                                    Enforcement.NOT_IN_POLICY_TYPES, False),
    "NetworkPolicy no policyTypes, ingress implied": (NP_IMPLIED, Hop.INGRESS,
                                                      Enforcement.POLICY_TYPES_DEFAULT, True),
    "NetworkPolicy no policyTypes, no egress rules": (NP_IMPLIED, Hop.EGRESS,
                                                      Enforcement.NOT_IMPLIED, False),
}


@pytest.mark.parametrize("case", ENFORCEMENT.values(), ids=ENFORCEMENT.keys())
def test_why_a_direction_is_enforced(case: tuple[dict[str, Any], Hop, Enforcement, bool]) -> None:
    manifest, hop, enforcement, enforces = case
    policy = parse_policy(manifest)
    pod = MASTER if manifest is NP_IMPLIED else WORKER  # a pod the policy selects, both ends
    trace = PolicySet([policy]).trace(pod, pod, TCP_80)
    (entry,) = [h for h in trace.hops if h.hop is hop]
    assert [(b.policy, b.enforcement, b.enforces) for b in entry.selecting] == [
        (policy.id, enforcement, enforces)
    ]
    assert entry.enforced is enforces
