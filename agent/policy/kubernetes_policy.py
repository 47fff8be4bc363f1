"""Read a Kubernetes NetworkPolicy's `spec` (networking.k8s.io/v1) into the evaluator's `Subject`.

Who calls it: `agent.policy.manifest.parse_policy`, with the policy's namespace and its
`ManifestContext`. The podSelector is limited to the policy's namespace; a peer is a podSelector
(in the policy's namespace), a namespaceSelector (on the namespace labels), both ANDed, or an
ipBlock (which never matches a pod); a rule without peers covers every peer. `policyTypes` unset
means Ingress, plus Egress when there are egress rules. Port entries go through
`agent.policy.ports`. Errors are `PolicyError` naming the policy and the field path; an unknown
field is an error. What it does not do: evaluate anything (`agent.policy.evaluator` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.model.selector import LabelSelector
from agent.policy.context import ManifestContext
from agent.policy.ports import parse_port
from agent.policy.rule import Enforcement, PortMatch, Rule, Subject
from agent.policy.selectors import label_selector, namespace_peer, with_namespace

# Fields each object may hold (the networking.k8s.io/v1 schema): a misspelt field is an error.
_K8S_SPEC_FIELDS = frozenset({"podSelector", "ingress", "egress", "policyTypes"})
_K8S_PEER_FIELDS = frozenset({"podSelector", "namespaceSelector", "ipBlock"})


def parse_kubernetes_spec(raw: Any, namespace: str, *, ctx: ManifestContext) -> Subject:
    """The one subject of a NetworkPolicy's `spec`, the policy being in `namespace`."""
    if not isinstance(raw, Mapping):
        raise ctx.error("spec", "missing or not an object")
    ctx.check_fields(raw, _K8S_SPEC_FIELDS, path="spec")
    if "podSelector" not in raw:
        raise ctx.error("spec.podSelector", "missing (use {} to select every pod)")
    pod_selector = label_selector(raw.get("podSelector"), path="spec.podSelector", ctx=ctx)
    subject = with_namespace(pod_selector, namespace)

    sections: dict[str, tuple[Rule, ...]] = {}
    for field, peer_field in (("ingress", "from"), ("egress", "to")):
        items = ctx.optional_list(raw, field, path="spec")
        if items is None:
            sections[field] = ()
            continue
        sections[field] = tuple(
            _parse_k8s_rule(
                item, namespace, peer_field=peer_field, path=f"spec.{field}[{i}]", ctx=ctx
            )
            for i, item in enumerate(items)
        )

    types_raw = ctx.optional_list(raw, "policyTypes", path="spec")
    implied = not types_raw
    if not types_raw:
        types = {"Ingress"}
        if sections["egress"]:
            types.add("Egress")
    else:
        types = set()
        for i, t in enumerate(types_raw):
            if t not in ("Ingress", "Egress"):
                raise ctx.error(f"spec.policyTypes[{i}]", f"unknown policy type {t!r}")
            types.add(t)
    return Subject(
        selector=subject,
        ingress=sections["ingress"] if "Ingress" in types else (),
        egress=sections["egress"] if "Egress" in types else (),
        enforce_ingress="Ingress" in types,
        enforce_egress="Egress" in types,
        ingress_enforcement=_enforcement("Ingress" in types, implied=implied),
        egress_enforcement=_enforcement("Egress" in types, implied=implied),
    )


def _enforcement(listed: bool, *, implied: bool) -> Enforcement:
    if implied:
        return Enforcement.POLICY_TYPES_DEFAULT if listed else Enforcement.NOT_IMPLIED
    return Enforcement.POLICY_TYPES if listed else Enforcement.NOT_IN_POLICY_TYPES


def _parse_k8s_rule(
    raw: Any, namespace: str, *, peer_field: str, path: str, ctx: ManifestContext
) -> Rule:
    if raw is None:
        raw = {}
    raw = ctx.object(raw, frozenset({peer_field, "ports"}), path=path)
    ports_raw = ctx.optional_list(raw, "ports", path=path)
    ports: tuple[PortMatch, ...] | None = None
    if ports_raw:
        ports = tuple(
            parse_port(item, cilium=False, path=f"{path}.ports[{i}]", ctx=ctx)
            for i, item in enumerate(ports_raw)
        )
    peers_raw = ctx.optional_list(raw, peer_field, path=path)
    if not peers_raw:
        return Rule(any_peer=True, ports=ports)
    peers: list[LabelSelector] = []
    for i, item in enumerate(peers_raw):
        where = f"{path}.{peer_field}[{i}]"
        peer = ctx.object(item, _K8S_PEER_FIELDS, path=where)
        has_pod = peer.get("podSelector") is not None
        has_ns = peer.get("namespaceSelector") is not None
        has_ip = peer.get("ipBlock") is not None
        if has_ip:
            if has_pod or has_ns:
                raise ctx.error(
                    where, "ipBlock cannot be combined with podSelector or namespaceSelector"
                )
            if not isinstance(peer.get("ipBlock"), Mapping):
                raise ctx.error(f"{where}.ipBlock", "expected an object")
            continue  # an IP block never matches a pod
        if not has_pod and not has_ns:
            raise ctx.error(where, "a peer needs podSelector, namespaceSelector or ipBlock")
        pod_sel = (
            label_selector(peer.get("podSelector"), path=f"{where}.podSelector", ctx=ctx)
            if has_pod
            else LabelSelector()
        )
        if has_ns:
            ns_sel = label_selector(
                peer.get("namespaceSelector"), path=f"{where}.namespaceSelector", ctx=ctx
            )
            peers.append(namespace_peer(pod_sel, ns_sel))
        else:
            peers.append(with_namespace(pod_sel, namespace))
    return Rule(peers=tuple(peers), any_peer=False, ports=ports)
