"""CiliumNetworkPolicy and CiliumClusterwideNetworkPolicy specs: every documented field accepted, and
errors that name the policy and the field."""

from __future__ import annotations

from typing import Any

import pytest

from agent.policy import parse_policy
from tests.policy.builders import assert_parse_error, ccnp, cnp


def test_documented_fields_are_accepted() -> None:
    policy = parse_policy(
        cnp(
            "full",
            {
                "description": "every field the schema allows",
                "labels": [{"key": "team", "value": "ml"}],
                "endpointSelector": {},
                "ingress": [
                    {
                        "fromEndpoints": [{}],
                        "fromRequires": [{}],
                        "authentication": {"mode": "required"},
                        "toPorts": [
                            {
                                "ports": [{"port": "80", "protocol": "TCP"}],
                                "rules": {"http": [{"method": "GET"}]},
                                "serverNames": ["x"],
                            }
                        ],
                    },
                    {"fromNodes": [{}]},
                    {"fromGroups": [{"aws": {"securityGroupsIds": ["sg-1"]}}]},
                    {"icmps": [{"fields": [{"type": 8}]}]},
                ],
                "egress": [
                    {"toFQDNs": [{"matchName": "example.com"}]},
                    {"toServices": [{"k8sService": {"serviceName": "s", "namespace": "ml"}}]},
                ],
            },
        )
    )
    assert len(policy.subjects[0].ingress) == 4


CNP_ID = "CiliumNetworkPolicy/ml/bad"
ERRORS: list[tuple[str, Any, str]] = [
    (
        "missing endpointSelector",
        cnp("bad", {"ingress": [{}]}),
        f"{CNP_ID}: spec.endpointSelector: missing",
    ),
    ("no spec nor specs", cnp("bad"), f"{CNP_ID}: spec: a Cilium policy needs `spec` or `specs`"),
    ("specs not a list", cnp("bad", specs={"endpointSelector": {}}), f"{CNP_ID}: specs: expected a list"),
    (
        "ingress not a list",
        cnp("bad", {"endpointSelector": {}, "ingress": {"fromEndpoints": []}}),
        f"{CNP_ID}: spec.ingress: expected a list",
    ),
    (
        "rule not an object",
        cnp("bad", {"endpointSelector": {}, "egressDeny": ["x"]}),
        f"{CNP_ID}: spec.egressDeny[0]: expected an object",
    ),
    (
        "unknown entity",
        cnp("bad", {"endpointSelector": {}, "egress": [{"toEntities": ["cluster", "galaxy"]}]}),
        f"{CNP_ID}: spec.egress[0].toEntities[1]: unknown entity 'galaxy'",
    ),
    (
        "enableDefaultDeny not a bool",
        cnp("bad", {"endpointSelector": {}, "enableDefaultDeny": {"ingress": "no"}}),
        f"{CNP_ID}: spec.enableDefaultDeny.ingress: expected true or false",
    ),
    (
        "endpointSelector and nodeSelector",
        ccnp("bad", {"endpointSelector": {}, "nodeSelector": {}}),
        "CiliumClusterwideNetworkPolicy/bad: spec: endpointSelector and nodeSelector are mutually exclusive",
    ),
    (
        "misspelt peer field",
        cnp("bad", {"endpointSelector": {}, "ingress": [{"fromEndpoint": [{}], "toPorts": []}]}),
        f"{CNP_ID}: spec.ingress[0].fromEndpoint: unknown field",
    ),
    (
        "egress field in an ingress rule",
        cnp("bad", {"endpointSelector": {}, "ingressDeny": [{"toEndpoints": [{}]}]}),
        f"{CNP_ID}: spec.ingressDeny[0].toEndpoints: unknown field",
    ),
    (
        "unknown spec field",
        cnp("bad", {"endpointSelector": {}, "ingres": []}),
        f"{CNP_ID}: spec.ingres: unknown field",
    ),
    (
        "unknown port rule field",
        cnp("bad", {"endpointSelector": {}, "egress": [{"toPorts": [{"port": "80"}]}]}),
        f"{CNP_ID}: spec.egress[0].toPorts[0].port: unknown field",
    ),
]


@pytest.mark.parametrize(("manifest", "message"), [(m, msg) for _, m, msg in ERRORS], ids=[e[0] for e in ERRORS])
def test_parse_errors(manifest: Any, message: str) -> None:
    assert_parse_error(manifest, message)
