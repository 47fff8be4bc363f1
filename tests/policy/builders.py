"""Policy manifests (the shared builders of `tests.support.objects`, by the names the policy tests
use), endpoints, and the parse-error check, shared by the policy tests (not a test module)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from agent.errors import PolicyError
from agent.model.network import Endpoint, Protocol
from agent.policy import parse_policy
from tests.support import objects

cnp = objects.cnp  # a CiliumNetworkPolicy (`ns` defaults to ml)
knp = objects.netpol  # a Kubernetes NetworkPolicy


def ccnp(name: str, spec: Mapping[str, Any] | None = None, *, specs: Any = None) -> dict[str, Any]:
    """A CiliumClusterwideNetworkPolicy."""
    return objects.cnp(name, spec, ns=None, specs=specs)


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
