"""The what-if blast radius against brute force: on random policy changes to the example cluster,
the flows it lists are exactly the required pod pairs whose `PolicySet.check` verdict differs
before and after, the jobs exactly those whose diagnosis verdict differs, and the declared-port
flows it counts exactly the pod pairs of the whole cluster whose verdict on a port the destination
declares differs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.commands.diagnose import load_snapshot
from agent.diagnosis.diagnose import diagnose_cluster
from agent.diagnosis.pod_shapes import pod_shapes
from agent.diagnosis.whatif import Cluster, Held, Remaining, blast_radius, delete_objects
from agent.errors import WhatIfError
from agent.model.cluster import ClusterState, Pod
from agent.model.network import Endpoint, PortRange
from agent.policy import PolicySet, parse_policy
from agent.policy.rule import PolicyKind, UnreadablePolicy
from agent.settings import DiagnosisSettings
from agent.topology.facts import FactsIndex
from agent.topology.flows import required_flows
from agent.topology.jobs import find_jobs
from tests.policy.builders import cnp, knp

SNAPSHOT = load_snapshot([Path(__file__).resolve().parents[2] / "examples" / "split-blocked.yaml"])
SETTINGS = DiagnosisSettings(pod_zone_label="zone")
ZONE_SELECTOR = st.sampled_from([{}, {"matchLabels": {"zone": "zone-a"}},
                                 {"matchLabels": {"zone": "zone-b"}},
                                 {"matchLabels": {"training.kubeflow.org/replica-type": "master"}}])
PORTS = st.sampled_from([None, [{"ports": [{"port": "23456", "protocol": "TCP"}]}],
                         [{"ports": [{"port": "1024", "endPort": 65535}]}]])


@st.composite
def changes(draw: st.DrawFn) -> dict[str, Any]:
    section = draw(st.sampled_from(["ingress", "ingressDeny", "egress", "egressDeny"]))
    peers = "fromEndpoints" if section.startswith("ingress") else "toEndpoints"
    rule: dict[str, Any] = {peers: [draw(ZONE_SELECTOR)]}
    ports = draw(PORTS)
    if ports is not None:
        rule["toPorts"] = ports
    if draw(st.booleans()):  # one direction's rules (the other direction's hops stay)
        return cnp("change", {"endpointSelector": draw(ZONE_SELECTOR), section: [rule]})
    return knp("change", {"podSelector": draw(ZONE_SELECTOR),
                          "policyTypes": draw(st.sampled_from([["Ingress"], ["Egress"]]))})


def _allowed(policies: PolicySet, src: Endpoint, dst: Endpoint, ports: PortRange) -> bool:
    """The uncached evaluation (the trace), not the cached check the what-if itself uses."""
    return policies.trace(src, dst, ports).verdict.allowed


def _endpoint(pod: Pod, state: ClusterState) -> Endpoint:
    ns = state.namespaces.get(pod.namespace)
    return Endpoint(pod.namespace, pod.labels, ns.labels if ns else {}, pod.service_account,
                    pod.named_ports())


@settings(max_examples=100, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(changes(), st.sets(st.sampled_from([p.id for p in SNAPSHOT.policies])))
def test_blast_radius_is_brute_force(change: dict[str, Any], deleted: set[str]) -> None:
    state = SNAPSHOT.state
    before = PolicySet(SNAPSHOT.policies)
    after = PolicySet([*(p for p in SNAPSHOT.policies if p.id not in deleted), parse_policy(change)])
    result = blast_radius(Cluster(state, before), Cluster(state, after), settings=SETTINGS)
    expected = set()
    diagnosed = diagnose_cluster(state, before, settings=SETTINGS)
    for job in diagnosed.jobs.values():
        for rule in required_flows(job):
            for src in rule.sources:
                for dst in rule.destinations:
                    if src is dst:
                        continue
                    a, b = _endpoint(src, state), _endpoint(dst, state)
                    if _allowed(before, a, b, rule.ports) != _allowed(after, a, b, rule.ports):
                        expected.add((str(job.ref), f"ml/{src.name}", f"ml/{dst.name}", rule.ports))
    assert {(f.job, f.source, f.destination, f.ports) for f in result.flows} == expected
    verdicts_after = {str(f.job): f.verdict for f in
                      diagnose_cluster(state, after, settings=SETTINGS).findings}
    changed = {str(f.job) for f in diagnosed.findings if verdicts_after[str(f.job)] != f.verdict}
    assert {j.job for j in result.jobs} == changed
    assert result.jobs_checked == len(diagnosed.findings)
    # given the facts and jobs held (as the agent holds them), the answer is the same
    index = FactsIndex(state.nodes)
    index.add_many({(p.namespace, p.name): p for p in state.pods})
    held = Held(index.facts(), tuple(find_jobs(state, SETTINGS.groups)))
    again = blast_radius(Cluster(state, PolicySet(SNAPSHOT.policies)), Cluster(state, after),
                         settings=SETTINGS, held=held)  # fmt: skip
    assert again == result
    # with the pods by shape held too (over the live keys, as the agent holds them, and over
    # both sides' keys, so the grouping by shape is always taken), the answer is the same
    for keys in (before.pod_label_keys(), before.pod_label_keys() | after.pod_label_keys()):
        shaped = Held(held.facts, held.jobs, pod_shapes(state, keys))
        assert blast_radius(Cluster(state, PolicySet(SNAPSHOT.policies)), Cluster(state, after),
                            settings=SETTINGS, held=shaped) == result  # fmt: skip

    # every pod pair of the cluster on each port its destination declares, brute force: those
    # that change are exactly the declared-port flows the what-if counts (it checks only pairs
    # with a touched end: no other pair can change)
    declared = set()
    for src in state.pods:
        for dst in state.pods:
            if src is dst:
                continue
            a, b = _endpoint(src, state), _endpoint(dst, state)
            for port in {PortRange.single(p.port, p.protocol) for p in dst.ports}:
                if _allowed(before, a, b, port) != _allowed(after, a, b, port):
                    declared.add((f"ml/{src.name}", f"ml/{dst.name}", port))
    assert result.touched.changed == len(declared)
    assert {(f.source, f.destination, f.ports) for f in result.touched.listed} == declared


LOST = UnreadablePolicy("CiliumClusterwideNetworkPolicy/odd", PolicyKind.CILIUM_CLUSTERWIDE, None,
                        "spec", "unreadable", ())  # fmt: skip
A, B = "CiliumNetworkPolicy/ml/zone-a-only", "CiliumNetworkPolicy/ml/zone-b-only"


@pytest.mark.parametrize(("targets", "policies", "unreadable", "pods_gone", "error"), [
    ([A], [B], [LOST.id], [], None),
    ([B, A], [], [LOST.id], [], None),
    ([LOST.id], [A, B], [], [], None),
    (["Pod/ml/resnet-worker-1"], [A, B], [LOST.id], ["resnet-worker-1"], None),
    (["Pod/ml/resnet-worker-1", "Pod/ml/bert-master-0", A], [B], [LOST.id],
     ["resnet-worker-1", "bert-master-0"], None),
    ([], [A, B], [LOST.id], [], None),
    (["CiliumNetworkPolicy/ml/nope"], None, None, None, "no CiliumNetworkPolicy/ml/nope in"),
    (["Pod/ml/nope"], None, None, None, "no Pod/ml/nope in"),
    (["Pod/other/resnet-worker-1"], None, None, None, "no Pod/other/resnet-worker-1 in"),
    ([A, A], None, None, None, f"no {A} in"),
    (["Pod/ml/resnet-worker-1", "Pod/ml/resnet-worker-1"], None, None, None,
     "no Pod/ml/resnet-worker-1 in"),
    (["Deployment/ml/x"], None, None, None, "cannot delete a 'Deployment' (kinds: NetworkPolicy, "
     "CiliumNetworkPolicy, CiliumClusterwideNetworkPolicy, Pod)"),
])  # fmt: skip
def test_delete_objects(targets: list[str], policies: list[str] | None,
                        unreadable: list[str] | None, pods_gone: list[str] | None,
                        error: str | None) -> None:  # fmt: skip
    """The one delete both the `--delete` option and the agent's what-if use: what is left, in
    order, the very pod tuple when no pod goes, and each refusal named with the caller's words."""
    pods = SNAPSHOT.state.pods

    def delete() -> Remaining:
        return delete_objects(targets, policies=SNAPSHOT.policies, unreadable=(LOST,), pods=pods,
                              flag="--delete", where="the snapshot")  # fmt: skip

    if error is not None:
        with pytest.raises(WhatIfError) as caught:
            delete()
        assert str(caught.value).startswith(f"--delete: {error}")
        assert not error.startswith("no ") or str(caught.value).endswith(" the snapshot")
        return
    assert pods_gone is not None
    left = delete()
    assert [p.id for p in left.policies] == policies
    assert [u.id for u in left.unreadable] == unreadable
    assert [p.name for p in left.pods] == [p.name for p in pods if p.name not in pods_gone]
    assert (left.pods is pods) == (not pods_gone)
