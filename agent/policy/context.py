"""Where a policy manifest is being read: its id and a field path, for errors that name both.

Who calls it: `agent.policy.manifest` makes one `ManifestContext` per policy object and hands it to
the readers of each kind (`agent.policy.cilium_policy`, `agent.policy.kubernetes_policy`) and of
their shared parts (`agent.policy.selectors`, `agent.policy.ports`), which read fields through it
(`object`, `optional_list`) and raise `PolicyError` through it (`CiliumNetworkPolicy/ml/a:
spec.ingress[0].fromEndpoint: unknown field`). What it does not do: know any policy field by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.errors import PolicyError


class ManifestContext:
    """Error context: the policy id plus a field path."""

    __slots__ = ("policy_id",)

    def __init__(self, policy_id: str) -> None:
        self.policy_id = policy_id

    def error(self, path: str, message: str) -> PolicyError:
        return PolicyError(f"{self.policy_id}: {path}: {message}")

    def check_fields(self, raw: Mapping[str, Any], known: frozenset[str], *, path: str) -> None:
        unknown = sorted(str(k) for k in raw if k not in known)
        if unknown:
            raise self.error(f"{path}.{unknown[0]}", "unknown field")

    def object(self, raw: Any, known: frozenset[str], *, path: str) -> Mapping[str, Any]:
        """`raw` as an object whose fields are all in `known`."""
        if not isinstance(raw, Mapping):
            raise self.error(path, f"expected an object, got {type(raw).__name__}")
        self.check_fields(raw, known, path=path)
        return raw

    def optional_list(self, raw: Mapping[str, Any], field: str, *, path: str) -> list[Any] | None:
        """`raw[field]`: None when absent or null, else it must be a list."""
        value = raw.get(field)
        if value is not None and not isinstance(value, list):
            raise self.error(f"{path}.{field}", f"expected a list, got {type(value).__name__}")
        return value
