"""NetworkPolicy specs: errors that name the policy and the field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.policy.builders import assert_parse_error, knp

ERRORS: list[tuple[str, Any, str]] = [
    (
        "NP missing podSelector",
        knp("bad", {"ingress": [{}]}),
        "NetworkPolicy/ml/bad: spec.podSelector: missing",
    ),
    (
        "NP empty peer",
        knp("bad", {"podSelector": {}, "ingress": [{"from": [{}]}]}),
        "NetworkPolicy/ml/bad: spec.ingress[0].from[0]: a peer needs podSelector, namespaceSelector or ipBlock",
    ),
    (
        "NP ipBlock with podSelector",
        knp("bad", {"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]}),
        "NetworkPolicy/ml/bad: spec.egress[0].to[0]: ipBlock cannot be combined",
    ),
    (
        "NP unknown policy type",
        knp("bad", {"podSelector": {}, "policyTypes": ["Ingress", "Sideways"]}),
        "NetworkPolicy/ml/bad: spec.policyTypes[1]: unknown policy type 'Sideways'",
    ),
    (
        "NP spec missing",
        {"kind": "NetworkPolicy", "metadata": {"name": "bad", "namespace": "ml"}},
        "NetworkPolicy/ml/bad: spec: missing or not an object",
    ),
    (
        "NP unknown peer field",
        knp("bad", {"podSelector": {}, "ingress": [{"from": [{"podSelectors": {}}]}]}),
        "NetworkPolicy/ml/bad: spec.ingress[0].from[0].podSelectors: unknown field",
    ),
    (
        "NP to in an ingress rule",
        knp("bad", {"podSelector": {}, "ingress": [{"to": []}]}),
        "NetworkPolicy/ml/bad: spec.ingress[0].to: unknown field",
    ),
    (
        "NP unknown spec field",
        knp("bad", {"podSelector": {}, "policyType": ["Ingress"]}),
        "NetworkPolicy/ml/bad: spec.policyType: unknown field",
    ),
]


@pytest.mark.parametrize(("manifest", "message"), [(m, msg) for _, m, msg in ERRORS], ids=[e[0] for e in ERRORS])
def test_parse_errors(manifest: Any, message: str) -> None:
    assert_parse_error(manifest, message)
