"""Property: grouping pods into identity classes never changes what is denied.

For random pods and policies, the class-based check (one `PolicySet.check` per class pair, on
projected labels) must report exactly the denied pod pairs that checking every pod pair with its
full labels reports, now and after moving every pod to one zone.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.diagnosis.reachability import Reachability
from agent.model.cluster import Pod
from agent.model.flow import FlowRule
from agent.model.network import Endpoint, PortRange
from agent.policy import PolicySet
from tests.support.objects import cnp, namespace, netpol, node, pod
from tests.support.snapshots import load

KEYS = ("app", "tier", "zone", "replica-index")
VALUES = ("a", "b", "zone-a", "zone-b")
ZONE_NODE = {"zone-a": "n-a", "zone-b": "n-b"}

labels = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4)
selector = st.one_of(
    st.builds(lambda lb: {"matchLabels": lb}, labels),
    st.builds(
        lambda k, op, v: {"matchExpressions": [{"key": k, "operator": op, "values": [v]}]},
        st.sampled_from(KEYS),
        st.sampled_from(["In", "NotIn"]),
        st.sampled_from(VALUES),
    ),
    st.builds(
        lambda k, op: {"matchExpressions": [{"key": k, "operator": op}]},
        st.sampled_from(KEYS),
        st.sampled_from(["Exists", "DoesNotExist"]),
    ),
)
ports = st.sampled_from(
    [
        None,
        [{"ports": [{"port": "23456", "protocol": "TCP"}]}],
        [{"ports": [{"port": "1024", "endPort": 65535, "protocol": "TCP"}]}],
    ]
)


@st.composite
def policy(draw: st.DrawFn) -> dict[str, Any]:
    index = draw(st.integers(0, 10**6))
    direction = draw(st.sampled_from(["ingress", "egress", "ingressDeny", "egressDeny"]))
    peer_field = "fromEndpoints" if direction.startswith("ingress") else "toEndpoints"
    rule: dict[str, Any] = {peer_field: [draw(selector)]}
    to_ports = draw(ports)
    if to_ports is not None:
        rule["toPorts"] = to_ports
    if draw(st.booleans()):
        return cnp(
            f"p{index}",
            {"endpointSelector": draw(selector), direction: [rule]},
            ns=draw(st.sampled_from(["ml", None])),
        )
    k8s_dir = "ingress" if direction.startswith("ingress") else "egress"
    peer = "from" if k8s_dir == "ingress" else "to"
    return netpol(
        f"np{index}",
        {
            "podSelector": draw(selector),
            "policyTypes": [k8s_dir.capitalize()],
            k8s_dir: [{peer: [{"podSelector": draw(selector)}]}],
        },
    )


def _endpoint(p: Pod, zone: str | None, mirror: str) -> Endpoint:
    lb = dict(p.labels)
    if zone is not None and mirror in lb:
        lb[mirror] = zone
    return Endpoint(
        namespace=p.namespace,
        labels=lb,
        namespace_labels={"kubernetes.io/metadata.name": p.namespace},
        service_account=p.service_account,
        named_ports=p.named_ports(),
    )


@settings(max_examples=60, deadline=None)
@given(
    pods=st.lists(st.tuples(labels, st.sampled_from(["zone-a", "zone-b"])), min_size=2, max_size=6),
    policies=st.lists(policy(), max_size=4),
    port=st.sampled_from([PortRange.single(23456), PortRange(1024, 65535)]),
    zone=st.sampled_from([None, "zone-a", "zone-b"]),
)
def test_classes_report_exactly_the_denied_pairs(
    pods: list[tuple[dict[str, str], str]],
    policies: list[dict[str, Any]],
    port: PortRange,
    zone: str | None,
) -> None:
    items = [node("n-a", "zone-a", gpus=8), node("n-b", "zone-b", gpus=8), namespace("ml")]
    items += [pod(f"p{i}", node_name=ZONE_NODE[z], labels=lb) for i, (lb, z) in enumerate(pods)]
    snap = load(items + policies)
    policy_set = PolicySet(snap.policies)
    everyone = tuple(snap.state.pods)
    reach = Reachability(
        policy_set,
        snap.state.namespaces,
        label_keys=policy_set.pod_label_keys(),
        mirror_keys=("zone",),
    )
    pairs = reach.prepare([FlowRule(everyone, everyone, port)])
    grouped = {
        (s.name, d.name)
        for g in reach.denied(pairs, zone=zone)
        for s in g.sources
        for d in g.destinations
        if s is not d
    }
    brute = {
        (s.name, d.name)
        for s in everyone
        for d in everyone
        if s is not d
        and not policy_set.check(
            _endpoint(s, zone, "zone"), _endpoint(d, zone, "zone"), port
        ).allowed
    }
    assert grouped == brute
    assert sum(g.count for g in reach.denied(pairs, zone=zone)) == len(brute)
