"""Which resources are watched, given what the server serves (table-driven)."""

from __future__ import annotations

import pytest

from agent.sources.resources import select_served

CORE = ["pods", "nodes", "namespaces", "configmaps.cilium-config"]


@pytest.mark.parametrize(
    ("served", "expected_extra"),
    [
        ({}, []),
        ({("networking.k8s.io", "v1"): {"networkpolicies"}}, ["networkpolicies.v1.networking.k8s.io"]),
        (
            {("kubeflow.org", "v1"): {"pytorchjobs", "mpijobs"}, ("kubeflow.org", "v2beta1"): {"mpijobs"}},
            ["pytorchjobs.v1.kubeflow.org", "mpijobs.v1.kubeflow.org"],
        ),
        ({("kubeflow.org", "v2beta1"): {"mpijobs"}}, ["mpijobs.v2beta1.kubeflow.org"]),
        (
            {("cilium.io", "v2"): {"ciliumnetworkpolicies", "ciliumclusterwidenetworkpolicies", "ciliumendpoints"}},
            ["ciliumnetworkpolicies.v2.cilium.io", "ciliumclusterwidenetworkpolicies.v2.cilium.io"],
        ),
    ],
)
def test_select_served(served: dict[tuple[str, str], set[str]], expected_extra: list[str]) -> None:
    assert [r.name for r in select_served(served)] == CORE + expected_extra
