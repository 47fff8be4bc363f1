"""The normalised form of a network policy that the evaluator runs: subjects, rules, port matches.

Built by `agent.policy.manifest.parse_policy` from CiliumNetworkPolicy,
CiliumClusterwideNetworkPolicy and Kubernetes NetworkPolicy manifests, read by
`agent.policy.evaluator.PolicySet`. Every selector here is already rewritten onto Cilium identity
keys (namespace defaulting applied), so the evaluator needs no per-kind logic. Pure data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from agent.model.network import Protocol
from agent.model.selector import LabelSelector


class PolicyKind(StrEnum):
    """The manifest kinds the evaluator understands."""

    CILIUM = "CiliumNetworkPolicy"
    CILIUM_CLUSTERWIDE = "CiliumClusterwideNetworkPolicy"
    KUBERNETES = "NetworkPolicy"


@dataclass(frozen=True, slots=True)
class PortMatch:
    """One port entry of a rule: `first..last` (or a named port) of one protocol (ANY = all).

    `name` is set for a named port, resolved against the destination endpoint's container ports.
    `protocol` is a `Protocol` value, or another L4 protocol name (ICMP, ...) that never matches a
    TCP/UDP/SCTP flow.
    """

    first: int = 0
    last: int = 65535
    protocol: str = Protocol.ANY.value
    name: str | None = None

    def interval(
        self, protocol: Protocol, named_ports: Mapping[str, int]
    ) -> tuple[int, int] | None:
        """The inclusive port interval this entry covers for `protocol`, or None."""
        if self.protocol not in (Protocol.ANY.value, protocol.value):
            return None
        if self.name is not None:
            number = named_ports.get(self.name)
            if number is None:
                return None
            return (number, number)
        return (self.first, self.last)

    def port_names(self) -> frozenset[str]:
        """Named ports this entry refers to."""
        return frozenset() if self.name is None else frozenset((self.name,))


@dataclass(frozen=True, slots=True)
class Rule:
    """One allow or deny rule: a peer (OR over `peers`, or any peer) and the ports it covers.

    `any_peer` is true when the rule names no peer at all but restricts ports (Cilium) or has no
    `from`/`to` (Kubernetes). `ports` None means every port; an empty tuple means none.
    """

    peers: tuple[LabelSelector, ...] = ()
    any_peer: bool = False
    ports: tuple[PortMatch, ...] | None = None

    def peer_matches(self, labels: Mapping[str, str]) -> bool:
        """True when `labels` (a peer's identity) is a peer of this rule."""
        if self.any_peer:
            return True
        return any(sel.matches(labels) for sel in self.peers)

    def intervals(
        self, protocol: Protocol, named_ports: Mapping[str, int]
    ) -> list[tuple[int, int]]:
        """The port intervals of `protocol` this rule covers."""
        if self.ports is None:
            return [(0, 65535)]
        out = []
        for port in self.ports:
            interval = port.interval(protocol, named_ports)
            if interval is not None:
                out.append(interval)
        return out

    def keys(self) -> frozenset[str]:
        """Identity keys the peer selectors read."""
        out: frozenset[str] = frozenset()
        for sel in self.peers:
            out |= sel.keys()
        return out

    def port_names(self) -> frozenset[str]:
        """Named ports this rule refers to."""
        out: frozenset[str] = frozenset()
        for port in self.ports or ():
            out |= port.port_names()
        return out


@dataclass(frozen=True, slots=True)
class Subject:
    """One rule block of a policy (a CNP `spec` or one of its `specs`, or a NetworkPolicy spec).

    `selector` picks the endpoints it applies to (None: it selects no pod, e.g. a host policy with
    `nodeSelector`). `enforce_ingress`/`enforce_egress` say whether it puts selected endpoints in
    default deny for that direction.
    """

    selector: LabelSelector | None
    ingress: tuple[Rule, ...] = ()
    ingress_deny: tuple[Rule, ...] = ()
    egress: tuple[Rule, ...] = ()
    egress_deny: tuple[Rule, ...] = ()
    enforce_ingress: bool = False
    enforce_egress: bool = False

    def rules(self) -> tuple[Rule, ...]:
        """Every rule of every direction."""
        return self.ingress + self.ingress_deny + self.egress + self.egress_deny


@dataclass(frozen=True, slots=True)
class Policy:
    """A parsed policy: its id (`Kind/namespace/name`, or `Kind/name` when clusterwide) and rules."""

    id: str
    kind: PolicyKind
    name: str
    namespace: str | None
    subjects: tuple[Subject, ...]
