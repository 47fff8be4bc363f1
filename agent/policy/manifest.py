"""Parse network policy manifests (dicts from YAML/JSON) into the evaluator's `Policy` form.

Handles cilium.io/v2 CiliumNetworkPolicy and CiliumClusterwideNetworkPolicy (`spec` or `specs`)
and networking.k8s.io/v1 NetworkPolicy, applying Cilium's normalisation: a CNP's endpointSelector
is limited to its namespace, a CNP peer selector without a namespace key (and without namespace
label keys) gets the policy's namespace, a CCNP peer selector without one matches every namespace.
`fromRequires`/`toRequires` get the same defaulting. Port rules: the protocols Cilium's validation
accepts (TCP, UDP, SCTP, ANY, ICMP, ICMPv6 and the extended IP protocols VRRP, IGMP, GRE, IPIP,
IPv6, ESP, AH, which take no port or port 0); L7 rules (`rules`) mark the port as handled by
Cilium's proxy. Called by `agent.policy.reading`; raises `PolicyError` naming the policy and the
field path. `subject_selectors` reads only the selectors of what a policy applies to, leniently,
for a policy that cannot be read as a whole. Does not evaluate anything (`agent.policy.evaluator`
does).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agent.errors import PolicyError
from agent.model.network import Protocol
from agent.model.selector import LabelSelector, Requirement, SelectorOperator, parse_label_selector
from agent.parsing.numbers import NumberError, parse_int
from agent.policy.identity import (
    NAMESPACE_KEY,
    NAMESPACE_LABELS_PREFIX,
    UNMATCHABLE_PREFIX,
    selector_key,
)
from agent.policy.rule import Policy, PolicyKind, PortMatch, Rule, Subject, UnreadablePolicy

_CILIUM_GROUP = "cilium.io/"
_K8S_API = "networking.k8s.io/v1"

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

# Fields each object may hold (cilium.io/v2 and networking.k8s.io/v1 schemas). An unknown field is
# an error: a misspelt peer field would otherwise silently turn a rule into "any peer".
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
_PORT_FIELDS = frozenset({"port", "endPort", "protocol"})
_K8S_SPEC_FIELDS = frozenset({"podSelector", "ingress", "egress", "policyTypes"})
_K8S_PEER_FIELDS = frozenset({"podSelector", "namespaceSelector", "ipBlock"})

_K8S_NAMESPACE_KEY = "k8s:" + NAMESPACE_KEY
# IANA service name, as Kubernetes container port names: at most 15 of [a-z0-9-], a letter.
_PORT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,13}[A-Za-z0-9])?")

_L4_PROTOCOLS = frozenset({"TCP", "UDP", "SCTP", "ANY"})
_ICMP_PROTOCOLS = frozenset({"ICMP", "ICMPV6"})
# IP protocols without transport ports: Cilium accepts them with no port or port 0
_EXTENDED_PROTOCOLS = frozenset({"VRRP", "IGMP", "GRE", "IPIP", "IPV6", "ESP", "AH"})
_OTHER_PROTOCOLS = _ICMP_PROTOCOLS | _EXTENDED_PROTOCOLS
# L7 rule kinds of a port rule (`rules`), and the port-rule fields not modelled exactly
_L7_KINDS = ("http", "kafka", "dns", "l7")
_L7_FIELDS = frozenset({"http", "kafka", "dns", "l7proto", "l7"})
_UNMODELLED_PORT_FIELDS = ("listener", "serverNames", "terminatingTLS", "originatingTLS")
_AUTH_MODES = frozenset({"disabled", "required", "test-always-fail"})


class _Ctx:
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


def parse_policy(obj: Mapping[str, Any]) -> Policy:
    """Parse one NetworkPolicy, CiliumNetworkPolicy or CiliumClusterwideNetworkPolicy manifest."""
    if not isinstance(obj, Mapping):
        raise PolicyError(f"policy: expected an object, got {type(obj).__name__}")
    kind_raw = obj.get("kind")
    try:
        kind = PolicyKind(str(kind_raw))
    except ValueError:
        raise PolicyError(f"policy: unsupported kind {kind_raw!r}") from None
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        raise PolicyError(f"{kind.value}: metadata: missing or not an object")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise PolicyError(f"{kind.value}: metadata.name: missing or not a non-empty string")
    namespace: str | None
    if kind is PolicyKind.CILIUM_CLUSTERWIDE:
        namespace = None
        policy_id = f"{kind.value}/{name}"
    else:
        ns_raw = metadata.get("namespace", "default")
        if not isinstance(ns_raw, str) or not ns_raw:
            raise PolicyError(f"{kind.value}: metadata.namespace: not a non-empty string")
        namespace = ns_raw
        policy_id = f"{kind.value}/{namespace}/{name}"
    ctx = _Ctx(policy_id)
    api_version = obj.get("apiVersion")
    if api_version is not None:
        expected = _K8S_API if kind is PolicyKind.KUBERNETES else _CILIUM_GROUP
        if not isinstance(api_version, str) or not api_version.startswith(expected):
            raise ctx.error("apiVersion", f"unexpected {api_version!r} for {kind.value}")
    if kind is PolicyKind.KUBERNETES:
        assert namespace is not None
        subjects: tuple[Subject, ...] = (_parse_k8s_spec(obj.get("spec"), namespace, ctx=ctx),)
    else:
        subjects = _parse_cilium_specs(obj, namespace, ctx=ctx)
    return Policy(id=policy_id, kind=kind, name=name, namespace=namespace, subjects=subjects)


def policy_identity(obj: Mapping[str, Any]) -> tuple[PolicyKind, str, str | None]:
    """(kind, id, namespace) of a policy object, read leniently (`?` for a missing name).

    `obj["kind"]` must name a policy kind (the caller dispatched on it)."""
    kind = PolicyKind(str(obj.get("kind")))
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name = metadata.get("name")
    name = name if isinstance(name, str) and name else "?"
    if kind is PolicyKind.CILIUM_CLUSTERWIDE:
        return kind, f"{kind.value}/{name}", None
    ns = metadata.get("namespace", "default")
    namespace = ns if isinstance(ns, str) and ns else "default"
    return kind, f"{kind.value}/{namespace}/{name}", namespace


def subject_selectors(obj: Mapping[str, Any]) -> tuple[LabelSelector, ...]:
    """What a policy object may select, read leniently: one selector per rule block (identity
    keys, the namespace applied); a block whose selector cannot be read stands for every pod of
    the policy's namespace (every pod, for a clusterwide policy); a host policy's block
    (`nodeSelector`, no `endpointSelector`) selects no pod. Never raises."""
    kind, policy_id, namespace = policy_identity(obj)
    ctx = _Ctx(policy_id)
    everything = (
        LabelSelector() if namespace is None else _with_namespace(LabelSelector(), namespace)
    )
    if kind is PolicyKind.KUBERNETES:
        spec = obj.get("spec")
        assert namespace is not None
        if not isinstance(spec, Mapping):
            return (everything,)
        try:
            return (_with_namespace(_k8s_selector(spec.get("podSelector"), path="", ctx=ctx),
                                    namespace),)  # fmt: skip
        except PolicyError:
            return (everything,)
    blocks: list[Any] = []
    if obj.get("spec") is not None:
        blocks.append(obj.get("spec"))
    specs = obj.get("specs")
    if isinstance(specs, list):
        blocks.extend(specs)
    elif specs is not None:
        return (everything,)
    out: list[LabelSelector] = []
    for block in blocks:
        if not isinstance(block, Mapping):
            out.append(everything)
            continue
        if block.get("endpointSelector") is None and block.get("nodeSelector") is not None:
            continue  # a host policy: selects nodes, never pods
        try:
            out.append(_endpoint_selector(block.get("endpointSelector"), namespace, path="",
                                          ctx=ctx))  # fmt: skip
        except PolicyError:
            out.append(everything)
    return tuple(out) if blocks else (everything,)


def _endpoint_selector(
    raw: Any, namespace: str | None, *, path: str, ctx: _Ctx
) -> LabelSelector:
    """A Cilium endpointSelector limited to the policy's namespace (a CNP)."""
    if namespace is not None and isinstance(raw, Mapping):
        # Cilium replaces a `k8s:` namespace match in a CNP's endpointSelector with the policy's
        # own namespace (other spellings of the key stay and are ANDed).
        labels = raw.get("matchLabels")
        if isinstance(labels, Mapping) and _K8S_NAMESPACE_KEY in labels:
            raw = {
                **raw,
                "matchLabels": {k: v for k, v in labels.items() if k != _K8S_NAMESPACE_KEY},
            }
    subject = _cilium_selector(raw, path=path, ctx=ctx)
    return subject if namespace is None else _with_namespace(subject, namespace)


def unreadable(obj: Mapping[str, Any], error: PolicyError) -> UnreadablePolicy:
    """The record of a policy object `parse_policy` refused with `error`."""
    kind, policy_id, namespace = policy_identity(obj)
    message = str(error)
    for prefix in (f"{policy_id}: ", f"{kind.value}: ", "policy: "):
        if message.startswith(prefix):
            message = message[len(prefix):]
            break
    field, sep, problem = message.partition(": ")
    if not sep or " " in field:
        field, problem = "", message
    return UnreadablePolicy(
        id=policy_id,
        kind=kind,
        namespace=namespace,
        field=field,
        problem=problem,
        selects=subject_selectors(obj),
    )


# ---------------------------------------------------------------------------------------------
# Cilium


def _parse_cilium_specs(
    obj: Mapping[str, Any], namespace: str | None, *, ctx: _Ctx
) -> tuple[Subject, ...]:
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


def _cilium_selector(raw: Any, *, path: str, ctx: _Ctx) -> LabelSelector:
    """Parse a Cilium selector with its keys rewritten onto identity keys."""
    try:
        parsed = parse_label_selector(raw, where=path)
    except PolicyError as exc:
        raise PolicyError(f"{ctx.policy_id}: {exc}") from None
    return LabelSelector(
        match_labels=tuple(sorted((selector_key(k), v) for k, v in parsed.match_labels)),
        match_expressions=tuple(
            Requirement(key=selector_key(r.key), operator=r.operator, values=r.values)
            for r in parsed.match_expressions
        ),
    )


def _with_namespace(selector: LabelSelector, namespace: str) -> LabelSelector:
    """AND `selector` with "in `namespace`" (a second, different namespace pair matches nothing)."""
    pairs = set(selector.match_labels)
    pairs.add((NAMESPACE_KEY, namespace))
    return LabelSelector(
        match_labels=tuple(sorted(pairs)), match_expressions=selector.match_expressions
    )


def _peer_selector(raw: Any, namespace: str | None, *, path: str, ctx: _Ctx) -> LabelSelector:
    """A fromEndpoints/toEndpoints selector with Cilium's namespace defaulting applied."""
    selector = _cilium_selector(raw, path=path, ctx=ctx)
    keys = selector.keys()
    if any(k.startswith(UNMATCHABLE_PREFIX + "reserved:") for k in keys):
        return selector
    if NAMESPACE_KEY in keys:  # `k8s:`, `any:` or unprefixed namespace key
        return selector
    if namespace is None:
        return LabelSelector(
            match_labels=selector.match_labels,
            match_expressions=(
                *selector.match_expressions,
                Requirement(key=NAMESPACE_KEY, operator=SelectorOperator.EXISTS),
            ),
        )
    if any(k.startswith(NAMESPACE_LABELS_PREFIX) for k in keys):
        return selector
    return _with_namespace(selector, namespace)


def _bool_or_none(value: Any, *, path: str, ctx: _Ctx) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise ctx.error(path, f"expected true or false, got {value!r}")


def _parse_cilium_rule(raw: Any, namespace: str | None, *, path: str, ctx: _Ctx) -> Subject:
    raw = ctx.object(raw, _CILIUM_SPEC_FIELDS, path=path)
    endpoint_sel = raw.get("endpointSelector")
    node_sel = raw.get("nodeSelector")
    subject: LabelSelector | None
    if endpoint_sel is not None and node_sel is not None:
        raise ctx.error(path, "endpointSelector and nodeSelector are mutually exclusive")
    if endpoint_sel is not None:
        subject = _endpoint_selector(
            endpoint_sel, namespace, path=f"{path}.endpointSelector", ctx=ctx
        )
    elif node_sel is not None:
        _cilium_selector(node_sel, path=f"{path}.nodeSelector", ctx=ctx)
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
    )


def _parse_cilium_peer_rule(
    raw: Any, namespace: str | None, *, ingress: bool, path: str, ctx: _Ctx
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
            _peer_selector(item, namespace, path=f"{path}.{endpoints_field}[{i}]", ctx=ctx)
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
        _peer_selector(item, namespace, path=f"{path}.{requires_field}[{i}]", ctx=ctx)
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


def _authentication(raw: Any, *, path: str, ctx: _Ctx) -> str | None:
    """A rule's `authentication.mode` when it asks for authentication (None: disabled or unset)."""
    if raw is None:
        return None
    raw = ctx.object(raw, frozenset({"mode"}), path=path)
    mode = raw.get("mode")
    if not isinstance(mode, str) or mode not in _AUTH_MODES:
        raise ctx.error(f"{path}.mode", f"unknown authentication mode {mode!r}")
    return None if mode == "disabled" else mode


def _parse_cilium_to_ports(raw: Any, *, path: str, ctx: _Ctx) -> tuple[PortMatch, ...] | None:
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
            match = _parse_port(item, cilium=True, path=f"{where}.ports[{j}]", ctx=ctx)
            if l7 is not None or features:
                match = PortMatch(match.first, match.last, match.protocol, match.name, l7, features)
            out.append(match)
    return tuple(out)


def _l7_kind(raw: Any, *, path: str, ctx: _Ctx) -> str | None:
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


def _port_number(text: str, path: str, ctx: _Ctx) -> int:
    """A port written as text ("80"): ASCII digits only (the caller checks the port range)."""
    try:
        return parse_int(text, field=path, minimum=0)
    except NumberError as exc:
        raise ctx.error(path, str(exc).removeprefix(f"{path}: ")) from None


def _parse_port(raw: Any, *, cilium: bool, path: str, ctx: _Ctx) -> PortMatch:
    """One port entry: `{port, endPort, protocol}` (Cilium: protocol default ANY; k8s: TCP)."""
    raw = ctx.object(raw, _PORT_FIELDS, path=path)
    proto_raw = raw.get("protocol")
    if proto_raw is None or proto_raw == "":
        protocol = Protocol.ANY.value if cilium else Protocol.TCP.value
    elif isinstance(proto_raw, str) and proto_raw.upper() in (_L4_PROTOCOLS | _OTHER_PROTOCOLS):
        protocol = proto_raw.upper()
        if not cilium and protocol not in ("TCP", "UDP", "SCTP"):
            raise ctx.error(f"{path}.protocol", f"unknown protocol {proto_raw!r}")
    else:
        raise ctx.error(f"{path}.protocol", f"unknown protocol {proto_raw!r}")

    port_raw = raw.get("port")
    end_raw = raw.get("endPort")
    number: int | None = None
    name: str | None = None
    if port_raw is None or port_raw == "":
        if cilium and protocol in _L4_PROTOCOLS | _ICMP_PROTOCOLS:  # as upstream validation
            raise ctx.error(f"{path}.port", 'missing (use "0" for every port)')
        number = None
    elif isinstance(port_raw, bool):
        raise ctx.error(f"{path}.port", f"expected a port number or name, got {port_raw!r}")
    elif isinstance(port_raw, int):
        number = port_raw
    elif isinstance(port_raw, str):
        if port_raw.isascii() and port_raw.isdigit():
            number = _port_number(port_raw, f"{path}.port", ctx)
        elif _PORT_NAME.fullmatch(port_raw) and any(c.isalpha() for c in port_raw):
            # Cilium lower-cases port names on both sides (policy and container ports).
            name = port_raw.lower()
        else:
            raise ctx.error(f"{path}.port", f"invalid port name {port_raw!r}")
    else:
        raise ctx.error(f"{path}.port", f"expected a port number or name, got {port_raw!r}")
    if number is not None and not 0 <= number <= 65535:
        raise ctx.error(f"{path}.port", f"port {number} out of range 0-65535")
    if protocol in _EXTENDED_PROTOCOLS and (name is not None or number):
        raise ctx.error(f"{path}.port", f"{protocol} has no ports: the port must be empty or 0")

    end: int | None = None
    if end_raw is not None:
        if isinstance(end_raw, bool) or not isinstance(end_raw, int | str):
            raise ctx.error(f"{path}.endPort", f"expected a port number, got {end_raw!r}")
        if isinstance(end_raw, str):
            end_raw = _port_number(end_raw, f"{path}.endPort", ctx)
        end = end_raw
        if name is not None:
            raise ctx.error(f"{path}.endPort", "not allowed with a named port")
        if not number:
            raise ctx.error(f"{path}.endPort", "needs a numeric port")
        if not number <= end <= 65535:
            raise ctx.error(f"{path}.endPort", f"{end} must be between port {number} and 65535")

    if name is not None:
        return PortMatch(protocol=protocol, name=name)
    if not number:  # absent or 0: every port
        return PortMatch(protocol=protocol)
    return PortMatch(first=number, last=end if end is not None else number, protocol=protocol)


# ---------------------------------------------------------------------------------------------
# Kubernetes NetworkPolicy


def _k8s_selector(raw: Any, *, path: str, ctx: _Ctx) -> LabelSelector:
    try:
        return parse_label_selector(raw, where=path)
    except PolicyError as exc:
        raise PolicyError(f"{ctx.policy_id}: {exc}") from None


def _prefixed(selector: LabelSelector, prefix: str) -> LabelSelector:
    return LabelSelector(
        match_labels=tuple((prefix + k, v) for k, v in selector.match_labels),
        match_expressions=tuple(
            Requirement(key=prefix + r.key, operator=r.operator, values=r.values)
            for r in selector.match_expressions
        ),
    )


def _and(a: LabelSelector, b: LabelSelector) -> LabelSelector:
    return LabelSelector(
        match_labels=tuple(sorted(set(a.match_labels) | set(b.match_labels))),
        match_expressions=a.match_expressions + b.match_expressions,
    )


def _parse_k8s_spec(raw: Any, namespace: str, *, ctx: _Ctx) -> Subject:
    if not isinstance(raw, Mapping):
        raise ctx.error("spec", "missing or not an object")
    ctx.check_fields(raw, _K8S_SPEC_FIELDS, path="spec")
    if "podSelector" not in raw:
        raise ctx.error("spec.podSelector", "missing (use {} to select every pod)")
    pod_selector = _k8s_selector(raw.get("podSelector"), path="spec.podSelector", ctx=ctx)
    subject = _with_namespace(pod_selector, namespace)

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
    )


def _parse_k8s_rule(raw: Any, namespace: str, *, peer_field: str, path: str, ctx: _Ctx) -> Rule:
    if raw is None:
        raw = {}
    raw = ctx.object(raw, frozenset({peer_field, "ports"}), path=path)
    ports_raw = ctx.optional_list(raw, "ports", path=path)
    ports: tuple[PortMatch, ...] | None = None
    if ports_raw:
        ports = tuple(
            _parse_port(item, cilium=False, path=f"{path}.ports[{i}]", ctx=ctx)
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
            _k8s_selector(peer.get("podSelector"), path=f"{where}.podSelector", ctx=ctx)
            if has_pod
            else LabelSelector()
        )
        if has_ns:
            ns_sel = _k8s_selector(
                peer.get("namespaceSelector"), path=f"{where}.namespaceSelector", ctx=ctx
            )
            peers.append(_and(pod_sel, _prefixed(ns_sel, NAMESPACE_LABELS_PREFIX)))
        else:
            peers.append(_with_namespace(pod_sel, namespace))
    return Rule(peers=tuple(peers), any_peer=False, ports=ports)
