"""A deliberately simple reference implementation of the Kubernetes NetworkPolicy spec.

Written from the API reference (networking.k8s.io/v1 NetworkPolicy) alone, sharing no code with
`agent.policy`, for differential tests: a connection from pod A to pod B on a port passes when
A's egress and B's ingress both allow it. A pod is isolated for a direction when some policy of
its namespace selects it (`podSelector`) and lists that direction in its policy types (default:
Ingress, plus Egress when the policy has egress rules); an isolated pod accepts only what some
rule of a selecting policy allows. Rules: no `from`/`to` (or an empty list) means every peer; no
`ports` (or an empty list) means every port. A peer with only `podSelector` means pods of the
policy's namespace; only `namespaceSelector`, every pod of matching namespaces; both, pods
matching the one in namespaces matching the other; an `ipBlock` never names a pod here. A port
entry: protocol (default TCP) must equal the connection's; no `port` means every port; a number
with optional `endPort` a range; a name, the destination pod's container port of that name and
that protocol. Selectors: `matchLabels` AND `matchExpressions` (In, NotIn, Exists, DoesNotExist).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SpecPod:
    """A pod: where it lives, its labels and its declared container ports (name, number, proto)."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    ports: tuple[tuple[str, int, str], ...] = ()
    namespace_labels: Mapping[str, str] = field(default_factory=dict)


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def _types(spec: Mapping[str, Any]) -> set[str]:
    if spec.get("policyTypes"):
        return set(spec["policyTypes"])
    out = {"Ingress"}
    if spec.get("egress"):
        out.add("Egress")
    return out


def _peer_names(peer: Mapping[str, Any], policy_ns: str, pod: SpecPod) -> bool:
    if "ipBlock" in peer:
        return False
    has_pods, has_ns = "podSelector" in peer, "namespaceSelector" in peer
    if has_ns:
        ns_labels = {"kubernetes.io/metadata.name": pod.namespace, **pod.namespace_labels}
        if not selects(peer["namespaceSelector"], ns_labels):
            return False
    elif pod.namespace != policy_ns:
        return False
    return not has_pods or selects(peer["podSelector"], pod.labels)


def _port_allows(entry: Mapping[str, Any], dst: SpecPod, port: int, protocol: str) -> bool:
    if entry.get("protocol", "TCP") != protocol:
        return False
    wanted = entry.get("port")
    if wanted is None:
        return True
    if isinstance(wanted, str):
        return any(n == wanted and p == protocol and number == port for n, number, p in dst.ports)
    return wanted <= port <= entry.get("endPort", wanted)


def _rule_allows(
    rule: Mapping[str, Any], peers_key: str, *, policy_ns: str, peer: SpecPod, dst: SpecPod,
    port: int, protocol: str,
) -> bool:
    peers = rule.get(peers_key) or []
    if peers and not any(_peer_names(p, policy_ns, peer) for p in peers):
        return False
    ports = rule.get("ports") or []
    return not ports or any(_port_allows(e, dst, port, protocol) for e in ports)


def _side_allows(
    policies: Sequence[Mapping[str, Any]], *, me: SpecPod, peer: SpecPod, dst: SpecPod,
    port: int, protocol: str, direction: str,
) -> bool:
    rules_key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    isolated = False
    for policy in policies:
        ns = policy["metadata"].get("namespace", "default")
        spec = policy["spec"]
        if ns != me.namespace or not selects(spec.get("podSelector"), me.labels):
            continue
        if direction not in _types(spec):
            continue
        isolated = True
        for rule in spec.get(rules_key) or []:
            if _rule_allows(rule, peers_key, policy_ns=ns, peer=peer, dst=dst, port=port,
                            protocol=protocol):
                return True
    return not isolated


def connection_allowed(
    policies: Sequence[Mapping[str, Any]], src: SpecPod, dst: SpecPod, port: int, protocol: str
) -> bool:
    """Whether `src` may open a connection to `dst` on `port`/`protocol` under `policies`."""
    return _side_allows(
        policies, me=src, peer=dst, dst=dst, port=port, protocol=protocol, direction="Egress"
    ) and _side_allows(
        policies, me=dst, peer=src, dst=dst, port=port, protocol=protocol, direction="Ingress"
    )
