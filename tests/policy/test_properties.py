"""Property tests: evaluation never raises, allow rules only add, deny rules only take away."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.model.network import Endpoint, FlowVerdict, PortRange, Protocol
from agent.policy import PolicySet, parse_policy
from tests.policy.builders import ccnp, cnp, ep, knp

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

VALUES = st.sampled_from(["a", "b", "ml", "web", "trainer"])
CILIUM_KEYS = st.sampled_from(
    [
        "app",
        "role",
        "zone",
        "k8s:zone",
        "any:role",
        "io.kubernetes.pod.namespace",
        "k8s:io.kubernetes.pod.namespace",
        "k8s:io.cilium.k8s.namespace.labels.team",
        "io.cilium.k8s.policy.serviceaccount",
        "reserved:host",
    ]
)
PLAIN_KEYS = st.sampled_from(["app", "role", "zone", "team"])


def _requirement(keys: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(
            lambda k, op, vs: {"key": k, "operator": op, "values": vs},
            keys,
            st.sampled_from(["In", "NotIn"]),
            st.lists(VALUES, min_size=1, max_size=2),
        ),
        st.builds(lambda k, op: {"key": k, "operator": op}, keys, st.sampled_from(["Exists", "DoesNotExist"])),
    )


def _selector(keys: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "matchLabels": st.dictionaries(keys, VALUES, max_size=2),
            "matchExpressions": st.lists(_requirement(keys), max_size=2),
        },
    )


CILIUM_SELECTOR = _selector(CILIUM_KEYS)
PLAIN_SELECTOR = _selector(PLAIN_KEYS)

CILIUM_PORT = st.one_of(
    st.fixed_dictionaries(
        {"port": st.sampled_from(["80", "0", "http", "23456", 1024])},
        optional={"protocol": st.sampled_from(["TCP", "UDP", "ANY", ""])},
    ),
    st.builds(
        lambda lo, width, proto: {"port": str(lo), "endPort": min(lo + width, 65535), "protocol": proto},
        st.sampled_from([1, 80, 1024, 20000]),
        st.sampled_from([0, 100, 30000, 65535]),
        st.sampled_from(["TCP", "ANY"]),
    ),
)
TO_PORTS = st.lists(st.fixed_dictionaries({"ports": st.lists(CILIUM_PORT, max_size=2)}), max_size=2)


def _cilium_rule(ingress: bool) -> st.SearchStrategy[dict[str, Any]]:
    prefix = "from" if ingress else "to"
    return st.fixed_dictionaries(
        {},
        optional={
            f"{prefix}Endpoints": st.lists(CILIUM_SELECTOR, max_size=2),
            f"{prefix}Entities": st.lists(st.sampled_from(["cluster", "all", "world", "host"]), max_size=2),
            f"{prefix}CIDR": st.just(["10.0.0.0/8"]),
            "toPorts": TO_PORTS,
        },
    )


INGRESS_RULE = _cilium_rule(True)
EGRESS_RULE = _cilium_rule(False)

CILIUM_SPEC = st.fixed_dictionaries(
    {"endpointSelector": CILIUM_SELECTOR},
    optional={
        "ingress": st.lists(INGRESS_RULE, max_size=2),
        "ingressDeny": st.lists(INGRESS_RULE, max_size=1),
        "egress": st.lists(EGRESS_RULE, max_size=2),
        "egressDeny": st.lists(EGRESS_RULE, max_size=1),
        "enableDefaultDeny": st.fixed_dictionaries(
            {}, optional={"ingress": st.booleans(), "egress": st.booleans()}
        ),
    },
)

NP_PEER = st.one_of(
    st.fixed_dictionaries({"podSelector": PLAIN_SELECTOR}),
    st.fixed_dictionaries({"namespaceSelector": PLAIN_SELECTOR}),
    st.fixed_dictionaries({"podSelector": PLAIN_SELECTOR, "namespaceSelector": PLAIN_SELECTOR}),
    st.just({"ipBlock": {"cidr": "10.0.0.0/8"}}),
)
NP_PORT = st.fixed_dictionaries(
    {},
    optional={"port": st.sampled_from([80, 23456, "http"]), "protocol": st.sampled_from(["TCP", "UDP"])},
)


def _np_rule(peer_field: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {}, optional={peer_field: st.lists(NP_PEER, max_size=2), "ports": st.lists(NP_PORT, max_size=2)}
    )


NP_INGRESS_RULE = _np_rule("from")
NP_EGRESS_RULE = _np_rule("to")
NP_SPEC = st.fixed_dictionaries(
    {"podSelector": PLAIN_SELECTOR},
    optional={
        "ingress": st.lists(NP_INGRESS_RULE, max_size=2),
        "egress": st.lists(NP_EGRESS_RULE, max_size=2),
        "policyTypes": st.sampled_from([["Ingress"], ["Egress"], ["Ingress", "Egress"]]),
    },
)

NAMESPACES = st.sampled_from(["ml", "web"])


@st.composite
def manifests(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(draw(st.integers(min_value=0, max_value=4))):
        kind = draw(st.sampled_from(["cnp", "cnp-specs", "ccnp", "knp"]))
        ns = draw(NAMESPACES)
        if kind == "cnp":
            out.append(cnp(f"p{i}", draw(CILIUM_SPEC), ns=ns))
        elif kind == "cnp-specs":
            out.append(cnp(f"p{i}", ns=ns, specs=draw(st.lists(CILIUM_SPEC, min_size=1, max_size=2))))
        elif kind == "ccnp":
            out.append(ccnp(f"p{i}", draw(CILIUM_SPEC)))
        else:
            out.append(knp(f"p{i}", draw(NP_SPEC), ns=ns))
    return out


ENDPOINTS = st.builds(
    lambda labels, ns, team, sa, http: ep(
        labels,
        ns=ns,
        sa=sa,
        ns_labels={"team": team} if team else {},
        ports={"http": http} if http else {},
    ),
    st.dictionaries(st.sampled_from(["app", "role", "zone"]), VALUES, max_size=3),
    NAMESPACES,
    st.sampled_from(["", "a", "b"]),
    st.sampled_from(["default", "trainer"]),
    st.sampled_from([0, 80, 8080]),
)
_PORT_RANGES = (
    PortRange.single(80),
    PortRange.single(23456),
    PortRange(1024, 65535),
    PortRange.single(80, Protocol.UDP),
    PortRange(0, 65535, Protocol.ANY),
)
PORTS = st.sampled_from(_PORT_RANGES)


def _check(policies: list[dict[str, Any]], src: Endpoint, dst: Endpoint, ports: PortRange) -> FlowVerdict:
    return PolicySet(parse_policy(p) for p in policies).check(src, dst, ports)


@SETTINGS
@given(manifests(), ENDPOINTS, ENDPOINTS, PORTS)
def test_evaluation_never_raises_and_verdicts_are_well_formed(
    policies: list[dict[str, Any]], src: Endpoint, dst: Endpoint, ports: PortRange
) -> None:
    parsed = [parse_policy(p) for p in policies]
    policy_set = PolicySet(parsed)
    verdict = policy_set.check(src, dst, ports)
    if verdict.allowed:
        assert (verdict.hop, verdict.reason, verdict.policies) == (None, None, ())
    else:
        assert verdict.hop is not None and verdict.reason is not None
        assert verdict.policies and list(verdict.policies) == sorted(set(verdict.policies))
        assert set(verdict.policies) <= {p.id for p in parsed}
    # The cache answers the same; a fresh set answers the same.
    assert policy_set.check(src, dst, ports) == verdict
    assert PolicySet(parsed).check(src, dst, ports) == verdict
    # A label no selector reads changes nothing.
    tagged = Endpoint(
        src.namespace,
        {**src.labels, "training.kubeflow.org/replica-index": "7"},
        src.namespace_labels,
        src.service_account,
        src.named_ports,
    )
    assert policy_set.check(tagged, dst, ports) == verdict


def _add_allow(policies: list[dict[str, Any]], target: int, ingress: bool, rule: dict[str, Any], np_rule: dict[str, Any]) -> list[dict[str, Any]]:
    """Add one allow rule without changing which directions are enforced."""
    out = copy.deepcopy(policies)
    direction = "ingress" if ingress else "egress"
    if out and target < len(out):
        policy = out[target]
        if policy["kind"] == "NetworkPolicy":
            spec = policy["spec"]
            types = spec.get("policyTypes")
            if ingress or types or spec.get("egress"):
                spec.setdefault(direction, []).append(np_rule)
                return out
        else:
            spec = policy["spec"] if "spec" in policy else policy["specs"][0]
            enforced = spec.get(direction) or spec.get(direction + "Deny")
            disabled = spec.get("enableDefaultDeny", {}).get(direction) is False
            if enforced or disabled:
                spec.setdefault(direction, []).append(rule)
                return out
    out.append(
        ccnp(
            "added",
            {
                "endpointSelector": {},
                "enableDefaultDeny": {"ingress": False, "egress": False},
                direction: [rule],
            },
        )
    )
    return out


@SETTINGS
@given(
    manifests(),
    ENDPOINTS,
    ENDPOINTS,
    PORTS,
    st.integers(min_value=0, max_value=4),
    st.booleans(),
    st.data(),
)
def test_adding_an_allow_rule_never_denies_an_allowed_flow(
    policies: list[dict[str, Any]],
    src: Endpoint,
    dst: Endpoint,
    ports: PortRange,
    target: int,
    ingress: bool,
    data: st.DataObject,
) -> None:
    before = _check(policies, src, dst, ports)
    rule = data.draw(INGRESS_RULE if ingress else EGRESS_RULE)
    np_rule = data.draw(NP_INGRESS_RULE if ingress else NP_EGRESS_RULE)
    after = _check(_add_allow(policies, target, ingress, rule, np_rule), src, dst, ports)
    if before.allowed:
        assert after.allowed, after


@SETTINGS
@given(
    manifests(),
    ENDPOINTS,
    ENDPOINTS,
    PORTS,
    st.integers(min_value=0, max_value=4),
    st.booleans(),
    st.data(),
)
def test_adding_a_deny_rule_never_allows_a_denied_flow(
    policies: list[dict[str, Any]],
    src: Endpoint,
    dst: Endpoint,
    ports: PortRange,
    target: int,
    ingress: bool,
    data: st.DataObject,
) -> None:
    before = _check(policies, src, dst, ports)
    rule = data.draw(INGRESS_RULE if ingress else EGRESS_RULE)
    field = "ingressDeny" if ingress else "egressDeny"
    changed = copy.deepcopy(policies)
    cilium = [p for p in changed if p["kind"] != "NetworkPolicy"]
    if cilium and target < len(cilium):
        policy = cilium[target]
        spec = policy["spec"] if "spec" in policy else policy["specs"][-1]
        spec.setdefault(field, []).append(rule)
    else:
        selector = data.draw(CILIUM_SELECTOR)
        changed.append(ccnp("added", {"endpointSelector": selector, field: [rule]}))
    after = _check(changed, src, dst, ports)
    if not before.allowed:
        assert not after.allowed, after


@SETTINGS
@given(manifests(), ENDPOINTS, ENDPOINTS, PORTS, st.booleans())
def test_the_trace_is_the_checks_answer(
    policies: list[dict[str, Any]], src: Endpoint, dst: Endpoint, ports: PortRange, cilium: bool
) -> None:
    """On random policy sets, under either dataplane, the trace's verdict is `check`'s (on a warm
    set and a fresh one), its first denying hop is the verdict's, and every denial names exactly
    the policies that its hop's record shows deciding it."""
    from agent.model.network import DenyReason
    from agent.policy.dataplane import DataplaneEvidence, resolve_dataplane
    from agent.policy.trace import RuleEffect

    evidence = DataplaneEvidence(cilium=("CiliumNetworkPolicy ml/x",) if cilium else ())
    parsed = [parse_policy(p) for p in policies]
    warm = PolicySet(parsed, dataplane=resolve_dataplane(evidence))
    verdict = warm.check(src, dst, ports)
    trace = PolicySet(parsed, dataplane=resolve_dataplane(evidence)).trace(src, dst, ports)
    assert trace.verdict == verdict
    assert warm.trace(src, dst, ports) == trace
    denials = trace.denials()
    assert bool(denials) is not verdict.allowed
    if denials:
        assert denials[0].verdict == verdict
    for hop in trace.hops:
        denies = sorted({m.policy for m in hop.matched if m.effect is RuleEffect.DENY})
        if hop.verdict is None:
            assert not denies
        elif hop.verdict.reason is DenyReason.DENY_RULE:
            assert list(hop.verdict.policies) == denies
        elif hop.verdict.reason is DenyReason.DEFAULT_DENY:
            assert hop.verdict.policies == hop.enforcing and not denies


@SETTINGS
@given(manifests(), st.lists(ENDPOINTS, min_size=2, max_size=4), st.booleans())
def test_hop_cached_checks_equal_fresh_evaluation(
    policies: list[dict[str, Any]], endpoints: list[Endpoint], cilium: bool
) -> None:
    """Fast path against slow path: on one warm set, every pair of many endpoints on every port
    range (each verdict put together from hop answers cached across the pairs) is exactly what
    the uncached evaluation (the trace, on a fresh set) gives that flow alone."""
    from agent.policy.dataplane import DataplaneEvidence, resolve_dataplane

    evidence = DataplaneEvidence(cilium=("CiliumNetworkPolicy ml/x",) if cilium else ())
    parsed = [parse_policy(p) for p in policies]
    warm = PolicySet(parsed, dataplane=resolve_dataplane(evidence))
    ranges = PORTS.wrapped_strategy.elements if hasattr(PORTS, "wrapped_strategy") else None
    assert ranges is None or ranges
    for ports in _PORT_RANGES:
        for src in endpoints:
            for dst in endpoints:
                fresh = PolicySet(parsed, dataplane=resolve_dataplane(evidence))
                assert warm.check(src, dst, ports) == fresh.trace(src, dst, ports).verdict
