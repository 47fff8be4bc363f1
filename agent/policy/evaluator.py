"""Decide whether a flow between two pods passes a set of network policies, and why not.

`PolicySet(policies, dataplane=...).check(src, dst, ports)` is called by the diagnosis for every
flow a training job needs. Semantics (Cilium's, docs.cilium.io "Policy Enforcement", "Deny
Policies" and "Layer 7 Policy", and Kubernetes NetworkPolicy's): a flow passes iff egress at the
source AND ingress at the destination allow every port of the range. At one hop: a matching deny
rule of any selecting policy denies (deny beats allow, across CNP, CCNP and NetworkPolicy); else,
if some selecting policy enforces the direction, some allow rule must cover the port (its endpoint
selectors narrowed by the `fromRequires`/`toRequires` of every policy selecting the endpoint);
else it is allowed. An allowed flow on a port some selecting allow rule gives L7 rules (HTTP,
Kafka, DNS, l7proto) goes through Cilium's proxy and, not being of that L7 protocol, fails there
(with default deny every allowed peer's traffic on that port is redirected; without, that rule's
peers'). Rules that decide an allowed flow and use a feature not modelled exactly (mutual
authentication, a custom listener, TLS interception, SNI) put a `Caveat` on the verdict.

Identities: the dataplane's identity filter decides which pod labels selectors see (Cilium's label
filter, or every label under plain Kubernetes, where Cilium policies are not enforced at all).
Policies that could not be read are kept as `UnreadablePolicy` records: `uncertain(endpoint)`
names those that may select an endpoint.

Speed: policies are indexed by one label each subject selector requires (`agent.policy.anchors`;
those that require a namespace as well apart by it), and endpoints are projected onto the
identity keys and named ports the set can read. Endpoints with equal projections share cached verdicts (`equivalence_key`), so pods
differing only in, say, `replica-index` cost one evaluation; a verdict not cached yet is put
together from its two hops, each cached by what it reads of the far endpoint
(`agent.policy.hop_cache`). `trace` evaluates afresh. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.model.network import (
    Caveat,
    DenyReason,
    Endpoint,
    FlowVerdict,
    Hop,
    PortRange,
    Protocol,
)
from agent.policy.anchors import anchors, split_by_namespace
from agent.policy.dataplane import Dataplane, DataplaneKind
from agent.policy.hop_cache import HopResult, HopVerdicts, Side
from agent.policy.identity import (
    CILIUM_DEFAULT,
    NAMESPACE_KEY,
    IdentityFilter,
    identity_labels,
    is_pod_label_key,
)
from agent.policy.rule import Policy, PolicyKind, Rule, Subject, UnreadablePolicy
from agent.policy.trace import FlowTrace, HopTrace, RuleEffect, RuleMatch, SelectingBlock

_CONCRETE_PROTOCOLS = (Protocol.TCP, Protocol.UDP, Protocol.SCTP)
_ALLOWED = FlowVerdict(allowed=True)
# Caches are dropped wholesale past these sizes (a long-lived set checking ever-new endpoints).
_MAX_ENDPOINTS = 1_000_000
_MAX_VERDICTS = 4_000_000
CILIUM_DATAPLANE = Dataplane(DataplaneKind.CILIUM, CILIUM_DEFAULT, "assumed")
_AUTH_DETAIL = "the flow passes only once Cilium's mutual authentication succeeds (not modelled)"
_PORT_FEATURE_DETAIL = {
    "listener": "the port's traffic goes to a custom Envoy listener (not modelled)",
    "serverNames": "only TLS connections to the named servers pass (not modelled)",
    "terminatingTLS": "Cilium's proxy terminates TLS on this port (not modelled)",
    "originatingTLS": "Cilium's proxy originates TLS on this port (not modelled)",
}


@dataclass(frozen=True, slots=True)
class _Entry:
    """A policy subject (one spec) with the id of the policy it belongs to."""

    policy_id: str
    subject: Subject


class _Identity:
    """A projected endpoint: the identity labels and named ports the policy set can read."""

    __slots__ = ("labels", "named_ports", "selected", "uncertain")

    def __init__(
        self,
        labels: dict[str, str],
        named_ports: dict[tuple[str, Protocol], int],
        selected: tuple[_Entry, ...],
        uncertain: tuple[UnreadablePolicy, ...],
    ) -> None:
        self.labels = labels
        self.named_ports = named_ports
        self.selected = selected
        self.uncertain = uncertain


def _covers(intervals: list[tuple[int, int]], first: int, last: int) -> bool:
    """True when the union of inclusive `intervals` covers `first..last`."""
    reach = first - 1
    for lo, hi in sorted(intervals):
        if lo > reach + 1:
            break
        if hi > reach:
            reach = hi
            if reach >= last:
                return True
    return reach >= last


class PolicySet:
    """An immutable set of parsed policies with a cached flow checker.

    `dataplane` (default: Cilium with its newest default label filter) decides identities; under
    plain Kubernetes, Cilium policies (read or not) are set aside (`ignored`). `unreadable`: the
    policy objects that could not be read."""

    def __init__(
        self,
        policies: Iterable[Policy],
        *,
        dataplane: Dataplane | None = None,
        unreadable: Iterable[UnreadablePolicy] = (),
    ) -> None:
        self.dataplane = dataplane if dataplane is not None else CILIUM_DATAPLANE
        self.identity: IdentityFilter = self.dataplane.identity
        given = tuple(policies)
        lost = tuple(unreadable)
        if not self.dataplane.cilium:
            self.ignored: tuple[str, ...] = tuple(
                p.id for p in given if p.kind.cilium
            ) + tuple(u.id for u in lost if u.kind.cilium)
            given = tuple(p for p in given if not p.kind.cilium)
            lost = tuple(p for p in lost if not p.kind.cilium)
        else:
            self.ignored = ()
        self._policies = given
        self._kinds: dict[str, PolicyKind] = {p.id: p.kind for p in given}
        self.unreadable = lost
        keys: set[str] = {NAMESPACE_KEY}
        names: set[str] = set()
        by_anchor: dict[tuple[str, str], list[_Entry]] = {}
        unanchored: list[_Entry] = []
        values: dict[str | None, dict[str, set[str]]] = {}  # namespace -> key -> values
        for policy in self._policies:
            compared = values.setdefault(policy.namespace, {})
            for subject in policy.subjects:
                if subject.selector is None:
                    continue  # selects no pod
                entry = _Entry(policy.id, subject)
                keys |= subject.selector.keys()
                selectors = [subject.selector, *subject.selectors()]
                for sel in subject.selectors():
                    keys |= sel.keys()
                for rule in subject.rules():
                    keys |= rule.keys()
                    names |= rule.port_names()
                    selectors.extend(rule.peers)
                for sel in selectors:
                    for key, value in sel.values():
                        compared.setdefault(key, set()).add(value)
                found = anchors(subject.selector)
                if not found:
                    unanchored.append(entry)
                for anchor in found:
                    by_anchor.setdefault(anchor, []).append(entry)
        for record in lost:
            for sel in record.selects:
                keys |= sel.keys()
        self._keys = frozenset(keys)
        self._values = {ns: {k: frozenset(v) for k, v in found.items()}
                        for ns, found in values.items()}  # fmt: skip
        self._port_names = frozenset(names)
        self._by_anchor = {k: split_by_namespace([(e.subject.selector, e) for e in v])
                           for k, v in by_anchor.items()}  # fmt: skip
        self._unanchored = tuple(unanchored)
        self._endpoint_ids: dict[Endpoint, int] = {}
        self._projection_ids: dict[
            tuple[tuple[tuple[str, str], ...], tuple[tuple[tuple[str, Protocol], int], ...]], int
        ] = {}
        self._identities: list[_Identity] = []
        self._verdicts: dict[tuple[int, int, PortRange], FlowVerdict] = {}
        self._hops = HopVerdicts(self._hop_result, limit=_MAX_VERDICTS)

    def warnings(self) -> tuple[str, ...]:
        """For people: problems of the dataplane setup and the Cilium policies left out."""
        out = list(self.dataplane.warnings)
        if self.ignored:
            shown = ", ".join(self.ignored[:3]) + (", ..." if len(self.ignored) > 3 else "")
            out.append(
                f"{len(self.ignored)} Cilium polic(ies) not enforced: the dataplane is plain "
                f"Kubernetes ({self.dataplane.reason}): {shown}"
            )
        return tuple(out)

    @property
    def policies(self) -> tuple[Policy, ...]:
        """The policies of this set, in the order given."""
        return self._policies

    def pod_label_keys(self) -> frozenset[str]:
        """The pod label keys some selector of this set reads that identities keep (namespace,
        account and other identity-only keys left out)."""
        return frozenset(k for k in self._keys if is_pod_label_key(k, self.identity))

    def selector_label_keys(self) -> frozenset[str]:
        """Every pod label key some selector reads, kept in identities or not."""
        return frozenset(k for k in self._keys if is_pod_label_key(k, _KEEP_ALL))

    def selector_values(self, namespace: str) -> dict[str, frozenset[str]]:
        """Pod label key -> the values the selectors of the policies that can decide flows
        between pods of `namespace` (its own policies and the cluster-wide ones) compare it
        with (matchLabels, In, NotIn)."""
        out: dict[str, set[str]] = {}
        for ns in (namespace, None):
            for key, found in self._values.get(ns, {}).items():
                out.setdefault(key, set()).update(found)
        return {k: frozenset(v) for k, v in out.items()}

    def uncertain(self, endpoint: Endpoint) -> tuple[UnreadablePolicy, ...]:
        """The unreadable policies that may select `endpoint` (its verdicts are uncertain)."""
        if not self.unreadable:
            return ()
        return self._identities[self.equivalence_key(endpoint)].uncertain

    def equivalence_key(self, endpoint: Endpoint) -> int:
        """A small int equal for endpoints that get the same verdicts everywhere in this set.

        Two endpoints with equal keys are interchangeable as source and as destination of every
        `check`: callers may group pods by it and check each group pair once.
        """
        ident = self._endpoint_ids.get(endpoint)
        if ident is None:
            ident = self._intern(endpoint)
        return ident

    def check(self, src: Endpoint, dst: Endpoint, ports: PortRange) -> FlowVerdict:
        """Verdict for connections from `src` to `dst` on every port of `ports`."""
        s = self._endpoint_ids.get(src)
        if s is None:
            s = self._intern(src)
        d = self._endpoint_ids.get(dst)
        if d is None:
            d = self._intern(dst)
        return self.check_keys(s, d, ports)

    def check_keys(self, s: int, d: int, ports: PortRange) -> FlowVerdict:
        """`check` for endpoints given by their `equivalence_key`s (callers holding many pods
        by key skip hashing the endpoints again)."""
        key = (s, d, ports)
        verdict = self._verdicts.get(key)
        if verdict is None:
            if len(self._verdicts) >= _MAX_VERDICTS:
                self._verdicts.clear()
            verdict = self._hops.verdict(s, d, self._identities[s], self._identities[d], ports)
            self._verdicts[key] = verdict
        return verdict

    def hop_allows(self, s: int, d: int, ports: PortRange, *, egress: bool) -> bool:
        """Whether one hop of the flow `s` -> `d` (endpoints by `equivalence_key`) allows
        `ports`: egress at the source, or ingress at the destination (`check_keys` is both)."""
        ids = self._identities
        return self._hops.allows(s, d, ids[s], ids[d], ports, egress=egress)

    def trace(self, src: Endpoint, dst: Endpoint, ports: PortRange) -> FlowTrace:
        """`check`'s verdict for the flow with the evaluator's record of how it got there: every
        hop and protocol evaluated (not only up to the first denial), each with the blocks
        selecting its endpoint and every rule that matched. Not cached (it is for people)."""
        s = self._identities[self.equivalence_key(src)]
        d = self._identities[self.equivalence_key(dst)]
        hops: list[HopTrace] = []
        verdict = self._evaluate(s, d, ports, trace=hops)
        return FlowTrace(verdict=verdict, hops=tuple(hops))

    def selecting(self, endpoint: Endpoint) -> frozenset[str]:
        """The ids of the policies with a block selecting `endpoint` (what a change to one of
        them can change: this endpoint's hops)."""
        ident = self._identities[self.equivalence_key(endpoint)]
        return frozenset(entry.policy_id for entry in ident.selected)

    def deciding(self, endpoint: Endpoint, *, egress: bool) -> frozenset[str]:
        """The ids of the policies with a block selecting `endpoint` that takes part in deciding
        its hops of that direction (`Subject.decides`): what a change to one of them can change
        there (whether those hops are allowed)."""
        ident = self._identities[self.equivalence_key(endpoint)]
        return frozenset(e.policy_id for e in ident.selected if e.subject.decides(egress=egress))

    def identity_of(self, endpoint: Endpoint) -> dict[str, str]:
        """The identity labels the dataplane judges `endpoint` by (every kept label, not only
        those this set's selectors read)."""
        return identity_labels(endpoint, self.identity)

    # -- internals -----------------------------------------------------------------------------

    def _intern(self, endpoint: Endpoint) -> int:
        if len(self._endpoint_ids) >= _MAX_ENDPOINTS:
            self._endpoint_ids.clear()
        keys = self._keys
        full = identity_labels(endpoint, self.identity)
        labels = tuple(sorted((k, v) for k, v in full.items() if k in keys))
        names = self._port_names
        named = tuple(
            sorted(
                ((n.lower(), proto), p)
                for (n, proto), p in endpoint.named_ports.items()
                if n.lower() in names
            )
        )
        projection = (labels, named)
        ident = self._projection_ids.get(projection)
        if ident is None:
            ident = len(self._identities)
            label_map = dict(labels)
            uncertain = tuple(
                u for u in self.unreadable if any(sel.matches(label_map) for sel in u.selects)
            )
            self._identities.append(
                _Identity(label_map, dict(named), self._select(label_map), uncertain)
            )
            self._projection_ids[projection] = ident
        self._endpoint_ids[endpoint] = ident
        return ident

    def _select(self, labels: Mapping[str, str]) -> tuple[_Entry, ...]:
        candidates: dict[int, _Entry] = {}
        for entry in self._unanchored:
            candidates[id(entry)] = entry
        by_anchor = self._by_anchor
        namespace = labels.get(NAMESPACE_KEY)
        for pair in labels.items():
            found = by_anchor.get(pair)
            for entry in found.among(namespace) if found is not None else ():
                candidates[id(entry)] = entry
        return tuple(
            entry
            for entry in candidates.values()
            if entry.subject.selector is not None and entry.subject.selector.matches(labels)
        )

    def _evaluate(
        self,
        src: _Identity,
        dst: _Identity,
        ports: PortRange,
        trace: list[HopTrace] | None = None,
    ) -> FlowVerdict:
        """The flow's verdict. With `trace` (a list), every hop and protocol is evaluated and
        recorded in it, and the verdict is still the first denial in the order `check` uses."""
        protocols = _CONCRETE_PROTOCOLS if ports.protocol is Protocol.ANY else (ports.protocol,)
        caveats: list[Caveat] = []
        first_denial: FlowVerdict | None = None
        for hop in (Hop.EGRESS, Hop.INGRESS):
            for protocol in protocols:
                verdict = _hop(hop, src, dst, first=ports.first, last=ports.last,
                               protocol=protocol, caveats=caveats, kinds=self._kinds,
                               trace=trace)  # fmt: skip
                if verdict is not None:
                    if trace is None:
                        return verdict
                    if first_denial is None:
                        first_denial = verdict
        if first_denial is not None:
            return first_denial
        if caveats:
            return FlowVerdict(True, caveats=tuple(dict.fromkeys(caveats)))
        return _ALLOWED

    def _hop_result(self, hop: Hop, src: Side, dst: Side, ports: PortRange) -> HopResult:
        """One hop of `_evaluate` (untraced) over every protocol of `ports`: its first denial,
        or None and the caveats of the rules that allowed it."""
        assert isinstance(src, _Identity) and isinstance(dst, _Identity)
        protocols = _CONCRETE_PROTOCOLS if ports.protocol is Protocol.ANY else (ports.protocol,)
        caveats: list[Caveat] = []
        for protocol in protocols:
            verdict = _hop(hop, src, dst, first=ports.first, last=ports.last,
                           protocol=protocol, caveats=caveats, kinds=self._kinds)  # fmt: skip
            if verdict is not None:
                return verdict, ()
        return None, tuple(caveats)


def _hop(
    hop: Hop,
    src: _Identity,
    dst: _Identity,
    *,
    first: int,
    last: int,
    protocol: Protocol,
    caveats: list[Caveat],
    kinds: Mapping[str, PolicyKind],
    trace: list[HopTrace] | None = None,
) -> FlowVerdict | None:
    """The denial at one hop for one protocol, or None when the hop allows every port (the
    caveats of the rules that allowed it are added to `caveats`). With `trace`, the hop's
    selecting blocks, every matching rule and the verdict are appended to it as a `HopTrace`
    (the decision itself does not change)."""
    egress = hop is Hop.EGRESS
    selected = src.selected if egress else dst.selected
    matched: list[RuleMatch] | None = None if trace is None else []
    verdict = _decide(
        egress, selected, src, dst, first=first, last=last, protocol=protocol,
        caveats=caveats, matched=matched, kinds=kinds,
    )  # fmt: skip
    if trace is not None and matched is not None:
        trace.append(
            HopTrace(
                hop=hop,
                protocol=protocol,
                selecting=tuple(_block(entry, egress=egress, kinds=kinds)
                                for entry in selected),
                matched=tuple(matched),
                verdict=verdict,
            )
        )
    return verdict


def _block(entry: _Entry, *, egress: bool, kinds: Mapping[str, PolicyKind]) -> SelectingBlock:
    subject = entry.subject
    return SelectingBlock(
        policy=entry.policy_id,
        kind=kinds[entry.policy_id],
        section=subject.path,
        enforcement=subject.egress_enforcement if egress else subject.ingress_enforcement,
        enforces=subject.enforce_egress if egress else subject.enforce_ingress,
    )


def _match(
    entry: _Entry,
    rule: Rule,
    *,
    kinds: Mapping[str, PolicyKind],
    field: str,
    index: int,
    effect: RuleEffect,
    protocol: Protocol,
    named: Mapping[tuple[str, Protocol], int],
) -> RuleMatch:
    return RuleMatch(
        policy=entry.policy_id,
        kind=kinds[entry.policy_id],
        section=entry.subject.path,
        field=field,
        index=index,
        rule=rule,
        effect=effect,
        protocol=protocol,
        intervals=tuple(rule.intervals(protocol, named)),
    )


def _decide(
    egress: bool,
    selected: tuple[_Entry, ...],
    src: _Identity,
    dst: _Identity,
    *,
    first: int,
    last: int,
    protocol: Protocol,
    caveats: list[Caveat],
    matched: list[RuleMatch] | None,
    kinds: Mapping[str, PolicyKind],
) -> FlowVerdict | None:
    """The denial at one hop for one protocol, or None (see `_hop`); with `matched`,
    every matching rule is appended to it."""
    if not selected:
        return None
    hop = Hop.EGRESS if egress else Hop.INGRESS
    peer = dst.labels if egress else src.labels
    named = dst.named_ports

    denied_by: set[str] = set()
    deny_field = "egressDeny" if egress else "ingressDeny"
    for entry in selected:
        deny_rules = entry.subject.egress_deny if egress else entry.subject.ingress_deny
        for index, rule in enumerate(deny_rules):
            if _hits(rule, peer, protocol=protocol, named=named, first=first, last=last):
                denied_by.add(entry.policy_id)
                if matched is None:
                    break
                matched.append(_match(
                    entry, rule, kinds=kinds, field=deny_field, index=index, effect=RuleEffect.DENY,
                    protocol=protocol, named=named,
                ))  # fmt: skip
    if denied_by:
        return FlowVerdict(False, hop, DenyReason.DENY_RULE, tuple(sorted(denied_by)))

    enforcing = {
        entry.policy_id
        for entry in selected
        if (entry.subject.enforce_egress if egress else entry.subject.enforce_ingress)
    }
    requires = tuple(
        sel
        for entry in selected
        for sel in (entry.subject.egress_requires if egress else entry.subject.ingress_requires)
    )
    intervals: list[tuple[int, int]] = []
    deciding: list[tuple[str, Rule]] = []
    l7_by: set[str] = set()
    allow_field = "egress" if egress else "ingress"
    for entry in selected:
        allow_rules = entry.subject.egress if egress else entry.subject.ingress
        for index, rule in enumerate(allow_rules):
            matches = rule.peer_matches(peer, requires)
            if matches:
                found = rule.intervals(protocol, named)
                intervals.extend(found)
                if any(lo <= last and hi >= first for lo, hi in found):
                    deciding.append((entry.policy_id, rule))
                    if matched is not None:
                        matched.append(_match(
                            entry, rule, kinds=kinds, field=allow_field, index=index,
                            effect=RuleEffect.ALLOW, protocol=protocol, named=named,
                        ))  # fmt: skip
            if (matches or enforcing) and _l7_on(
                rule, protocol=protocol, named=named, first=first, last=last
            ):
                l7_by.add(entry.policy_id)
                if matched is not None:
                    matched.append(_match(
                        entry, rule, kinds=kinds, field=allow_field, index=index,
                        effect=RuleEffect.L7, protocol=protocol, named=named,
                    ))  # fmt: skip
    if enforcing and not (intervals and _covers(intervals, first, last)):
        return FlowVerdict(False, hop, DenyReason.DEFAULT_DENY, tuple(sorted(enforcing)))
    if l7_by:
        return FlowVerdict(False, hop, DenyReason.L7_PROXY, tuple(sorted(l7_by)))
    for policy_id, rule in deciding:
        found_caveats = _rule_caveats(
            policy_id, rule, protocol=protocol, named=named, first=first, last=last
        )
        caveats.extend(found_caveats)
    for entry in selected:
        caveats.extend(Caveat(entry.policy_id, text, "") for text in entry.subject.caveats)
    return None


_KEEP_ALL = IdentityFilter(None, description="every label")


def _l7_on(
    rule: Rule,
    *,
    protocol: Protocol,
    named: Mapping[tuple[str, Protocol], int],
    first: int,
    last: int,
) -> bool:
    """True when the rule gives L7 rules to a port of `first..last`."""
    return any(
        port.l7 is not None and port.overlaps(protocol, named, first=first, last=last)
        for port in rule.ports or ()
    )


def _rule_caveats(
    policy_id: str,
    rule: Rule,
    *,
    protocol: Protocol,
    named: Mapping[tuple[str, Protocol], int],
    first: int,
    last: int,
) -> list[Caveat]:
    out: list[Caveat] = []
    if rule.authentication is not None:
        out.append(Caveat(policy_id, f"authentication.mode: {rule.authentication}", _AUTH_DETAIL))
    for port in rule.ports or ():
        if port.features and port.overlaps(protocol, named, first=first, last=last):
            out.extend(
                Caveat(policy_id, f"toPorts.{feature}", _PORT_FEATURE_DETAIL[feature])
                for feature in port.features
            )
    return out


def _hits(
    rule: Rule,
    peer: Mapping[str, str],
    *,
    protocol: Protocol,
    named: Mapping[tuple[str, Protocol], int],
    first: int,
    last: int,
) -> bool:
    """True when a deny rule matches the peer and at least one port of `first..last`."""
    if not rule.peer_matches(peer):
        return False
    return any(lo <= last and hi >= first for lo, hi in rule.intervals(protocol, named))
