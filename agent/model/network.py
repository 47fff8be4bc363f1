"""Network vocabulary shared by the policy evaluator and the diagnosis: endpoints, ports, verdicts.

The diagnosis builds `Endpoint`s from pods and asks `agent.policy.PolicySet.check` for a
`FlowVerdict` on a `PortRange`. Pure, immutable, hashable data only: no parsing of manifests and no
policy logic live here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Protocol(StrEnum):
    """L4 protocol of a port (ANY matches every protocol when used in a policy)."""

    TCP = "TCP"
    UDP = "UDP"
    SCTP = "SCTP"
    ANY = "ANY"


class Hop(StrEnum):
    """Where a flow is checked: egress at the source endpoint or ingress at the destination."""

    EGRESS = "egress"
    INGRESS = "ingress"


class DenyReason(StrEnum):
    """Why a flow is dropped: no allow rule under default deny, an explicit deny rule, or an L7
    rule on its port (Cilium's proxy handles the port, and a flow not of that L7 protocol fails)."""

    DEFAULT_DENY = "default_deny"
    DENY_RULE = "deny_rule"
    L7_PROXY = "l7_proxy"


@dataclass(frozen=True, slots=True)
class PortRange:
    """An inclusive range of ports of one protocol; a single port has first == last."""

    first: int
    last: int
    protocol: Protocol = Protocol.TCP

    def __post_init__(self) -> None:
        if not (0 <= self.first <= self.last <= 65535):
            raise ValueError(f"invalid port range {self.first}-{self.last}")

    @classmethod
    def single(cls, port: int, protocol: Protocol = Protocol.TCP) -> PortRange:
        """The range holding exactly `port`."""
        return cls(port, port, protocol)

    def __str__(self) -> str:
        if self.first == self.last:
            return str(self.first)
        return f"{self.first}-{self.last}"


class FrozenMap(Mapping[Any, Any]):
    """An immutable, hashable mapping (labels: str keys; named ports: (name, protocol) keys)."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[Any, Any] | None = None) -> None:
        self._data: dict[Any, Any] = dict(data) if data else {}
        self._hash: int | None = None

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: Any, default: Any = None) -> Any:
        return self._data.get(key, default)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


_EMPTY = FrozenMap()


def _freeze(value: Mapping[Any, Any] | None) -> FrozenMap:
    if isinstance(value, FrozenMap):
        return value
    if not value:
        return _EMPTY
    return FrozenMap(value)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A pod as the policy evaluator sees it: namespace, labels and what else its identity holds.

    `named_ports` maps (container port name, protocol) to the port number: a policy naming a port
    resolves it against the destination endpoint on the flow's protocol, so a TCP rule naming
    `nccl` does not match a port `nccl` declared UDP. Mappings are frozen on construction, so
    endpoints are hashable.
    """

    namespace: str
    labels: Mapping[str, str]
    namespace_labels: Mapping[str, str] = field(default=_EMPTY)
    service_account: str = "default"
    named_ports: Mapping[tuple[str, Protocol], int] = field(default=_EMPTY)
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        labels = _freeze(self.labels)
        namespace_labels = _freeze(self.namespace_labels)
        named_ports = _freeze(self.named_ports)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "namespace_labels", namespace_labels)
        object.__setattr__(self, "named_ports", named_ports)
        object.__setattr__(
            self,
            "_hash",
            hash((self.namespace, labels, namespace_labels, self.service_account, named_ports)),
        )

    def __hash__(self) -> int:  # computed once: endpoints are cache keys on the hot path
        return self._hash


@dataclass(frozen=True, slots=True)
class Caveat:
    """A policy feature the evaluator does not model exactly, used by a rule that decided a flow:
    the verdict may be wrong because of it (`feature` names it, `detail` says what it does)."""

    policy: str
    feature: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"policy": self.policy, "feature": self.feature, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class FlowVerdict:
    """The outcome of checking one flow: allowed, or the first failing hop with reason and policies.

    `caveats`: features not modelled exactly that a rule deciding the flow uses."""

    allowed: bool
    hop: Hop | None = None
    reason: DenyReason | None = None
    policies: tuple[str, ...] = ()
    caveats: tuple[Caveat, ...] = ()
