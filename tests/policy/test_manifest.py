"""parse_policy: the ids of good manifests, and the errors of what every policy object has (kind,
metadata, apiVersion) that name the policy and the field."""

from __future__ import annotations

from typing import Any

import pytest

from agent.errors import InputError, PolicyError
from agent.policy import PolicyKind, parse_policy
from tests.policy.builders import assert_parse_error, ccnp, cnp, knp

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


def test_policy_error_is_an_input_error() -> None:
    assert issubclass(PolicyError, InputError)


CNP_ID = "CiliumNetworkPolicy/ml/bad"
ERRORS: list[tuple[str, Any, str]] = [
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
    ("unsupported kind", {"kind": "Pod", "metadata": {"name": "x"}}, "policy: unsupported kind 'Pod'"),
    ("not an object", ["x"], "policy: expected an object"),
]


@pytest.mark.parametrize(("manifest", "message"), [(m, msg) for _, m, msg in ERRORS], ids=[e[0] for e in ERRORS])
def test_parse_errors(manifest: Any, message: str) -> None:
    assert_parse_error(manifest, message)
