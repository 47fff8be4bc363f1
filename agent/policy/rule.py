"""The normalised form of a network policy that the evaluator runs: subjects, rules, port matches.

Built by `agent.policy.manifest.parse_policy` from CiliumNetworkPolicy,
CiliumClusterwideNetworkPolicy and Kubernetes NetworkPolicy manifests, read by
`agent.policy.evaluator.PolicySet`. Every selector here is already rewritten onto identity keys
(namespace defaulting applied), so the evaluator needs no per-kind logic. A policy that cannot be
read is an `UnreadablePolicy`: what was wrong, and (its selectors read leniently) which pods it may
select. Pure data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from agent.model.network import Protocol
from agent.model.selector import LabelSelector


class Enforcement(StrEnum):
    """Why a policy block does or does not put its endpoints in default deny for a direction."""

    RULES = "rules"  # Cilium: the block has rules for the direction, enableDefaultDeny unset
    NO_RULES = "no_rules"  # Cilium: no rules for the direction, enableDefaultDeny unset
    DEFAULT_DENY_ON = "enable_default_deny_true"  # Cilium: enableDefaultDeny.<direction>: true
    DEFAULT_DENY_OFF = "enable_default_deny_false"  # Cilium: enableDefaultDeny.<direction>: false
    POLICY_TYPES = "policy_types"  # NetworkPolicy: the direction is listed in policyTypes
    NOT_IN_POLICY_TYPES = "not_in_policy_types"  # NetworkPolicy: policyTypes leaves it out
    POLICY_TYPES_DEFAULT = "policy_types_default"  # NetworkPolicy: policyTypes unset, implied
    NOT_IMPLIED = "not_implied"  # NetworkPolicy: policyTypes unset, no egress rules
    UNKNOWN = "unknown"  # built without the manifest (tests)


class PolicyKind(StrEnum):
    """The manifest kinds the evaluator understands."""

    CILIUM = "CiliumNetworkPolicy"
    CILIUM_CLUSTERWIDE = "CiliumClusterwideNetworkPolicy"
    KUBERNETES = "NetworkPolicy"

    @property
    def cilium(self) -> bool:
        return self is not PolicyKind.KUBERNETES


@dataclass(frozen=True, slots=True)
class PortMatch:
    """One port entry of a rule: `first..last` (or a named port) of one protocol (ANY = all).

    `name` is set for a named port, resolved against the destination endpoint's container ports
    of the flow's protocol (a rule of protocol ANY resolves it on each protocol separately, as
    Cilium does). `protocol` is a `Protocol` value, or another IP protocol name (ICMP, VRRP, ...)
    that never matches a TCP/UDP/SCTP flow. `l7` names the L7 parser the port's traffic is sent
    through (`http`, `kafka`, `dns`, or an `l7proto`): Cilium's proxy then handles every allowed
    flow on that port at that endpoint, and a flow that is not of that protocol fails there.
    `features` lists what the port rule uses that is not modelled exactly (`listener`,
    `serverNames`, `terminatingTLS`, `originatingTLS`).
    """

    first: int = 0
    last: int = 65535
    protocol: str = Protocol.ANY.value
    name: str | None = None
    l7: str | None = None
    features: tuple[str, ...] = ()

    def interval(
        self, protocol: Protocol, named_ports: Mapping[tuple[str, Protocol], int]
    ) -> tuple[int, int] | None:
        """The inclusive port interval this entry covers for `protocol`, or None."""
        if self.protocol not in (Protocol.ANY.value, protocol.value):
            return None
        if self.name is not None:
            number = named_ports.get((self.name, protocol))
            if number is None:
                return None
            return (number, number)
        return (self.first, self.last)

    def overlaps(
        self,
        protocol: Protocol,
        named_ports: Mapping[tuple[str, Protocol], int],
        *,
        first: int,
        last: int,
    ) -> bool:
        """True when this entry covers at least one port of `first..last` for `protocol`."""
        interval = self.interval(protocol, named_ports)
        return interval is not None and interval[0] <= last and interval[1] >= first

    def port_names(self) -> frozenset[str]:
        """Named ports this entry refers to."""
        return frozenset() if self.name is None else frozenset((self.name,))


@dataclass(frozen=True, slots=True)
class Rule:
    """One allow or deny rule: a peer (OR over `peers`, or any peer) and the ports it covers.

    `peers` are endpoint selectors (`fromEndpoints`/`toEndpoints`, a NetworkPolicy's peers);
    `pod_entity` is true when an entity covering every pod (`cluster`, `all`) is named. `any_peer`
    is true when the rule names no peer at all but restricts ports (Cilium) or has no `from`/`to`
    (Kubernetes). `ports` None means every port; an empty tuple means none. `authentication` is
    the rule's `authentication.mode` when it is not `disabled`: the flow passes only once Cilium's
    mutual authentication succeeds (not modelled: a caveat).
    """

    peers: tuple[LabelSelector, ...] = ()
    any_peer: bool = False
    pod_entity: bool = False
    ports: tuple[PortMatch, ...] | None = None
    authentication: str | None = None

    def peer_matches(
        self, labels: Mapping[str, str], requires: tuple[LabelSelector, ...] = ()
    ) -> bool:
        """True when `labels` (a peer's identity) is a peer of this rule.

        `requires` (the `fromRequires`/`toRequires` of every rule selecting the endpoint) are
        ANDed into each endpoint selector of the rule, as Cilium does; entities and rules naming
        no peer are not narrowed by them.
        """
        if self.any_peer or self.pod_entity:
            return True
        for sel in self.peers:
            if sel.matches(labels) and all(req.matches(labels) for req in requires):
                return True
        return False

    def intervals(
        self, protocol: Protocol, named_ports: Mapping[tuple[str, Protocol], int]
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
    default deny for that direction. `ingress_requires`/`egress_requires` are the selectors of its
    allow rules' `fromRequires`/`toRequires`: they narrow the endpoint selectors of every allow
    rule of every subject selecting the same endpoint. `caveats` names what the block uses that
    is not modelled exactly and may decide any flow of an endpoint it selects. `path` is where the
    block is in its manifest (`spec`, `specs[1]`); `ingress_enforcement`/`egress_enforcement` say
    why each direction is or is not enforced (the explanation shows it).
    """

    selector: LabelSelector | None
    ingress: tuple[Rule, ...] = ()
    ingress_deny: tuple[Rule, ...] = ()
    egress: tuple[Rule, ...] = ()
    egress_deny: tuple[Rule, ...] = ()
    enforce_ingress: bool = False
    enforce_egress: bool = False
    ingress_requires: tuple[LabelSelector, ...] = ()
    egress_requires: tuple[LabelSelector, ...] = ()
    caveats: tuple[str, ...] = ()
    path: str = "spec"
    ingress_enforcement: Enforcement = Enforcement.UNKNOWN
    egress_enforcement: Enforcement = Enforcement.UNKNOWN

    def rules(self) -> tuple[Rule, ...]:
        """Every rule of every direction."""
        return self.ingress + self.ingress_deny + self.egress + self.egress_deny

    def selectors(self) -> tuple[LabelSelector, ...]:
        """Every selector the block reads besides its subject selector."""
        return self.ingress_requires + self.egress_requires

    def decides(self, *, egress: bool) -> bool:
        """Whether the block takes part in deciding a hop of that direction at an endpoint it
        selects (rules, deny rules, requirements or default deny there). One that does not
        leaves whether such a hop is allowed, and its denial, as the other blocks make them
        (its `caveats` aside)."""
        if egress:
            return bool(self.egress or self.egress_deny or self.egress_requires
                        or self.enforce_egress)  # fmt: skip
        return bool(self.ingress or self.ingress_deny or self.ingress_requires
                    or self.enforce_ingress)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Policy:
    """A parsed policy: its id (`Kind/namespace/name`, or `Kind/name` when clusterwide) and rules."""

    id: str
    kind: PolicyKind
    name: str
    namespace: str | None
    subjects: tuple[Subject, ...]


@dataclass(frozen=True, slots=True)
class UnreadablePolicy:
    """A policy object that cannot be read: which one, the field and the problem.

    `selects` are its subject selectors read leniently (identity keys, its namespace applied): an
    unreadable selector stands as "every pod of its namespace" (every pod, for a clusterwide
    policy); a host policy's `nodeSelector` selects no pod. A job whose pods one of them matches
    gets an uncertain answer.
    """

    id: str
    kind: PolicyKind
    namespace: str | None
    field: str
    problem: str
    selects: tuple[LabelSelector, ...]

    def describe(self) -> str:
        where = f"{self.field}: " if self.field else ""
        return f"{self.id}: {where}{self.problem}"
