"""Explain one flow against the network policies: per hop, whether it is enforced and why, which
rules matched, the verdict, and the identity each side was judged by; and the reachability matrix.

Called by the `explain` command (a snapshot or the live cluster), the agent's `GET /api/explain`
and the Slack `/zonemedic explain` command: all three parse the same query (`parse_query`) and get
the same `Explanation` from `explain`. The answer is the evaluator's own (`PolicySet.trace`, the
code path of `PolicySet.check` that the diagnosis uses), never a second reading of the policies:
`Explanation.allowed` is exactly `check`'s verdict. Every denying hop is reported (a flow denied at
egress is often denied at ingress too, and a fix must open both). A side is an existing pod
(`NS/POD`) or, for a pod that does not exist yet, a namespace and labels. Bad input raises
`ExplainError` naming what is wrong. What it does not do: read the cluster or render for people
(`agent.policy.explain_report` renders). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agent.errors import ExplainError
from agent.model.cluster import ClusterState, Pod
from agent.model.network import Endpoint, FlowVerdict, Hop, PortRange, Protocol
from agent.model.selector import LabelSelector
from agent.policy import PolicySet
from agent.policy.identity import UNMATCHABLE_PREFIX, identity_labels, kubernetes_identity
from agent.policy.rule import Enforcement, PortMatch, Rule
from agent.policy.trace import FlowTrace, HopTrace, RuleMatch, SelectingBlock

MAX_MATRIX_PODS = 50
MAX_MATRIX_PORTS = 10

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_LABEL_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)")
_PORT = re.compile(r"(\d{1,5})(?:-(\d{1,5}))?(?:/([A-Za-z]+))?")


class HopVerdict(StrEnum):
    """A hop's answer: allowed, or the Hubble-visible reason it drops the flow."""

    ALLOWED = "allowed"
    DENY_RULE = "deny_rule"  # Hubble: POLICY_DENY
    DEFAULT_DENY = "default_deny"  # Hubble: POLICY_DENIED
    L7_PROXY = "l7_proxy"  # Cilium's proxy handles the port: a flow not of its protocol fails

    @classmethod
    def of(cls, verdict: FlowVerdict | None) -> HopVerdict:
        if verdict is None or verdict.reason is None:
            return cls.ALLOWED
        return cls(verdict.reason.value)

    @property
    def hubble(self) -> str | None:
        """Hubble's drop reason for this verdict (None: allowed, or not a policy drop)."""
        return _HUBBLE.get(self)


_HUBBLE = {HopVerdict.DENY_RULE: "POLICY_DENY", HopVerdict.DEFAULT_DENY: "POLICY_DENIED"}

_ENFORCEMENT_TEXT = {
    Enforcement.RULES: "has {d} rules (enableDefaultDeny unset): {d} is default deny",
    Enforcement.NO_RULES: "has no {d} rules: it does not enforce {d}",
    Enforcement.DEFAULT_DENY_ON: "enableDefaultDeny.{d}: true",
    Enforcement.DEFAULT_DENY_OFF: "enableDefaultDeny.{d}: false: its {d} rules only add",
    Enforcement.POLICY_TYPES: "policyTypes lists {D}",
    Enforcement.NOT_IN_POLICY_TYPES: "policyTypes does not list {D}: it does not enforce {d}",
    Enforcement.POLICY_TYPES_DEFAULT: "policyTypes unset: {D} is implied",
    Enforcement.NOT_IMPLIED: "policyTypes unset and no {d} rules: {d} not enforced",
    Enforcement.UNKNOWN: "{enforces}",
}


def enforcement_text(block: SelectingBlock, hop: Hop) -> str:
    """Why `block` does or does not enforce `hop`, for people."""
    text = _ENFORCEMENT_TEXT[block.enforcement]
    return text.format(
        d=hop.value, D=hop.value.capitalize(),
        enforces="enforces" if block.enforces else "does not enforce",
    )  # fmt: skip


# -- the query -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Side:
    """One end of the flow: an existing pod (`pod` set) or a pod to be (`labels`)."""

    namespace: str
    pod: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    service_account: str = "default"

    def __str__(self) -> str:
        if self.pod is not None:
            return f"{self.namespace}/{self.pod}"
        shown = ",".join(f"{k}={v}" for k, v in self.labels)
        return f"{self.namespace}/{{{shown}}}"


@dataclass(frozen=True, slots=True)
class ExplainQuery:
    source: Side
    destination: Side
    ports: PortRange


def parse_labels(text: str, *, field: str) -> tuple[tuple[str, str], ...]:
    """`k=v,k2=v2` as sorted pairs; `ExplainError` names a malformed one."""
    out: dict[str, str] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ExplainError(f"{field}: expected KEY=VALUE, got {item!r}")
        if not _label_key_ok(key):
            raise ExplainError(f"{field}: {key!r} is not a valid label key")
        if value and (len(value) > 63 or not _LABEL_NAME.fullmatch(value)):
            raise ExplainError(f"{field}: {value!r} is not a valid label value (key {key})")
        out[key] = value
    return tuple(sorted(out.items()))


def _label_key_ok(key: str) -> bool:
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and _LABEL_NAME.fullmatch(name) is not None


def parse_side(
    text: str | None, labels: str | None, *, field: str, service_account: str | None = None
) -> Side:
    """`NS/POD`, or `NS` with `labels` (`k=v,...`, and optionally its service account) for a
    pod that does not exist yet."""
    if not text:
        raise ExplainError(f"{field}: give NAMESPACE/POD (or NAMESPACE with --{field}-labels)")
    namespace, sep, pod = text.partition("/")
    if not _DNS_LABEL.fullmatch(namespace) or len(namespace) > 63:
        raise ExplainError(f"{field}: {namespace!r} is not a valid namespace name")
    if service_account is not None and labels is None:
        raise ExplainError(f"{field}-service-account: only for a pod to be (with "
                           f"--{field}-labels); an existing pod has its own")  # fmt: skip
    if labels is not None:
        if sep:
            raise ExplainError(f"{field}: with --{field}-labels give the namespace only, not "
                               f"{text!r}")  # fmt: skip
        account = service_account or "default"
        if not _DNS_SUBDOMAIN.fullmatch(account):
            raise ExplainError(f"{field}-service-account: {account!r} is not a valid name")
        return Side(namespace, labels=parse_labels(labels, field=f"{field}-labels"),
                    service_account=account)
    if not sep or not pod:
        raise ExplainError(f"{field}: expected NAMESPACE/POD, got {text!r}")
    if len(pod) > 253 or not _DNS_SUBDOMAIN.fullmatch(pod):
        raise ExplainError(f"{field}: {pod!r} is not a valid pod name")
    return Side(namespace, pod=pod)


def parse_ports(text: str | None) -> PortRange:
    """`PORT`, `PORT/PROTO` or `FIRST-LAST/PROTO` (PROTO: TCP, UDP, SCTP or ANY; default TCP)."""
    if not text:
        raise ExplainError("port: give PORT[/PROTO], e.g. 23456/TCP")
    found = _PORT.fullmatch(text.strip())
    if found is None:
        raise ExplainError(f"port: expected PORT[/PROTO] or FIRST-LAST[/PROTO], got {text!r}")
    first = int(found.group(1))
    last = int(found.group(2)) if found.group(2) else first
    if not 1 <= first <= last <= 65535:
        raise ExplainError(f"port: {text!r} is not a port (or range) within 1-65535")
    proto = (found.group(3) or "TCP").upper()
    try:
        protocol = Protocol(proto)
    except ValueError:
        raise ExplainError(f"port: unknown protocol {found.group(3)!r} "
                           "(TCP, UDP, SCTP or ANY)") from None  # fmt: skip
    return PortRange(first, last, protocol)


def parse_query(
    *, source: str | None, destination: str | None, port: str | None,
    from_labels: str | None = None, to_labels: str | None = None,
    from_service_account: str | None = None, to_service_account: str | None = None,
) -> ExplainQuery:
    """The query of the CLI flags, the HTTP parameters or the slash command's words."""
    return ExplainQuery(
        source=parse_side(source, from_labels, field="from",
                          service_account=from_service_account),
        destination=parse_side(destination, to_labels, field="to",
                               service_account=to_service_account),
        ports=parse_ports(port),
    )  # fmt: skip


def port_text(ports: PortRange) -> str:
    return f"{ports}/{ports.protocol.value}"


# -- resolving sides -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Judged:
    """A side resolved against the cluster: its endpoint and the identity it is judged by."""

    side: Side
    endpoint: Endpoint
    pod: Pod | None

    @property
    def name(self) -> str:
        return str(self.side)


class PodIndex:
    """Pods by namespace and name. `pods_in` (the agent's facts index: each namespace's pods)
    spares a pass over every pod; without it the state's pods are grouped once. A namespace's
    name map is built when first asked."""

    def __init__(
        self, state: ClusterState, *, pods_in: Mapping[str, Sequence[Pod]] | None = None
    ) -> None:
        self.state = state
        if pods_in is None:
            grouped: dict[str, list[Pod]] = {}
            for pod in state.pods:
                grouped.setdefault(pod.namespace, []).append(pod)
            pods_in = grouped
        self._pods_in = pods_in
        self._by_name: dict[str, dict[str, Pod]] = {}

    def get(self, namespace: str, name: str) -> Pod | None:
        named = self._by_name.get(namespace)
        if named is None:
            named = self._by_name[namespace] = {p.name: p for p in self._pods_in.get(namespace, ())}
        return named.get(name)

    def in_namespace(self, namespace: str) -> list[Pod]:
        """The live pods of `namespace`, by name."""
        return sorted((p for p in self._pods_in.get(namespace, ()) if p.live),
                      key=lambda p: p.name)  # fmt: skip

    def resolve(self, side: Side, *, where: str = "the cluster") -> Judged:
        """The side's endpoint; `ExplainError` when its pod or namespace is not there."""
        namespaces = self.state.namespaces
        if side.pod is not None:
            pod = self.get(side.namespace, side.pod)
            if pod is None:
                raise ExplainError(f"no pod {side.namespace}/{side.pod} in {where}")
            return Judged(side, endpoint_of(pod, self.state), pod)
        ns = namespaces.get(side.namespace)
        if ns is None and namespaces:
            raise ExplainError(f"no namespace {side.namespace} in {where}")
        endpoint = Endpoint(
            namespace=side.namespace,
            labels=dict(side.labels),
            namespace_labels=ns.labels if ns is not None else {},
            service_account=side.service_account,
        )
        return Judged(side, endpoint, None)


def endpoint_of(pod: Pod, state: ClusterState) -> Endpoint:
    """The pod as the evaluator sees it (as the diagnosis builds it: labels, namespace labels,
    service account, named container ports)."""
    ns = state.namespaces.get(pod.namespace)
    return Endpoint(
        namespace=pod.namespace,
        labels=pod.labels,
        namespace_labels=ns.labels if ns is not None else {},
        service_account=pod.service_account,
        named_ports=pod.named_ports(),
    )


# -- the explanation -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Explanation:
    """The evaluator's trace of one flow with both sides' identities."""

    query: ExplainQuery
    source: Judged
    destination: Judged
    trace: FlowTrace
    policies: PolicySet
    mirror_keys: tuple[str, ...]

    @property
    def allowed(self) -> bool:
        return self.trace.verdict.allowed

    def to_dict(self) -> dict[str, Any]:
        verdict = self.trace.verdict
        return {
            "from": self.source.name,
            "to": self.destination.name,
            "port": port_text(self.query.ports),
            "allowed": verdict.allowed,
            "verdict": HopVerdict.of(None if verdict.allowed else verdict).value,
            "denied_at": list(dict.fromkeys(h.hop.value for h in self.trace.denials())),
            "hops": [self._hop(h) for h in self.trace.hops],
            "identities": {
                "from": self._identity(self.source),
                "to": self._identity(self.destination),
            },
            "caveats": [c.to_dict() for c in verdict.caveats],
            "uncertain": sorted(
                {u.describe() for j in (self.source, self.destination)
                 for u in self.policies.uncertain(j.endpoint)}
            ),
            "dataplane": self.policies.dataplane.describe(),
            "warnings": list(self.policies.warnings()),
        }

    def _hop(self, hop: HopTrace) -> dict[str, Any]:
        at = self.source if hop.hop is Hop.EGRESS else self.destination
        result = HopVerdict.of(hop.verdict)
        if hop.verdict is not None:
            deciding = list(hop.verdict.policies)
        else:
            deciding = sorted({m.policy for m in hop.matched}) if hop.enforced else []
        hubble = result.hubble if self.policies.dataplane.cilium else None
        return {
            "hop": hop.hop.value,
            "protocol": hop.protocol.value,
            "endpoint": at.name,
            "enforced": hop.enforced,
            "selected_by": [_block_dict(b, hop.hop) for b in hop.selecting],
            "enforcing": list(hop.enforcing),
            "verdict": result.value,
            "hubble": hubble,
            "policies": deciding,
            "rules": [rule_dict(m) for m in hop.matched],
        }

    def _identity(self, judged: Judged) -> dict[str, Any]:
        endpoint = judged.endpoint
        identity = self.policies.identity
        full = identity_labels(endpoint, kubernetes_identity())
        kept = self.policies.identity_of(endpoint)
        excluded = [
            {"key": k, "value": v, "why": identity.why_excluded(k)}
            for k, v in sorted(endpoint.labels.items()) if k not in kept
        ]  # fmt: skip
        excluded += [
            {"key": k, "value": v, "why": identity.why_excluded(k)}
            for k, v in sorted(full.items())
            if k not in kept and k not in endpoint.labels
        ]
        return {
            "namespace": endpoint.namespace,
            "pod": judged.side.pod,
            "service_account": endpoint.service_account,
            "namespace_labels": dict(sorted(endpoint.namespace_labels.items())),
            "zone_label": {k: endpoint.labels[k] for k in self.mirror_keys
                           if k in endpoint.labels},
            "labels": dict(sorted(kept.items())),
            "excluded_labels": excluded,
            "named_ports": [
                {"name": name, "protocol": proto.value, "port": number}
                for (name, proto), number in sorted(endpoint.named_ports.items())
            ],
        }


def _block_dict(block: SelectingBlock, hop: Hop) -> dict[str, Any]:
    return {
        "policy": block.policy,
        "kind": block.kind.value,
        "section": block.section,
        "enforces": block.enforces,
        "why": enforcement_text(block, hop),
    }


def rule_dict(match: RuleMatch) -> dict[str, Any]:
    """A matched rule as the JSON answer shows it."""
    return {
        "policy": match.policy,
        "kind": match.kind.value,
        "section": match.section,
        "field": match.field,
        "index": match.index,
        "path": match.path,
        "effect": match.effect.value,
        "peer": peer_text(match.rule),
        "ports": ports_text(match.rule),
    }


def selector_text(selector: LabelSelector) -> str:
    """`{app=web, role In (a,b)}` on identity keys (`io.kubernetes.pod.namespace` ...)."""
    terms = [f"{_key(k)}={v}" for k, v in selector.match_labels]
    for req in selector.match_expressions:
        values = f" ({','.join(sorted(req.values))})" if req.values else ""
        terms.append(f"{_key(req.key)} {req.operator.value}{values}")
    return "{" + ", ".join(terms) + "}"


def _key(key: str) -> str:
    return key.removeprefix(UNMATCHABLE_PREFIX)


def peer_text(rule: Rule) -> str:
    """The peer clause of a rule, for people."""
    if rule.any_peer:
        return "any peer"
    parts = [selector_text(sel) for sel in rule.peers]
    if rule.pod_entity:
        parts.append("entity cluster/all")
    return " or ".join(parts) if parts else "no peer"


def _port_text(port: PortMatch) -> str:
    where = port.name if port.name is not None else (
        str(port.first) if port.first == port.last else f"{port.first}-{port.last}")
    text = f"{where}/{port.protocol}"
    if port.l7 is not None:
        text += f" (L7 {port.l7})"
    return text


def ports_text(rule: Rule) -> str:
    """The port clause of a rule, for people."""
    if rule.ports is None:
        return "all ports"
    if not rule.ports:
        return "no port"
    return ", ".join(_port_text(p) for p in rule.ports)


def explain(
    index: PodIndex,
    policies: PolicySet,
    query: ExplainQuery,
    *,
    mirror_keys: Sequence[str] = (),
    where: str = "the cluster",
) -> Explanation:
    """The explanation of `query` (see the module docstring)."""
    source = index.resolve(query.source, where=where)
    destination = index.resolve(query.destination, where=where)
    trace = policies.trace(source.endpoint, destination.endpoint, query.ports)
    return Explanation(query, source, destination, trace, policies, tuple(mirror_keys))


# -- the matrix ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Matrix:
    """Reachability of every (source, destination) pair on one port: the e2e tests' truth table."""

    ports: PortRange
    names: tuple[str, ...]
    allowed: tuple[tuple[bool, ...], ...]  # rows: sources, columns: destinations

    def pretty(self) -> str:
        """As Kubernetes' network-policy e2e tests print it (`TruthTable.PrettyPrint`): a header
        `-` then the destinations, one row per source, `.` allowed and `X` denied, tab-separated."""
        lines = ["\t".join(("-", *self.names))]
        for name, row in zip(self.names, self.allowed, strict=True):
            lines.append("\t".join((name, *("." if ok else "X" for ok in row))))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "port": port_text(self.ports),
            "pods": list(self.names),
            "allowed": [list(row) for row in self.allowed],
        }


def matrix(
    index: PodIndex, policies: PolicySet, sides: Sequence[Side], ports: Sequence[PortRange],
    *, where: str = "the cluster",
) -> list[Matrix]:
    """One table per port over `sides` (each pair checked by `PolicySet.check`)."""
    if not sides:
        raise ExplainError("matrix: no pods to tabulate")
    if len(sides) > MAX_MATRIX_PODS:
        raise ExplainError(f"matrix: {len(sides)} pods, at most {MAX_MATRIX_PODS}")
    if len(ports) > MAX_MATRIX_PORTS:
        raise ExplainError(f"matrix: {len(ports)} ports, at most {MAX_MATRIX_PORTS}")
    judged = [index.resolve(s, where=where) for s in sides]
    out = []
    for port in ports:
        rows = tuple(
            tuple(policies.check(src.endpoint, dst.endpoint, port).allowed for dst in judged)
            for src in judged
        )
        out.append(Matrix(port, tuple(j.name for j in judged), rows))
    return out
