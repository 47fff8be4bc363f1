"""Port entries of Cilium and Kubernetes rules: numbers, names, ranges and protocols, and the errors
that name the policy and the field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.policy.builders import assert_parse_error, cnp, knp

CNP_ID = "CiliumNetworkPolicy/ml/bad"
ERRORS: list[tuple[str, Any, str]] = [
    (
        "port out of range",
        cnp("bad", {"endpointSelector": {}, "ingress": [{"toPorts": [{"ports": [{"port": "70000"}]}]}]}),
        f"{CNP_ID}: spec.ingress[0].toPorts[0].ports[0].port: port 70000 out of range",
    ),
    (
        "port in non-ASCII digits",  # "٨٠".isdigit() is True and int("٨٠") == 80
        cnp("bad", {"endpointSelector": {}, "ingress": [{"toPorts": [{"ports": [{"port": "٨٠"}]}]}]}),
        f"{CNP_ID}: spec.ingress[0].toPorts[0].ports[0].port: invalid port name '٨٠'",
    ),
    (
        "endPort beyond 64 bits",
        cnp("bad", {"endpointSelector": {}, "ingress": [{"toPorts": [{"ports": [
            {"port": "80", "endPort": "9" * 30}]}]}]}),
        f"{CNP_ID}: spec.ingress[0].toPorts[0].ports[0].endPort: expected a whole number",
    ),
    (
        "endPort written as a superscript",  # "²".isdigit() is True, int("²") raises
        cnp("bad", {"endpointSelector": {}, "ingress": [{"toPorts": [{"ports": [
            {"port": "80", "endPort": "²"}]}]}]}),
        f"{CNP_ID}: spec.ingress[0].toPorts[0].ports[0].endPort: expected a whole number",
    ),
    (
        "Cilium port entry without a port",
        cnp("bad", {"endpointSelector": {}, "ingress": [{"toPorts": [{"ports": [{"protocol": "TCP"}]}]}]}),
        f'{CNP_ID}: spec.ingress[0].toPorts[0].ports[0].port: missing (use "0" for every port)',
    ),
    (
        "port range written as a string",
        cnp("bad", {"endpointSelector": {}, "ingress": [{"toPorts": [{"ports": [{"port": "80-90"}]}]}]}),
        f"{CNP_ID}: spec.ingress[0].toPorts[0].ports[0].port: invalid port name '80-90'",
    ),
    (
        "port name too long",
        knp("bad", {"podSelector": {}, "ingress": [{"ports": [{"port": "a-very-long-port-name"}]}]}),
        "NetworkPolicy/ml/bad: spec.ingress[0].ports[0].port: invalid port name 'a-very-long-port-name'",
    ),
    (
        "endPort below port",
        cnp("bad", {"endpointSelector": {}, "ingress": [{"toPorts": [{"ports": [{"port": "2000", "endPort": 1000}]}]}]}),
        f"{CNP_ID}: spec.ingress[0].toPorts[0].ports[0].endPort: 1000 must be between port 2000 and 65535",
    ),
    (
        "endPort with a named port",
        cnp("bad", {"endpointSelector": {}, "ingress": [{"toPorts": [{"ports": [{"port": "http", "endPort": 90}]}]}]}),
        f"{CNP_ID}: spec.ingress[0].toPorts[0].ports[0].endPort: not allowed with a named port",
    ),
    (
        "unknown protocol",
        cnp("bad", {"endpointSelector": {}, "ingress": [{"toPorts": [{"ports": [{"port": "80", "protocol": "XTP"}]}]}]}),
        f"{CNP_ID}: spec.ingress[0].toPorts[0].ports[0].protocol: unknown protocol 'XTP'",
    ),
    (
        "NP protocol ANY is not a Kubernetes protocol",
        knp("bad", {"podSelector": {}, "ingress": [{"ports": [{"port": 80, "protocol": "ANY"}]}]}),
        "NetworkPolicy/ml/bad: spec.ingress[0].ports[0].protocol: unknown protocol 'ANY'",
    ),
    (
        "NP port not a number or name",
        knp("bad", {"podSelector": {}, "ingress": [{"ports": [{"port": [80]}]}]}),
        "NetworkPolicy/ml/bad: spec.ingress[0].ports[0].port: expected a port number or name",
    ),
    (
        "unknown port field",
        cnp("bad", {"endpointSelector": {}, "egress": [{"toPorts": [{"ports": [{"port": "80", "end": 90}]}]}]}),
        f"{CNP_ID}: spec.egress[0].toPorts[0].ports[0].end: unknown field",
    ),
]


@pytest.mark.parametrize(("manifest", "message"), [(m, msg) for _, m, msg in ERRORS], ids=[e[0] for e in ERRORS])
def test_parse_errors(manifest: Any, message: str) -> None:
    assert_parse_error(manifest, message)
