"""Read the `spec` or `specs` of a CiliumNetworkPolicy or CiliumClusterwideNetworkPolicy (v2).

Who calls it: `agent.policy.manifest.parse_policy`, with the policy's namespace (None for a
clusterwide policy) and its `ManifestContext`. Each rule block becomes a `Subject`: its
endpointSelector (or, for a host policy, its nodeSelector: it selects no pod), its ingress,
ingressDeny, egress and egressDeny rules, `enableDefaultDeny` (unset: default deny in each
direction that has rules), and `fromRequires`/`toRequires` (not applied to deny rules: a caveat).
A rule's peers are endpoint selectors (with Cilium's namespace defaulting,
`agent.policy.selectors`), entities (`cluster` and `all` cover every pod, the others none) and
fields that never select a pod (CIDRs, nodes, FQDNs, groups, services); its `toPorts` entries go
through `agent.policy.ports`, and L7 rules (`rules`) mark the port as handled by Cilium's proxy.
Errors are `PolicyError` naming the policy and the field path; an unknown field is an error. What
it does not do: evaluate anything (`agent.policy.evaluator` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.model.selector import LabelSelector
from agent.policy.context import ManifestContext
from agent.policy.ports import parse_port
from agent.policy.rule import Enforcement, PortMatch, Rule, Subject
from agent.policy.selectors import cilium_selector, endpoint_selector, peer_selector

# Entities that cover every Cilium-managed pod; the others (world, host, ...) cover none.
_POD_ENTITIES = frozenset({"cluster", "all"})
_OTHER_ENTITIES = frozenset(
    {
        "world",
        "world-ipv4",
        "world-ipv6",
        "host",
        "remote-node",
        "kube-apiserver",
        "ingress",
        "init",
        "health",
        "unmanaged",
        "none",
    }
)

# Peer fields of a Cilium rule that never select a pod (CIDRs, nodes, DNS names, cloud groups,
# services). Present, they still make the rule an L3 rule (not "any peer").
_INGRESS_NON_POD_PEERS = ("fromCIDR", "fromCIDRSet", "fromNodes", "fromGroups")
_EGRESS_NON_POD_PEERS = ("toCIDR", "toCIDRSet", "toNodes", "toGroups", "toFQDNs", "toServices")

# Fields each object may hold (the cilium.io/v2 schema). An unknown field is an error: a misspelt
# peer field would otherwise silently turn a rule into "any peer".
_CILIUM_SPEC_FIELDS = frozenset(
    {
        "endpointSelector",
        "nodeSelector",
        "ingress",
        "ingressDeny",
        "egress",
        "egressDeny",
        "enableDefaultDeny",
        "labels",
        "description",
        "log",
    }
)
_CILIUM_INGRESS_FIELDS = frozenset(
    {
        "fromEndpoints",
        "fromRequires",
        "fromCIDR",
        "fromCIDRSet",
        "fromEntities",
        "fromGroups",
        "fromNodes",
        "toPorts",
        "icmps",
        "authentication",
    }
)
_CILIUM_EGRESS_FIELDS = frozenset(
    {
        "toEndpoints",
        "toRequires",
        "toCIDR",
        "toCIDRSet",
        "toEntities",
        "toServices",
        "toFQDNs",
        "toGroups",
        "toNodes",
        "toPorts",
        "icmps",
        "authentication",
    }
)
_CILIUM_PORT_RULE_FIELDS = frozenset(
    {"ports", "rules", "listener", "serverNames", "originatingTLS", "terminatingTLS"}
)

# L7 rule kinds of a port rule (`rules`), and the port-rule fields not modelled exactly
_L7_KINDS = ("http", "kafka", "dns", "l7")
_L7_FIELDS = frozenset({"http", "kafka", "dns", "l7proto", "l7"})
_UNMODELLED_PORT_FIELDS = ("listener", "serverNames", "terminatingTLS", "originatingTLS")
_AUTH_MODES = frozenset({"disabled", "required", "test-always-fail"})


def parse_cilium_specs(
    obj: Mapping[str, Any], namespace: str | None, *, ctx: ManifestContext
) -> tuple[Subject, ...]:
    """One subject per rule block of the policy object: its `spec`, then each of its `specs`."""
    spec = obj.get("spec")
    specs = obj.get("specs")
    if spec is None and specs is None:
        raise ctx.error("spec", "a Cilium policy needs `spec` or `specs`")
    out: list[Subject] = []
    if spec is not None:
        out.append(_parse_cilium_rule(spec, namespace, path="spec", ctx=ctx))
    if specs is not None:
        if not isinstance(specs, list):
            raise ctx.error("specs", f"expected a list, got {type(specs).__name__}")
        for i, item in enumerate(specs):
            out.append(_parse_cilium_rule(item, namespace, path=f"specs[{i}]", ctx=ctx))
    return tuple(out)


def _bool_or_none(value: Any, *, path: str, ctx: ManifestContext) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise ctx.error(path, f"expected true or false, got {value!r}")


def _parse_cilium_rule(
    raw: Any, namespace: str | None, *, path: str, ctx: ManifestContext
) -> Subject:
    raw = ctx.object(raw, _CILIUM_SPEC_FIELDS, path=path)
    endpoint_sel = raw.get("endpointSelector")
    node_sel = raw.get("nodeSelector")
    subject: LabelSelector | None
    if endpoint_sel is not None and node_sel is not None:
        raise ctx.error(path, "endpointSelector and nodeSelector are mutually exclusive")
    if endpoint_sel is not None:
        subject = endpoint_selector(
            endpoint_sel, namespace, path=f"{path}.endpointSelector", ctx=ctx
        )
    elif node_sel is not None:
        cilium_selector(node_sel, path=f"{path}.nodeSelector", ctx=ctx)
        subject = None  # a host policy: selects nodes, never pods
    else:
        raise ctx.error(f"{path}.endpointSelector", "missing (or nodeSelector)")

    default_deny = raw.get("enableDefaultDeny")
    dd_ingress: bool | None = None
    dd_egress: bool | None = None
    if default_deny is not None:
        if not isinstance(default_deny, Mapping):
            raise ctx.error(f"{path}.enableDefaultDeny", "expected an object")
        dd_ingress = _bool_or_none(
            default_deny.get("ingress"), path=f"{path}.enableDefaultDeny.ingress", ctx=ctx
        )
        dd_egress = _bool_or_none(
            default_deny.get("egress"), path=f"{path}.enableDefaultDeny.egress", ctx=ctx
        )

    sections: dict[str, tuple[Rule, ...]] = {}
    requires: dict[str, list[LabelSelector]] = {"ingress": [], "egress": []}
    caveats: list[str] = []
    for field, ingress in (
        ("ingress", True),
        ("ingressDeny", True),
        ("egress", False),
        ("egressDeny", False),
    ):
        items = ctx.optional_list(raw, field, path=path)
        if items is None:
            sections[field] = ()
            continue
        rules: list[Rule] = []
        for i, item in enumerate(items):
            rule, needs = _parse_cilium_peer_rule(
                item, namespace, ingress=ingress, path=f"{path}.{field}[{i}]", ctx=ctx
            )
            rules.append(rule)
            if needs and field.endswith("Deny"):
                what = "fromRequires" if ingress else "toRequires"
                caveats.append(f"{what} in {field} (not applied to deny rules)")
            elif needs:
                requires[field].extend(needs)
        sections[field] = tuple(rules)
    has_ingress = bool(sections["ingress"] or sections["ingressDeny"])
    has_egress = bool(sections["egress"] or sections["egressDeny"])
    return Subject(
        selector=subject,
        ingress=sections["ingress"],
        ingress_deny=sections["ingressDeny"],
        egress=sections["egress"],
        egress_deny=sections["egressDeny"],
        # enableDefaultDeny unset: default deny in each direction that has rules (CRD doc).
        enforce_ingress=has_ingress if dd_ingress is None else dd_ingress,
        enforce_egress=has_egress if dd_egress is None else dd_egress,
        ingress_requires=tuple(requires["ingress"]),
        egress_requires=tuple(requires["egress"]),
        caveats=tuple(dict.fromkeys(caveats)),
        path=path,
        ingress_enforcement=_enforcement(has_ingress, dd_ingress),
        egress_enforcement=_enforcement(has_egress, dd_egress),
    )


def _enforcement(has_rules: bool, default_deny: bool | None) -> Enforcement:
    if default_deny is None:
        return Enforcement.RULES if has_rules else Enforcement.NO_RULES
    return Enforcement.DEFAULT_DENY_ON if default_deny else Enforcement.DEFAULT_DENY_OFF


def _parse_cilium_peer_rule(
    raw: Any, namespace: str | None, *, ingress: bool, path: str, ctx: ManifestContext
) -> tuple[Rule, tuple[LabelSelector, ...]]:
    """One rule of a section, and the selectors of its `fromRequires`/`toRequires`."""
    raw = ctx.object(raw, _CILIUM_INGRESS_FIELDS if ingress else _CILIUM_EGRESS_FIELDS, path=path)
    endpoints_field = "fromEndpoints" if ingress else "toEndpoints"
    entities_field = "fromEntities" if ingress else "toEntities"
    requires_field = "fromRequires" if ingress else "toRequires"
    non_pod = _INGRESS_NON_POD_PEERS if ingress else _EGRESS_NON_POD_PEERS
    peers: list[LabelSelector] = []
    endpoints = ctx.optional_list(raw, endpoints_field, path=path)
    for i, item in enumerate(endpoints or ()):
        peers.append(
            peer_selector(item, namespace, path=f"{path}.{endpoints_field}[{i}]", ctx=ctx)
        )
    pod_entity = False
    entities = ctx.optional_list(raw, entities_field, path=path)
    for i, entity in enumerate(entities or ()):
        if not isinstance(entity, str):
            raise ctx.error(f"{path}.{entities_field}[{i}]", "expected a string")
        if entity in _POD_ENTITIES:
            pod_entity = True
        elif entity not in _OTHER_ENTITIES:
            raise ctx.error(f"{path}.{entities_field}[{i}]", f"unknown entity {entity!r}")
    requires = tuple(
        peer_selector(item, namespace, path=f"{path}.{requires_field}[{i}]", ctx=ctx)
        for i, item in enumerate(ctx.optional_list(raw, requires_field, path=path) or ())
    )
    authentication = _authentication(raw.get("authentication"), path=f"{path}.authentication",
                                     ctx=ctx)  # fmt: skip
    others = [ctx.optional_list(raw, field, path=path) for field in non_pod]
    named = [value for value in (endpoints, entities, *others) if value is not None]
    present = bool(named)
    explicitly_empty = any(not value for value in named)

    ports = _parse_cilium_to_ports(raw.get("toPorts"), path=f"{path}.toPorts", ctx=ctx)
    icmps = ctx.optional_list(raw, "icmps", path=path)
    if ports is None and icmps:
        ports = ()  # ICMP only: no TCP/UDP/SCTP port
    has_l4 = ports is not None
    if explicitly_empty:
        rule = Rule(ports=ports, authentication=authentication)
    elif not present:
        # No peer named: with ports it covers every peer; the empty rule `{}` covers nothing.
        rule = Rule(any_peer=has_l4, ports=ports, authentication=authentication)
    else:
        rule = Rule(
            peers=tuple(peers), pod_entity=pod_entity, ports=ports, authentication=authentication
        )
    return rule, requires


def _authentication(raw: Any, *, path: str, ctx: ManifestContext) -> str | None:
    """A rule's `authentication.mode` when it asks for authentication (None: disabled or unset)."""
    if raw is None:
        return None
    raw = ctx.object(raw, frozenset({"mode"}), path=path)
    mode = raw.get("mode")
    if not isinstance(mode, str) or mode not in _AUTH_MODES:
        raise ctx.error(f"{path}.mode", f"unknown authentication mode {mode!r}")
    return None if mode == "disabled" else mode


def _parse_cilium_to_ports(
    raw: Any, *, path: str, ctx: ManifestContext
) -> tuple[PortMatch, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise ctx.error(path, f"expected a list, got {type(raw).__name__}")
    if not raw:
        return None
    out: list[PortMatch] = []
    for i, rule in enumerate(raw):
        where = f"{path}[{i}]"
        port_rule = ctx.object(rule, _CILIUM_PORT_RULE_FIELDS, path=where)
        l7 = _l7_kind(port_rule.get("rules"), path=f"{where}.rules", ctx=ctx)
        features = tuple(f for f in _UNMODELLED_PORT_FIELDS if port_rule.get(f) not in (None, [], {}))
        ports = port_rule.get("ports")
        if ports is None or ports == []:
            out.append(PortMatch(l7=l7, features=features))
            continue
        if not isinstance(ports, list):
            raise ctx.error(f"{where}.ports", f"expected a list, got {type(ports).__name__}")
        for j, item in enumerate(ports):
            match = parse_port(item, cilium=True, path=f"{where}.ports[{j}]", ctx=ctx)
            if l7 is not None or features:
                match = PortMatch(match.first, match.last, match.protocol, match.name, l7, features)
            out.append(match)
    return tuple(out)


def _l7_kind(raw: Any, *, path: str, ctx: ManifestContext) -> str | None:
    """The L7 parser a port rule's `rules` sends traffic through (None: no L7 rules)."""
    if raw is None:
        return None
    raw = ctx.object(raw, _L7_FIELDS, path=path)
    for kind in _L7_KINDS:
        value = raw.get(kind)
        if value is None:
            continue
        if not isinstance(value, list):
            raise ctx.error(f"{path}.{kind}", f"expected a list, got {type(value).__name__}")
        if kind == "l7":
            proto = raw.get("l7proto")
            if not isinstance(proto, str) or not proto:
                raise ctx.error(f"{path}.l7proto", "missing: `l7` rules need an `l7proto`")
            return proto
        return kind
    return None
