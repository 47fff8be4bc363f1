"""PolicySet.check: one table row per rule of Cilium's and Kubernetes NetworkPolicy's semantics
(deny beats allow; a selected direction is default deny; selectors, entities, ports, namespaces)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from agent.model.network import DenyReason, Endpoint, FlowVerdict, Hop, PortRange, Protocol
from agent.policy import PolicySet, parse_policy
from tests.policy.builders import ccnp, cnp, ep, knp

EG, IN = Hop.EGRESS, Hop.INGRESS
DD, DR, L7 = DenyReason.DEFAULT_DENY, DenyReason.DENY_RULE, DenyReason.L7_PROXY
ALLOW = FlowVerdict(allowed=True)
P23456 = PortRange.single(23456)
HIGH = PortRange(1024, 65535)

MASTER = ep({"role": "master", "zone": "a"}, ports={"pytorchjob-port": 23456})
WORKER = ep({"role": "worker", "zone": "a"}, ports={"pytorchjob-port": 23456})
WORKER_B = ep({"role": "worker", "zone": "b"})
OTHER_NS = ep({"role": "worker", "zone": "a"}, ns="web", ns_labels={"team": "web"})


def deny(hop: Hop, reason: DenyReason, *ids: str) -> FlowVerdict:
    return FlowVerdict(allowed=False, hop=hop, reason=reason, policies=tuple(sorted(ids)))


@dataclass(frozen=True)
class Case:
    id: str
    policies: list[dict[str, Any]]
    src: Endpoint
    dst: Endpoint
    ports: PortRange
    expect: FlowVerdict


SEL_MASTER = {"matchLabels": {"role": "master"}}
FROM_WORKERS = {"fromEndpoints": [{"matchLabels": {"role": "worker"}}]}
CNP_M = "CiliumNetworkPolicy/ml/m"

CASES = [
    # -- enforcement: default deny only once a direction is selected ----------------------------
    Case("no policy allows", [], WORKER, MASTER, P23456, ALLOW),
    Case(
        "ingress allow rule lets its peer in",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS]})],
        WORKER, MASTER, P23456, ALLOW,
    ),
    Case(
        "ingress rules put the selected endpoint in default deny",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS]})],
        ep({"role": "ps"}), MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "ingress rules leave egress of the selected endpoint open",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS]})],
        MASTER, ep({"role": "ps"}), P23456, ALLOW,
    ),
    Case(
        "an endpoint no policy selects is open",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS]})],
        MASTER, WORKER, P23456, ALLOW,
    ),
    Case(
        "deny-only section still enforces default deny (Cilium)",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingressDeny": [{"fromEndpoints": [{"matchLabels": {"zone": "b"}}]}]})],
        WORKER, MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "egress is checked before ingress",
        [
            cnp("w", {"endpointSelector": {"matchLabels": {"role": "worker"}}, "egress": [{"toEndpoints": [{"matchLabels": {"role": "none"}}]}]}),
            cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchLabels": {"role": "none"}}]}]}),
        ],
        WORKER, MASTER, P23456, deny(EG, DD, "CiliumNetworkPolicy/ml/w"),
    ),
    # -- enableDefaultDeny ----------------------------------------------------------------------
    Case(
        "enableDefaultDeny ingress false: selected endpoint stays open",
        [cnp("m", {"endpointSelector": SEL_MASTER, "enableDefaultDeny": {"ingress": False}, "ingress": [FROM_WORKERS]})],
        ep({"role": "ps"}), MASTER, P23456, ALLOW,
    ),
    Case(
        "non-enforcing policy's allow still adds to an enforcing one",
        [
            cnp("a", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS]}),
            cnp("b", {"endpointSelector": SEL_MASTER, "enableDefaultDeny": {"ingress": False}, "ingress": [{"fromEndpoints": [{"matchLabels": {"role": "ps"}}]}]}),
        ],
        ep({"role": "ps"}), MASTER, P23456, ALLOW,
    ),
    Case(
        "default deny names only the enforcing policies",
        [
            cnp("a", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS]}),
            cnp("b", {"endpointSelector": SEL_MASTER, "enableDefaultDeny": {"ingress": False}, "ingress": [FROM_WORKERS]}),
            ccnp("c", {"endpointSelector": {}, "ingress": [FROM_WORKERS]}),
        ],
        ep({"role": "ps"}), MASTER, P23456, deny(IN, DD, "CiliumNetworkPolicy/ml/a", "CiliumClusterwideNetworkPolicy/c"),
    ),
    Case(
        "enableDefaultDeny egress true enforces egress without egress rules",
        [cnp("m", {"endpointSelector": SEL_MASTER, "enableDefaultDeny": {"egress": True}, "ingress": [FROM_WORKERS]})],
        MASTER, WORKER, P23456, deny(EG, DD, CNP_M),
    ),
    Case(
        "enableDefaultDeny egress false does not relax ingress",
        [cnp("m", {"endpointSelector": SEL_MASTER, "enableDefaultDeny": {"egress": False}, "ingress": [FROM_WORKERS]})],
        ep({"role": "ps"}), MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    # -- deny beats allow, across kinds -------------------------------------------------------
    Case(
        "CNP deny beats CNP allow in the same policy",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS], "ingressDeny": [{"fromEndpoints": [{"matchLabels": {"zone": "b"}}]}]})],
        WORKER_B, MASTER, P23456, deny(IN, DR, CNP_M),
    ),
    Case(
        "CCNP deny beats NetworkPolicy allow-all",
        [
            knp("open", {"podSelector": {}, "ingress": [{}]}),
            ccnp("zone", {"endpointSelector": {}, "ingressDeny": [{"fromEndpoints": [{"matchLabels": {"zone": "b"}}]}]}),
        ],
        WORKER_B, MASTER, P23456, deny(IN, DR, "CiliumClusterwideNetworkPolicy/zone"),
    ),
    Case(
        "CNP egress deny beats CCNP egress allow to the cluster",
        [
            ccnp("all", {"endpointSelector": {}, "egress": [{"toEntities": ["cluster"]}]}),
            cnp("nob", {"endpointSelector": {}, "egressDeny": [{"toEndpoints": [{"matchLabels": {"zone": "b"}}]}]}),
        ],
        WORKER, WORKER_B, P23456, deny(EG, DR, "CiliumNetworkPolicy/ml/nob"),
    ),
    Case(
        "deny rule names every policy holding a matching deny, not the others",
        [
            cnp("d1", {"endpointSelector": {}, "ingressDeny": [{"fromEndpoints": [{"matchLabels": {"zone": "b"}}]}]}),
            ccnp("d2", {"endpointSelector": {}, "ingressDeny": [{"fromEndpoints": [{"matchLabels": {"role": "worker"}}]}]}),
            cnp("d3", {"endpointSelector": {}, "ingressDeny": [{"fromEndpoints": [{"matchLabels": {"zone": "c"}}]}]}),
        ],
        WORKER_B, MASTER, P23456, deny(IN, DR, "CiliumNetworkPolicy/ml/d1", "CiliumClusterwideNetworkPolicy/d2"),
    ),
    Case(
        "deny rule on other ports does not deny",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingressDeny": [{"toPorts": [{"ports": [{"port": "22"}]}]}], "ingress": [{"fromEntities": ["cluster"]}]})],
        WORKER, MASTER, P23456, ALLOW,
    ),
    Case(
        "deny rule hitting one port of a range denies the range",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingressDeny": [{"toPorts": [{"ports": [{"port": "5000"}]}]}], "ingress": [{"fromEntities": ["cluster"]}]})],
        WORKER, MASTER, HIGH, deny(IN, DR, CNP_M),
    ),
    # -- empty rules and empty lists (Cilium) vs NetworkPolicy `ingress: [{}]` ------------------
    Case(
        "CNP ingress [{}] is default deny",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{}]})],
        WORKER, MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "CNP egress [{}] is default deny",
        [cnp("m", {"endpointSelector": SEL_MASTER, "egress": [{}]})],
        MASTER, WORKER, P23456, deny(EG, DD, CNP_M),
    ),
    Case(
        "CNP fromEndpoints [] matches nothing even with toPorts",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [], "toPorts": [{"ports": [{"port": "23456"}]}]}]})],
        WORKER, MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "NetworkPolicy ingress [{}] allows all",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{}]})],
        OTHER_NS, MASTER, P23456, ALLOW,
    ),
    Case(
        "NetworkPolicy with no ingress rules denies all ingress",
        [knp("m", {"podSelector": SEL_MASTER})],
        WORKER, MASTER, P23456, deny(IN, DD, "NetworkPolicy/ml/m"),
    ),
    Case(
        "nil peers with toPorts match any peer on those ports",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"toPorts": [{"ports": [{"port": "23456", "protocol": "TCP"}]}]}]})],
        OTHER_NS, MASTER, P23456, ALLOW,
    ),
    Case(
        "nil peers with toPorts do not open other ports",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"toPorts": [{"ports": [{"port": "23456"}]}]}]})],
        WORKER, MASTER, PortRange.single(22), deny(IN, DD, CNP_M),
    ),
    # -- namespace defaulting: CNP vs CCNP --------------------------------------------------------
    Case(
        "CNP peer selector without namespace means the policy's namespace",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS]})],
        OTHER_NS, MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "CNP fromEndpoints [{}] means every pod of its namespace",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{}]}]})],
        ep({"role": "anything"}), MASTER, P23456, ALLOW,
    ),
    Case(
        "CNP fromEndpoints [{}] excludes other namespaces",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{}]}]})],
        OTHER_NS, MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "CNP peer with explicit k8s: namespace key reaches that namespace",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "web"}}]}]})],
        OTHER_NS, MASTER, P23456, ALLOW,
    ),
    Case(
        "CNP peer with explicit namespace key excludes its own namespace",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchLabels": {"io.kubernetes.pod.namespace": "web"}}]}]})],
        WORKER, MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "CNP peer on namespace labels is not limited to the policy namespace (upstream)",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchLabels": {"k8s:io.cilium.k8s.namespace.labels.team": "web"}}]}]})],
        OTHER_NS, MASTER, P23456, ALLOW,
    ),
    Case(
        "CCNP peer without namespace key matches every namespace",
        [ccnp("m", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS]})],
        OTHER_NS, MASTER, P23456, ALLOW,
    ),
    Case(
        "CNP endpointSelector is limited to its namespace",
        [cnp("m", {"endpointSelector": {"matchLabels": {"role": "worker"}}, "ingress": [{}]})],
        MASTER, OTHER_NS, P23456, ALLOW,
    ),
    Case(
        "CNP endpointSelector namespace match is overridden by the policy namespace",
        [cnp("m", {"endpointSelector": {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "web"}}, "ingress": [{}]})],
        MASTER, OTHER_NS, P23456, ALLOW,
    ),
    Case(
        "CNP endpointSelector k8s: namespace match is replaced: own namespace selected",
        [cnp("m", {"endpointSelector": {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "web"}}, "ingress": [{}]})],
        MASTER, WORKER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "CNP endpointSelector with an unprefixed foreign namespace selects nothing",
        [cnp("m", {"endpointSelector": {"matchLabels": {"io.kubernetes.pod.namespace": "web"}}, "ingress": [{}]})],
        MASTER, WORKER, P23456, ALLOW,
    ),
    Case(
        "CCNP endpointSelector selects across namespaces",
        [ccnp("m", {"endpointSelector": {"matchLabels": {"role": "worker"}}, "ingress": [{}]})],
        MASTER, OTHER_NS, P23456, deny(IN, DD, "CiliumClusterwideNetworkPolicy/m"),
    ),
    Case(
        "nodeSelector (host policy) selects no pod",
        [ccnp("host", {"nodeSelector": {}, "ingress": [{}]})],
        WORKER, MASTER, P23456, ALLOW,
    ),
    # -- selector operators and absent labels ----------------------------------------------------
    Case(
        "NotIn matches a pod without the label",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]}]}]})],
        WORKER, MASTER, P23456, ALLOW,
    ),
    Case(
        "DoesNotExist matches a pod without the label",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}]}]})],
        WORKER, MASTER, P23456, ALLOW,
    ),
    Case(
        "In does not match a pod without the label",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}]}]}]})],
        WORKER, MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "Exists on an endpointSelector selects pods carrying the key",
        [cnp("m", {"endpointSelector": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, "ingress": [{}]})],
        MASTER, WORKER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "NotIn endpointSelector selects a pod with another value",
        [cnp("m", {"endpointSelector": {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}, "ingress": [{}]})],
        WORKER_B, WORKER, P23456, deny(IN, DD, CNP_M),
    ),
    # -- source prefixes and identity labels ------------------------------------------------------
    Case(
        "k8s: prefix matches pod labels",
        [cnp("m", {"endpointSelector": {"matchLabels": {"k8s:role": "master"}}, "ingress": [{"fromEndpoints": [{"matchLabels": {"any:role": "worker"}}]}]})],
        ep({"role": "ps"}), MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "any: prefix matches pod labels",
        [cnp("m", {"endpointSelector": {"matchLabels": {"k8s:role": "master"}}, "ingress": [{"fromEndpoints": [{"matchLabels": {"any:role": "worker"}}]}]})],
        WORKER, MASTER, P23456, ALLOW,
    ),
    Case(
        "reserved: selector matches no pod",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchLabels": {"reserved:host": ""}}]}]})],
        WORKER, MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "service account identity label",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchLabels": {"io.cilium.k8s.policy.serviceaccount": "trainer"}}]}]})],
        ep({"role": "worker"}, sa="trainer"), MASTER, P23456, ALLOW,
    ),
    Case(
        "service account identity label, other account",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchLabels": {"io.cilium.k8s.policy.serviceaccount": "trainer"}}]}]})],
        WORKER, MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "namespace label identity label (CCNP, In)",
        [ccnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchExpressions": [{"key": "k8s:io.cilium.k8s.namespace.labels.team", "operator": "In", "values": ["web", "ops"]}]}]}]})],
        OTHER_NS, MASTER, P23456, ALLOW,
    ),
    Case(
        "kubernetes.io/metadata.name namespace label is always present",
        [ccnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchLabels": {"io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name": "web"}}]}]})],
        OTHER_NS, MASTER, P23456, ALLOW,
    ),
    Case(
        "topology.kubernetes.io pod labels are not identity labels (Cilium PR 43725)",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchLabels": {"topology.kubernetes.io/zone": "a"}}]}]})],
        ep({"role": "worker", "topology.kubernetes.io/zone": "a"}), MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "app.kubernetes.io pod labels are identity labels",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchLabels": {"app.kubernetes.io/name": "t"}}]}]})],
        ep({"app.kubernetes.io/name": "t"}), MASTER, P23456, ALLOW,
    ),
    # -- entities ---------------------------------------------------------------------------------
    *[
        Case(
            f"entity {entity} matches every pod",
            [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEntities": [entity]}]})],
            OTHER_NS, MASTER, P23456, ALLOW,
        )
        for entity in ("cluster", "all")
    ],
    *[
        Case(
            f"entity {entity} matches no pod",
            [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromEntities": [entity]}]})],
            WORKER, MASTER, P23456, deny(IN, DD, CNP_M),
        )
        for entity in ("world", "host", "remote-node", "kube-apiserver", "health", "init")
    ],
    Case(
        "CIDR peers never match pods",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"fromCIDR": ["0.0.0.0/0"]}, {"fromCIDRSet": [{"cidr": "10.0.0.0/8"}]}]})],
        WORKER, MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "toCIDR / toFQDNs / toServices never match pods",
        [cnp("m", {"endpointSelector": SEL_MASTER, "egress": [{"toCIDR": ["10.0.0.0/8"]}, {"toFQDNs": [{"matchName": "x"}]}, {"toServices": [{"k8sService": {"serviceName": "s", "namespace": "ml"}}]}]})],
        MASTER, WORKER, P23456, deny(EG, DD, CNP_M),
    ),
    # -- ports: ranges, named ports, protocols ----------------------------------------------------
    Case(
        "endPort range covering the whole flow range allows",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "1024", "endPort": 65535, "protocol": "TCP"}]}]}]})],
        WORKER, MASTER, HIGH, ALLOW,
    ),
    Case(
        "a range only partly allowed is denied",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "1024", "endPort": 30000}]}]}]})],
        WORKER, MASTER, HIGH, deny(IN, DD, CNP_M),
    ),
    Case(
        "a range covered by two rules together is allowed",
        [
            cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "1024", "endPort": 30000}]}]}]}),
            knp("n", {"podSelector": SEL_MASTER, "ingress": [{"ports": [{"port": 30001, "endPort": 65535}]}]}),
        ],
        WORKER, MASTER, HIGH, ALLOW,
    ),
    Case(
        "single port inside an endPort range",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "20000", "endPort": 30000}]}]}]})],
        WORKER, MASTER, P23456, ALLOW,
    ),
    Case(
        "named port resolved against the destination",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "pytorchjob-port", "protocol": "TCP"}]}]}]})],
        WORKER, MASTER, P23456, ALLOW,
    ),
    Case(
        "Cilium named ports compare case-insensitively",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "PyTorchJob-Port"}]}]}]})],
        WORKER, MASTER, P23456, ALLOW,
    ),
    Case(
        "container port names compare case-insensitively too",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{"ports": [{"port": "metrics"}]}]})],
        WORKER, ep({"role": "master"}, ports={"Metrics": 23456}), P23456, ALLOW,
    ),
    Case(
        "named port the destination lacks matches nothing",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "pytorchjob-port"}]}]}]})],
        WORKER, ep({"role": "master"}), P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "named port with another number does not match",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "pytorchjob-port"}]}]}]})],
        WORKER, ep({"role": "master"}, ports={"pytorchjob-port": 29500}), P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "egress named port resolved against the destination",
        [cnp("w", {"endpointSelector": {"matchLabels": {"role": "worker"}}, "egress": [{"toEndpoints": [SEL_MASTER], "toPorts": [{"ports": [{"port": "pytorchjob-port"}]}]}]})],
        WORKER, MASTER, P23456, ALLOW,
    ),
    Case(
        "NetworkPolicy named port",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{"ports": [{"port": "pytorchjob-port"}]}]})],
        WORKER, MASTER, P23456, ALLOW,
    ),
    Case(
        "TCP rule does not allow UDP",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "23456", "protocol": "TCP"}]}]}]})],
        WORKER, MASTER, PortRange.single(23456, Protocol.UDP), deny(IN, DD, CNP_M),
    ),
    Case(
        "protocol ANY allows UDP",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "23456", "protocol": "ANY"}]}]}]})],
        WORKER, MASTER, PortRange.single(23456, Protocol.UDP), ALLOW,
    ),
    Case(
        "empty Cilium protocol means ANY",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "23456"}]}]}]})],
        WORKER, MASTER, PortRange.single(23456, Protocol.SCTP), ALLOW,
    ),
    Case(
        "NetworkPolicy port without protocol means TCP only",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{"ports": [{"port": 23456}]}]})],
        WORKER, MASTER, PortRange.single(23456, Protocol.UDP), deny(IN, DD, "NetworkPolicy/ml/m"),
    ),
    Case(
        "a flow of protocol ANY needs every protocol allowed",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "23456", "protocol": "TCP"}]}]}]})],
        WORKER, MASTER, PortRange.single(23456, Protocol.ANY), deny(IN, DD, CNP_M),
    ),
    Case(
        "port 0 means every port",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "0", "protocol": "TCP"}]}]}]})],
        WORKER, MASTER, HIGH, ALLOW,
    ),
    Case(
        "icmps-only rule with no peer allows no TCP port",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{"icmps": [{"fields": [{"type": 8}]}]}]})],
        WORKER, MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "L7 rules on a port send its traffic through the proxy: the non-HTTP flow fails",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [{**FROM_WORKERS, "toPorts": [{"ports": [{"port": "23456", "protocol": "TCP"}], "rules": {"http": [{"method": "GET"}]}}]}]})],
        WORKER, MASTER, P23456, deny(IN, L7, CNP_M),
    ),
    # -- specs ------------------------------------------------------------------------------------
    Case(
        "specs: every spec applies, attributed to the policy",
        [cnp("m", specs=[
            {"endpointSelector": {"matchLabels": {"role": "worker"}}, "egress": [{"toEntities": ["cluster"]}]},
            {"endpointSelector": SEL_MASTER, "ingress": [{"fromEndpoints": [{"matchLabels": {"role": "ps"}}]}]},
        ])],
        WORKER, MASTER, P23456, deny(IN, DD, CNP_M),
    ),
    Case(
        "spec and specs together",
        [cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS]}, specs=[
            {"endpointSelector": SEL_MASTER, "ingressDeny": [{"fromEndpoints": [{"matchLabels": {"zone": "b"}}]}]},
        ])],
        WORKER_B, MASTER, P23456, deny(IN, DR, CNP_M),
    ),
    # -- Kubernetes NetworkPolicy peers -----------------------------------------------------------
    Case(
        "NP podSelector alone means the policy namespace",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "worker"}}}]}]})],
        OTHER_NS, MASTER, P23456, deny(IN, DD, "NetworkPolicy/ml/m"),
    ),
    Case(
        "NP podSelector alone admits its namespace",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "worker"}}}]}]})],
        WORKER, MASTER, P23456, ALLOW,
    ),
    Case(
        "NP namespaceSelector alone admits every pod of matching namespaces",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "web"}}}]}]})],
        ep({"role": "anything"}, ns="web", ns_labels={"team": "web"}), MASTER, P23456, ALLOW,
    ),
    Case(
        "NP namespaceSelector alone excludes other namespaces",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "web"}}}]}]})],
        WORKER, MASTER, P23456, deny(IN, DD, "NetworkPolicy/ml/m"),
    ),
    Case(
        "NP namespaceSelector {} admits every namespace",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{"from": [{"namespaceSelector": {}}]}]})],
        OTHER_NS, MASTER, P23456, ALLOW,
    ),
    Case(
        "NP namespaceSelector AND podSelector: both must hold",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "web"}}, "podSelector": {"matchLabels": {"role": "ps"}}}]}]})],
        OTHER_NS, MASTER, P23456, deny(IN, DD, "NetworkPolicy/ml/m"),
    ),
    Case(
        "NP namespaceSelector AND podSelector: match",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "web"}}, "podSelector": {"matchLabels": {"role": "worker"}}}]}]})],
        OTHER_NS, MASTER, P23456, ALLOW,
    ),
    Case(
        "NP namespaceSelector on kubernetes.io/metadata.name",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "web"}}}]}]})],
        OTHER_NS, MASTER, P23456, ALLOW,
    ),
    Case(
        "NP ipBlock matches no pod",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]})],
        WORKER, MASTER, P23456, deny(IN, DD, "NetworkPolicy/ml/m"),
    ),
    Case(
        "NP policyTypes default: egress rules make Egress enforced",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{}], "egress": [{"to": [{"podSelector": {"matchLabels": {"role": "ps"}}}]}]})],
        MASTER, WORKER, P23456, deny(EG, DD, "NetworkPolicy/ml/m"),
    ),
    Case(
        "NP policyTypes default: no egress rules leaves egress open",
        [knp("m", {"podSelector": SEL_MASTER, "ingress": [{}]})],
        MASTER, WORKER, P23456, ALLOW,
    ),
    Case(
        "NP policyTypes [Egress] with no rules denies all egress",
        [knp("m", {"podSelector": SEL_MASTER, "policyTypes": ["Egress"]})],
        MASTER, WORKER, P23456, deny(EG, DD, "NetworkPolicy/ml/m"),
    ),
    Case(
        "NP policyTypes [Egress] leaves ingress open even with ingress rules",
        [knp("m", {"podSelector": SEL_MASTER, "policyTypes": ["Egress"], "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "ps"}}}]}], "egress": [{}]})],
        WORKER, MASTER, P23456, ALLOW,
    ),
    Case(
        "NP podSelector is limited to its namespace",
        [knp("m", {"podSelector": {}, "ingress": []})],
        MASTER, OTHER_NS, P23456, ALLOW,
    ),
    Case(
        "NP and CNP allows add up",
        [
            knp("n", {"podSelector": SEL_MASTER, "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "ps"}}}]}]}),
            cnp("c", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS]}),
        ],
        WORKER, MASTER, P23456, ALLOW,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_check(case: Case) -> None:
    policies = PolicySet(parse_policy(p) for p in case.policies)
    assert policies.check(case.src, case.dst, case.ports) == case.expect
    # A second call comes from the cache and must agree.
    assert policies.check(case.src, case.dst, case.ports) == case.expect


def test_case_ids_are_unique() -> None:
    assert len({c.id for c in CASES}) == len(CASES)


def test_pods_differing_in_unread_labels_share_a_key() -> None:
    policies = PolicySet([parse_policy(cnp("m", {"endpointSelector": SEL_MASTER, "ingress": [FROM_WORKERS]}))])
    w0 = ep({"role": "worker", "training.kubeflow.org/replica-index": "0"})
    w1 = ep({"role": "worker", "training.kubeflow.org/replica-index": "1"})
    ps = ep({"role": "ps"})
    assert policies.equivalence_key(w0) == policies.equivalence_key(w1)
    assert policies.equivalence_key(w0) != policies.equivalence_key(ps)
    assert policies.equivalence_key(w0) != policies.equivalence_key(ep({"role": "worker"}, ns="web"))


def test_pods_differing_in_read_labels_or_named_ports_get_different_keys() -> None:
    policies = PolicySet(
        [
            parse_policy(
                cnp(
                    "m",
                    {
                        "endpointSelector": {"matchLabels": {"training.kubeflow.org/replica-index": "0"}},
                        "ingress": [{"toPorts": [{"ports": [{"port": "pytorchjob-port"}]}]}],
                    },
                )
            )
        ]
    )
    w0 = ep({"training.kubeflow.org/replica-index": "0"}, ports={"pytorchjob-port": 1})
    w1 = ep({"training.kubeflow.org/replica-index": "1"}, ports={"pytorchjob-port": 1})
    w0_other_port = ep({"training.kubeflow.org/replica-index": "0"}, ports={"pytorchjob-port": 2})
    w0_unread_port = ep({"training.kubeflow.org/replica-index": "0"}, ports={"pytorchjob-port": 1, "metrics": 9})
    assert policies.equivalence_key(w0) != policies.equivalence_key(w1)
    assert policies.equivalence_key(w0) != policies.equivalence_key(w0_other_port)
    assert policies.equivalence_key(w0) == policies.equivalence_key(w0_unread_port)


def test_pod_label_keys_lists_what_selectors_read() -> None:
    policies = PolicySet(
        [
            parse_policy(cnp("m", {"endpointSelector": {"matchLabels": {"k8s:role": "master"}}, "ingress": [{"fromEndpoints": [{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]}]})),
            parse_policy(knp("n", {"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}]}]})),
        ]
    )
    assert policies.pod_label_keys() == frozenset({"role", "zone"})


def test_a_hop_answer_is_reused_only_for_peers_it_cannot_tell_apart() -> None:
    """One warm set, the source's egress checked to destinations that its egress rule tells apart
    only by a named port, or by a label its peer selector reads: each gets its own answer, as a
    fresh set gives it (the hop cache keys on what the hop reads of the far end)."""
    rule = {"toEndpoints": [SEL_MASTER], "toPorts": [{"ports": [{"port": "pytorchjob-port"}]}]}
    manifest = cnp("w", {"endpointSelector": {"matchLabels": {"role": "worker"}}, "egress": [rule]})
    warm = PolicySet([parse_policy(manifest)])
    flows = [
        (MASTER, ALLOW),
        (ep({"role": "master", "zone": "a"}, ports={"pytorchjob-port": 29500}), deny(EG, DD, "CiliumNetworkPolicy/ml/w")),
        (ep({"role": "ps", "zone": "a"}, ports={"pytorchjob-port": 23456}), deny(EG, DD, "CiliumNetworkPolicy/ml/w")),
        (ep({"role": "master", "zone": "b"}, ports={"pytorchjob-port": 23456}), ALLOW),
    ]
    for dst, expect in flows:
        assert warm.check(WORKER, dst, P23456) == expect
        assert PolicySet([parse_policy(manifest)]).check(WORKER, dst, P23456) == expect


def test_the_blocks_selecting_an_endpoint_keep_the_policies_order_across_namespaces() -> None:
    """Blocks that share their indexed label (zone a), namespaced in two namespaces and
    clusterwide, select an endpoint of each namespace in the order the policies were given."""
    spec = {"endpointSelector": {"matchLabels": {"zone": "a"}}, "ingress": [{"fromEndpoints": [{}]}]}
    manifests = [cnp("p1", spec, ns="ml"), ccnp("c1", spec), cnp("p2", spec, ns="web"),
                 cnp("p3", spec, ns="ml"), ccnp("c2", spec)]  # fmt: skip
    policies = PolicySet(parse_policy(m) for m in manifests)
    for ns, expected in (("ml", ["p1", "c1", "p3", "c2"]), ("web", ["c1", "p2", "c2"]),
                         ("other", ["c1", "c2"])):  # fmt: skip
        dst = ep({"zone": "a"}, ns=ns)
        ingress = next(h for h in policies.trace(ep({"zone": "b"}, ns=ns), dst, P23456).hops if h.hop is IN)
        assert [b.policy.rsplit("/", 1)[-1] for b in ingress.selecting] == expected, ns
        assert policies.check(ep({"zone": "b"}, ns=ns), dst, P23456) == ALLOW
