"""parse_policy: ids and normalisation of good manifests, and errors that name policy and field."""

from __future__ import annotations

from typing import Any

import pytest

from agent.errors import InputError, PolicyError
from agent.model.selector import LabelSelector, Requirement, SelectorOperator
from agent.policy import PolicyKind, parse_policy
from tests.policy.builders import ccnp, cnp, knp

SEL = {"matchLabels": {"role": "master"}}


@pytest.mark.parametrize(
    ("manifest", "policy_id", "kind", "namespace"),
    [
        (cnp("a", {"endpointSelector": SEL}), "CiliumNetworkPolicy/ml/a", PolicyKind.CILIUM, "ml"),
        (ccnp("b", {"endpointSelector": SEL}), "CiliumClusterwideNetworkPolicy/b", PolicyKind.CILIUM_CLUSTERWIDE, None),
        (knp("c", {"podSelector": {}}), "NetworkPolicy/ml/c", PolicyKind.KUBERNETES, "ml"),
        (
            {"kind": "NetworkPolicy", "metadata": {"name": "d"}, "spec": {"podSelector": {}}},
            "NetworkPolicy/default/d",
            PolicyKind.KUBERNETES,
            "default",
        ),
    ],
)
def test_ids(manifest: dict[str, Any], policy_id: str, kind: PolicyKind, namespace: str | None) -> None:
    policy = parse_policy(manifest)
    assert (policy.id, policy.kind, policy.namespace) == (policy_id, kind, namespace)


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


def test_policy_error_is_an_input_error() -> None:
    assert issubclass(PolicyError, InputError)


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
        "CCNP bad operator",
        ccnp("bad", _bad_expr("Maybe", ["a"])),
        "CiliumClusterwideNetworkPolicy/bad: spec.ingress[0].fromEndpoints[0].matchExpressions[0].operator: unknown operator 'Maybe'",
    ),
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
        "NP bad namespaceSelector operator",
        knp("bad", {"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}}]}]}),
        "NetworkPolicy/ml/bad: spec.ingress[0].from[0].namespaceSelector.matchExpressions[0].operator: unknown operator 'Has'",
    ),
    (
        "NP unknown policy type",
        knp("bad", {"podSelector": {}, "policyTypes": ["Ingress", "Sideways"]}),
        "NetworkPolicy/ml/bad: spec.policyTypes[1]: unknown policy type 'Sideways'",
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
        "NP spec missing",
        {"kind": "NetworkPolicy", "metadata": {"name": "bad", "namespace": "ml"}},
        "NetworkPolicy/ml/bad: spec: missing or not an object",
    ),
    (
        "name missing",
        {"kind": "CiliumNetworkPolicy", "metadata": {"namespace": "ml"}, "spec": {}},
        "CiliumNetworkPolicy: metadata.name: missing",
    ),
    (
        "wrong apiVersion",
        {**cnp("bad", {"endpointSelector": {}}), "apiVersion": "networking.k8s.io/v1"},
        f"{CNP_ID}: apiVersion: unexpected 'networking.k8s.io/v1'",
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
        "unknown port field",
        cnp("bad", {"endpointSelector": {}, "egress": [{"toPorts": [{"ports": [{"port": "80", "end": 90}]}]}]}),
        f"{CNP_ID}: spec.egress[0].toPorts[0].ports[0].end: unknown field",
    ),
    (
        "unknown port rule field",
        cnp("bad", {"endpointSelector": {}, "egress": [{"toPorts": [{"port": "80"}]}]}),
        f"{CNP_ID}: spec.egress[0].toPorts[0].port: unknown field",
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
    ("unsupported kind", {"kind": "Pod", "metadata": {"name": "x"}}, "policy: unsupported kind 'Pod'"),
    ("not an object", ["x"], "policy: expected an object"),
]


@pytest.mark.parametrize(("manifest", "message"), [(m, msg) for _, m, msg in ERRORS], ids=[e[0] for e in ERRORS])
def test_parse_errors(manifest: Any, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(manifest)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)
