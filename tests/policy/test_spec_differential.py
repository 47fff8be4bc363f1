"""Differential and property tests of the evaluator's identities and named ports.

1. Plain Kubernetes (no Cilium in the cluster): on random NetworkPolicy sets over a small training
   job (labels including `pod-template-hash` and `topology.kubernetes.io/zone`, named container
   ports declared TCP or UDP), zonemedic agrees with an independent reading of the spec
   (`tests/support/netpol_spec.py`) on every flow, both through `PolicySet.check` and through the
   diagnosis' class grouping (`Reachability`).
2. Cilium: labels the identity filter leaves out never change a verdict, whatever the policies
   (CNP, CCNP, NetworkPolicy) select on and whatever `labels` patterns cilium-config adds.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.diagnosis.reachability import Reachability
from agent.model.cluster import ContainerPort, Namespace, Pod, PodPhase
from agent.model.flow import FlowRule
from agent.model.network import Endpoint, PortRange, Protocol
from agent.policy import PolicySet, parse_policy
from agent.policy.dataplane import DataplaneEvidence, DataplaneKind, resolve_dataplane
from agent.policy.identity import cilium_identity
from tests.support.netpol_spec import SpecPod, connection_allowed

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

NAMESPACES = {"ml": {"team": "research"}, "other": {"team": "infra"}}
ZONES = ("zone-a", "zone-b")
PORT_NAMES = ("nccl", "gloo", "rdzv")
FLOW_PORTS = ((23456, "TCP"), (23456, "UDP"), (29500, "TCP"), (5000, "UDP"), (8080, "TCP"))
KEYS = (
    "app",
    "role",
    "pod-template-hash",
    "topology.kubernetes.io/zone",
    "training.kubeflow.org/replica-type",
)
VALUES = {
    "app": ("trainer", "web"),
    "role": ("master", "worker"),
    "pod-template-hash": ("5d8f", "77c1"),
    "topology.kubernetes.io/zone": ZONES,
    "training.kubeflow.org/replica-type": ("master", "worker"),
}

# -- the job ------------------------------------------------------------------------------------


@st.composite
def spec_pods(draw: st.DrawFn) -> list[SpecPod]:
    """A master and two workers in `ml`, and a pod in `other`, with random labels and ports."""
    out = []
    for name, namespace, role in (
        ("m", "ml", "master"),
        ("w0", "ml", "worker"),
        ("w1", "ml", "worker"),
        ("x", "other", "worker"),
    ):
        labels = {
            "app": draw(st.sampled_from(VALUES["app"])),
            "role": role,
            "training.kubeflow.org/replica-type": role,
        }
        if draw(st.booleans()):
            labels["pod-template-hash"] = draw(st.sampled_from(VALUES["pod-template-hash"]))
        if draw(st.booleans()):
            labels["topology.kubernetes.io/zone"] = draw(st.sampled_from(ZONES))
        ports = []
        for port_name, number in (("nccl", 23456), ("gloo", 29500), ("rdzv", 5000)):
            if draw(st.booleans()):
                ports.append((port_name, number, draw(st.sampled_from(("TCP", "UDP")))))
        out.append(SpecPod(name, namespace, labels, tuple(ports), NAMESPACES[namespace]))
    return out


# -- random NetworkPolicies ---------------------------------------------------------------------


def _selector() -> st.SearchStrategy[dict[str, Any]]:
    key = st.sampled_from(KEYS)
    labels = key.flatmap(
        lambda k: st.fixed_dictionaries({k: st.sampled_from(VALUES[k])})
    )
    expression = key.flatmap(
        lambda k: st.one_of(
            st.builds(
                lambda op, vs: {"key": k, "operator": op, "values": vs},
                st.sampled_from(["In", "NotIn"]),
                st.lists(st.sampled_from(VALUES[k]), min_size=1, max_size=2, unique=True),
            ),
            st.builds(lambda op: {"key": k, "operator": op},
                      st.sampled_from(["Exists", "DoesNotExist"])),
        )
    )
    return st.fixed_dictionaries(
        {}, optional={"matchLabels": labels, "matchExpressions": st.lists(expression, max_size=2)}
    )


def _ns_selector() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.just({}),
        st.sampled_from([{"matchLabels": {"team": t}} for t in ("research", "infra")]),
        st.sampled_from(
            [{"matchLabels": {"kubernetes.io/metadata.name": ns}} for ns in NAMESPACES]
        ),
    )


PEER = st.one_of(
    st.builds(lambda s: {"podSelector": s}, _selector()),
    st.builds(lambda n: {"namespaceSelector": n}, _ns_selector()),
    st.builds(lambda s, n: {"podSelector": s, "namespaceSelector": n}, _selector(), _ns_selector()),
    st.just({"ipBlock": {"cidr": "10.0.0.0/8"}}),
)
NAMED_PORT = st.fixed_dictionaries(
    {"port": st.sampled_from(PORT_NAMES)}, optional={"protocol": st.sampled_from(["TCP", "UDP"])}
)
PORT = st.one_of(
    NAMED_PORT,
    NAMED_PORT,
    st.fixed_dictionaries({}, optional={"protocol": st.sampled_from(["TCP", "UDP"])}),
    st.fixed_dictionaries(
        {"port": st.sampled_from([23456, 29500, 5000])},
        optional={"protocol": st.sampled_from(["TCP", "UDP"])},
    ),
    st.builds(
        lambda lo, hi, proto: {"port": lo, "endPort": hi, "protocol": proto},
        st.sampled_from([5000, 20000]),
        st.sampled_from([23456, 30000]),
        st.sampled_from(["TCP", "UDP"]),
    ),
)


def _rule(peers: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"ports": st.lists(PORT, max_size=2)}, optional={peers: st.lists(PEER, max_size=2)}
    )


@st.composite
def network_policies(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(0, 3))):
        spec: dict[str, Any] = {"podSelector": draw(_selector())}
        if draw(st.booleans()):
            spec["ingress"] = draw(st.lists(_rule("from"), max_size=2))
        if draw(st.booleans()):
            spec["egress"] = draw(st.lists(_rule("to"), max_size=2))
        types = draw(st.sampled_from([None, ["Ingress"], ["Egress"], ["Ingress", "Egress"]]))
        if types is not None:
            spec["policyTypes"] = types
        namespace = draw(st.sampled_from(["ml", "ml", "other"]))
        out.append({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": f"np{i}", "namespace": namespace},
            "spec": spec,
        })
    return out


# -- zonemedic's side ---------------------------------------------------------------------------


def _endpoint(pod: SpecPod) -> Endpoint:
    return Endpoint(
        namespace=pod.namespace,
        labels=dict(pod.labels),
        namespace_labels=NAMESPACES[pod.namespace],
        named_ports={(n, Protocol(p)): number for n, number, p in pod.ports},
    )


def _model_pod(pod: SpecPod) -> Pod:
    return Pod(
        namespace=pod.namespace,
        name=pod.name,
        labels=dict(pod.labels),
        node_name="n1",
        phase=PodPhase.RUNNING,
        ports=tuple(ContainerPort(number, name, Protocol(p)) for name, number, p in pod.ports),
    )


def _plain_set(policies: list[dict[str, Any]]) -> PolicySet:
    dataplane = resolve_dataplane(DataplaneEvidence())  # a dump without any Cilium object
    assert dataplane.kind is DataplaneKind.KUBERNETES
    return PolicySet([parse_policy(p) for p in policies], dataplane=dataplane)


@SETTINGS
@given(pods=spec_pods(), policies=network_policies())
def test_plain_kubernetes_agrees_with_the_spec_on_every_flow(
    pods: list[SpecPod], policies: list[dict[str, Any]]
) -> None:
    policy_set = _plain_set(policies)
    namespaces = {ns: Namespace(ns, labels) for ns, labels in NAMESPACES.items()}
    reach = Reachability(policy_set, namespaces, label_keys=policy_set.pod_label_keys())
    model = {p.name: _model_pod(p) for p in pods}
    for src in pods:
        for dst in pods:
            if src is dst:
                continue
            for port, proto in FLOW_PORTS:
                want = connection_allowed(policies, src, dst, port, proto)
                ports = PortRange.single(port, Protocol(proto))
                got = policy_set.check(_endpoint(src), _endpoint(dst), ports)
                assert got.allowed is want, (src.name, dst.name, port, proto, got)
                classes = reach.class_of(model[src.name]), reach.class_of(model[dst.name])
                assert reach.verdict(*classes, ports).allowed is want, (src.name, dst.name, port)
                rule = FlowRule((model[src.name],), (model[dst.name],), ports)
                assert bool(reach.denied(reach.prepare([rule]))) is not want


# -- Cilium: labels left out of identities never matter ------------------------------------------

EXCLUDED = (
    "pod-template-hash",
    "controller-revision-hash",
    "topology.kubernetes.io/zone",
    "batch.kubernetes.io/job-completion-index",
)
CILIUM_KEYS = st.sampled_from(["app", "role", "k8s:app", "any:role", *EXCLUDED,
                               *(f"k8s:{k}" for k in EXCLUDED)])
ANY_VALUE = st.sampled_from(["trainer", "master", "worker", "5d8f", "zone-a", "zone-b", "0"])


def _cilium_selector() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "matchLabels": st.dictionaries(CILIUM_KEYS, ANY_VALUE, max_size=2),
            "matchExpressions": st.lists(
                st.one_of(
                    st.builds(lambda k, op, v: {"key": k, "operator": op, "values": [v]},
                              CILIUM_KEYS, st.sampled_from(["In", "NotIn"]), ANY_VALUE),
                    st.builds(lambda k, op: {"key": k, "operator": op}, CILIUM_KEYS,
                              st.sampled_from(["Exists", "DoesNotExist"])),
                ),
                max_size=2,
            ),
        },
    )


@st.composite
def cilium_policies(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 3))):
        rule_peers = st.lists(_cilium_selector(), min_size=1, max_size=2)
        spec: dict[str, Any] = {"endpointSelector": draw(_cilium_selector())}
        for section, peers in (("ingress", "fromEndpoints"), ("ingressDeny", "fromEndpoints"),
                               ("egress", "toEndpoints")):
            if draw(st.booleans()):
                spec[section] = [{peers: draw(rule_peers)}]
        kind = draw(st.sampled_from(["CiliumNetworkPolicy", "CiliumClusterwideNetworkPolicy"]))
        meta = {"name": f"p{i}"} | ({"namespace": "ml"} if kind == "CiliumNetworkPolicy" else {})
        out.append({"apiVersion": "cilium.io/v2", "kind": kind, "metadata": meta, "spec": spec})
    if draw(st.booleans()):
        out.append({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "np", "namespace": "ml"},
            "spec": {
                "podSelector": {"matchLabels": {draw(st.sampled_from(EXCLUDED)): "zone-a"}},
                "ingress": [{"from": [{"podSelector": draw(_selector())}]}],
            },
        })
    return out


LABEL_PATTERNS = st.lists(
    st.sampled_from(["k8s:app", "k8s:role", "k8s:!app", "!role", "k8s:!zone", "any:app"]),
    max_size=3,
).map(" ".join)


@SETTINGS
@given(
    policies=cilium_policies(),
    base=st.fixed_dictionaries({"app": st.sampled_from(["trainer", "web"]),
                                "role": st.sampled_from(["master", "worker"])}),
    left_out_a=st.dictionaries(st.sampled_from(EXCLUDED), ANY_VALUE, max_size=3),
    left_out_b=st.dictionaries(st.sampled_from(EXCLUDED), ANY_VALUE, max_size=3),
    labels=LABEL_PATTERNS,
    peer=st.fixed_dictionaries({"app": st.sampled_from(["trainer", "web"]),
                                "role": st.sampled_from(["master", "worker"])}),
)
def test_cilium_labels_left_out_of_identities_never_change_a_verdict(
    policies: list[dict[str, Any]],
    base: dict[str, str],
    left_out_a: dict[str, str],
    left_out_b: dict[str, str],
    labels: str,
    peer: dict[str, str],
) -> None:
    identity = cilium_identity(labels or None)
    assert not any(identity.keeps(k) for k in EXCLUDED)
    dataplane = resolve_dataplane(
        DataplaneEvidence(cilium=("test",), cilium_config={"labels": labels} if labels else {})
    )
    assert dataplane.identity.patterns is not None and identity.patterns is not None
    assert [p.text() for p in dataplane.identity.patterns] == [p.text() for p in identity.patterns]
    policy_set = PolicySet([parse_policy(p) for p in policies], dataplane=dataplane)
    other = Endpoint("ml", peer)
    a = Endpoint("ml", {**base, **left_out_a})
    b = Endpoint("ml", {**base, **left_out_b})
    port = PortRange.single(23456)
    assert policy_set.check(a, other, port) == policy_set.check(b, other, port)
    assert policy_set.check(other, a, port) == policy_set.check(other, b, port)
    assert policy_set.equivalence_key(a) == policy_set.equivalence_key(b)
