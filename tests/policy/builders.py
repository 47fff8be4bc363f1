"""Builders for policy manifests and endpoints shared by the policy tests (not a test module)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.model.network import Endpoint, Protocol


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
