"""Builders for policy manifests and endpoints, and the parse-error check, shared by the policy
tests (not a test module)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from agent.errors import PolicyError
from agent.model.network import Endpoint, Protocol
from agent.policy import parse_policy


def cnp(name: str, spec: Mapping[str, Any] | None = None, *, ns: str = "ml", specs: Any = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {"name": name, "namespace": ns},
    }
    if spec is not None:
        obj["spec"] = dict(spec)
    if specs is not None:
        obj["specs"] = specs
    return obj


def ccnp(name: str, spec: Mapping[str, Any] | None = None, *, specs: Any = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumClusterwideNetworkPolicy",
        "metadata": {"name": name},
    }
    if spec is not None:
        obj["spec"] = dict(spec)
    if specs is not None:
        obj["specs"] = specs
    return obj


def knp(name: str, spec: Mapping[str, Any], *, ns: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": dict(spec),
    }


def ep(
    labels: Mapping[str, str] | None = None,
    *,
    ns: str = "ml",
    sa: str = "default",
    ns_labels: Mapping[str, str] | None = None,
    ports: Mapping[str, int] | Mapping[tuple[str, Protocol], int] | None = None,
) -> Endpoint:
    """An endpoint; `ports` keys are port names (declared TCP) or (name, protocol) pairs."""
    named: dict[tuple[str, Protocol], int] = {}
    for key, number in (ports or {}).items():
        named[(key, Protocol.TCP) if isinstance(key, str) else key] = number
    return Endpoint(
        namespace=ns,
        labels=dict(labels or {}),
        namespace_labels=dict(ns_labels or {}),
        service_account=sa,
        named_ports=named,
    )


def assert_parse_error(manifest: Any, message: str) -> None:
    """Reading `manifest` is refused with one line starting with `message`."""
    with pytest.raises(PolicyError) as info:
        parse_policy(manifest)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)
