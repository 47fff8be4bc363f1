"""Selectors read from policy manifests: Cilium's keys on identity keys and its namespace defaulting,
and selector errors that name the policy and the field."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.selector import LabelSelector, Requirement, SelectorOperator
from agent.policy import parse_policy
from tests.policy.builders import assert_parse_error, ccnp, cnp, knp


def test_cnp_normalisation() -> None:
    policy = parse_policy(
        cnp(
            "a",
            {
                "endpointSelector": {"matchLabels": {"k8s:role": "master"}},
                "ingress": [{"fromEndpoints": [{"matchLabels": {"any:zone": "a"}}]}],
            },
        )
    )
    (subject,) = policy.subjects
    assert subject.selector == LabelSelector(
        match_labels=(("io.kubernetes.pod.namespace", "ml"), ("role", "master"))
    )
    assert subject.ingress[0].peers == (
        LabelSelector(match_labels=(("io.kubernetes.pod.namespace", "ml"), ("zone", "a"))),
    )
    assert (subject.enforce_ingress, subject.enforce_egress) == (True, False)


def test_ccnp_peer_without_namespace_requires_only_a_namespace() -> None:
    policy = parse_policy(ccnp("a", {"endpointSelector": {}, "ingress": [{"fromEndpoints": [{}]}]}))
    assert policy.subjects[0].ingress[0].peers == (
        LabelSelector(
            match_expressions=(Requirement("io.kubernetes.pod.namespace", SelectorOperator.EXISTS),)
        ),
    )


def _bad_expr(op: str, values: Any = None) -> dict[str, Any]:
    expr: dict[str, Any] = {"key": "zone", "operator": op}
    if values is not None:
        expr["values"] = values
    return {"endpointSelector": {}, "ingress": [{"fromEndpoints": [{"matchExpressions": [expr]}]}]}


CNP_ID = "CiliumNetworkPolicy/ml/bad"
ERRORS: list[tuple[str, Any, str]] = [
    (
        "unknown operator deep in specs",
        cnp("bad", specs=[{"endpointSelector": {}}, _bad_expr("Inn", ["a"])]),
        f"{CNP_ID}: specs[1].ingress[0].fromEndpoints[0].matchExpressions[0].operator: unknown operator 'Inn'",
    ),
    (
        "In without values",
        cnp("bad", _bad_expr("In")),
        f"{CNP_ID}: spec.ingress[0].fromEndpoints[0].matchExpressions[0].values: operator In needs at least one value",
    ),
    (
        "NotIn with empty values",
        cnp("bad", _bad_expr("NotIn", [])),
        f"{CNP_ID}: spec.ingress[0].fromEndpoints[0].matchExpressions[0].values: operator NotIn needs",
    ),
    (
        "Exists with values",
        cnp("bad", _bad_expr("Exists", ["a"])),
        f"{CNP_ID}: spec.ingress[0].fromEndpoints[0].matchExpressions[0].values: operator Exists takes no values",
    ),
    (
        "values not a list",
        cnp("bad", _bad_expr("In", "a")),
        f"{CNP_ID}: spec.ingress[0].fromEndpoints[0].matchExpressions[0].values: expected a list",
    ),
    (
        "value not a string",
        cnp("bad", _bad_expr("In", [1])),
        f"{CNP_ID}: spec.ingress[0].fromEndpoints[0].matchExpressions[0].values[0]: expected a string",
    ),
    (
        "expression key missing",
        cnp("bad", {"endpointSelector": {"matchExpressions": [{"operator": "Exists"}]}}),
        f"{CNP_ID}: spec.endpointSelector.matchExpressions[0].key: missing",
    ),
    (
        "matchLabels value not a string",
        cnp("bad", {"endpointSelector": {"matchLabels": {"replicas": 3}}}),
        f"{CNP_ID}: spec.endpointSelector.matchLabels.replicas: expected a string, got int",
    ),
    (
        "matchLabels not a map",
        cnp("bad", {"endpointSelector": {"matchLabels": ["a"]}}),
        f"{CNP_ID}: spec.endpointSelector.matchLabels: expected a map",
    ),
    (
        "unknown selector field",
        cnp("bad", {"endpointSelector": {"matchLabel": {"a": "b"}}}),
        f"{CNP_ID}: spec.endpointSelector.matchLabel: unknown selector field",
    ),
    (
        "selector not an object",
        cnp("bad", {"endpointSelector": "app=x"}),
        f"{CNP_ID}: spec.endpointSelector: expected a label selector object",
    ),
    (
        "CCNP bad operator",
        ccnp("bad", _bad_expr("Maybe", ["a"])),
        "CiliumClusterwideNetworkPolicy/bad: spec.ingress[0].fromEndpoints[0].matchExpressions[0].operator: unknown operator 'Maybe'",
    ),
    (
        "NP bad namespaceSelector operator",
        knp("bad", {"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}}]}]}),
        "NetworkPolicy/ml/bad: spec.ingress[0].from[0].namespaceSelector.matchExpressions[0].operator: unknown operator 'Has'",
    ),
]


@pytest.mark.parametrize(("manifest", "message"), [(m, msg) for _, m, msg in ERRORS], ids=[e[0] for e in ERRORS])
def test_parse_errors(manifest: Any, message: str) -> None:
    assert_parse_error(manifest, message)
