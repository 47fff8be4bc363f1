"""The policy-side fix admits exactly the job's denied required flows, and nothing else.

Property: on the example cluster (a PyTorchJob split across two zones, another job, a web pod)
under random ingress/egress policies (CiliumNetworkPolicies, or only Kubernetes NetworkPolicies),
applying the proposed fix through the what-if changes exactly the job's denied required flows
(each to allowed), no other job's verdict or flow, and every declared-port flow that changes lies
inside one of the job's required flows. Table: the selectors are narrowed to the pods denied
(replica type), per direction (egress opened only where egress denies), and a NetworkPolicy fix
when only NetworkPolicies are in use."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agent.diagnosis.policy_fix import base_labels, propose_fix, with_fix
from agent.diagnosis.whatif import Cluster, blast_radius
from agent.errors import PolicyFixError
from agent.model.cluster import ClusterState, Pod
from agent.model.network import Endpoint
from agent.settings import DiagnosisSettings
from agent.snapshot.collection import parse_objects
from agent.topology.flows import required_flows
from agent.topology.jobs import find_jobs

ROOT = Path(__file__).resolve().parents[2]
BASE = [i for i in yaml.safe_load((ROOT / "examples" / "split-blocked.yaml").read_text())["items"]
        if i["kind"] != "CiliumNetworkPolicy"]  # fmt: skip
SETTINGS = DiagnosisSettings(pod_zone_label="zone")
MIRROR = frozenset({"zone", "topology.kubernetes.io/zone"})
JOB = "training.kubeflow.org/job-name"

SELECTORS = [{}, {"zone": "zone-a"}, {"zone": "zone-b"},
             {"training.kubeflow.org/replica-type": "worker"},
             {"training.kubeflow.org/job-role": "master"}, {"app": "nginx"},
             {JOB: "bert"}]  # fmt: skip
PORTS = [None, (23456, None), (1024, 65535), (80, None), (30000, 40000), (2222, None)]


def _cnp_ports(ports: tuple[int, int | None] | None) -> list[dict[str, Any]] | None:
    if ports is None:
        return None
    entry: dict[str, Any] = {"port": str(ports[0]), "protocol": "TCP"}
    if ports[1] is not None:
        entry["endPort"] = ports[1]
    return [{"ports": [entry]}]


def _np_ports(ports: tuple[int, int | None] | None) -> list[dict[str, Any]] | None:
    if ports is None:
        return None
    entry: dict[str, Any] = {"port": ports[0], "protocol": "TCP"}
    if ports[1] is not None:
        entry["endPort"] = ports[1]
    return [entry]


@st.composite
def policy(draw: st.DrawFn, *, index: int, cilium: bool) -> dict[str, Any]:
    subject = draw(st.sampled_from(SELECTORS))
    directions = draw(st.sampled_from([("ingress",), ("egress",), ("ingress", "egress")]))
    spec: dict[str, Any] = {}
    for direction in directions:
        rules = []
        for _ in range(draw(st.integers(0, 2))):
            peer = draw(st.sampled_from(SELECTORS))
            ports = draw(st.sampled_from(PORTS))
            if cilium:
                rule: dict[str, Any] = {("fromEndpoints" if direction == "ingress"
                                         else "toEndpoints"): [{"matchLabels": peer}]}  # fmt: skip
                if (found := _cnp_ports(ports)) is not None:
                    rule["toPorts"] = found
            else:
                rule = {("from" if direction == "ingress" else "to"):
                        [{"podSelector": {"matchLabels": peer}}]}  # fmt: skip
                if (found_np := _np_ports(ports)) is not None:
                    rule["ports"] = found_np
            rules.append(rule)
        spec[direction] = rules
    meta = {"name": f"p{index}", "namespace": "ml"}
    if cilium:
        if not any(spec.values()):  # a CNP with no rules enforces nothing: give it default deny
            spec["enableDefaultDeny"] = {d: True for d in directions}
        return {"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy", "metadata": meta,
                "spec": {"endpointSelector": {"matchLabels": subject}, **spec}}  # fmt: skip
    types = [d.capitalize() for d in directions]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta,
            "spec": {"podSelector": {"matchLabels": subject}, "policyTypes": types, **spec}}


@st.composite
def clusters(draw: st.DrawFn) -> tuple[bool, list[dict[str, Any]]]:
    cilium = draw(st.booleans())
    count = draw(st.integers(1, 4))
    return cilium, [draw(policy(index=i, cilium=cilium)) for i in range(count)]


def _endpoint(pod: Pod, state: ClusterState) -> Endpoint:
    ns = state.namespaces[pod.namespace]
    return Endpoint(pod.namespace, pod.labels, ns.labels, pod.service_account, pod.named_ports())


def _load(policies: list[dict[str, Any]]) -> tuple[Any, Any]:
    snapshot = parse_objects([*BASE, *policies], source="test")
    return snapshot.state, snapshot.policy_set(SETTINGS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_the_fix_changes_exactly_the_jobs_denied_required_flows(case: tuple[bool, list[Any]]) -> None:
    cilium, manifests = case
    state, policies = _load(manifests)
    job = next(j for j in find_jobs(state, SETTINGS.groups) if j.ref.name == "resnet")
    denied = {(f"ml/{s.name}", f"ml/{d.name}", r.ports)
              for r in required_flows(job) for s in r.sources for d in r.destinations
              if s is not d and not policies.check(_endpoint(s, state), _endpoint(d, state),
                                                   r.ports).allowed}  # fmt: skip
    fix = propose_fix(job, state, policies, base=base_labels(job, {}), avoid=MIRROR)
    event("no flow denied" if fix is None else f"fix: {fix.kind}")
    if fix is None:
        assert not denied
        return
    assert fix.kind == ("CiliumNetworkPolicy" if cilium else "NetworkPolicy")
    result = blast_radius(Cluster(state, policies), Cluster(state, with_fix(policies, fix)),
                          settings=SETTINGS)  # fmt: skip
    assert {(f.source, f.destination, f.ports) for f in result.flows} == denied
    assert all(not f.before.allowed and f.after.allowed for f in result.all_flows())
    assert {j.job for j in result.jobs} <= {"PyTorchJob/ml/resnet"}
    rules = [({f"ml/{p.name}" for p in r.sources}, {f"ml/{p.name}" for p in r.destinations}, r.ports)
             for r in required_flows(job)]  # fmt: skip
    for change in result.touched.listed:
        assert change.job == "PyTorchJob/ml/resnet"
        assert any(change.source in s and change.destination in d
                   and r.first <= change.ports.first <= change.ports.last <= r.last
                   for s, d, r in rules)  # fmt: skip
    assert len(result.touched.listed) == result.touched.changed


def _zone_policies(*, cilium: bool, egress: bool = False) -> list[dict[str, Any]]:
    out = []
    for zone in ("zone-a", "zone-b"):
        peer = {"matchLabels": {"zone": zone}}
        if cilium:
            spec: dict[str, Any] = {"endpointSelector": {"matchLabels": {"zone": zone}},
                                    "ingress": [{"fromEndpoints": [peer]}]}  # fmt: skip
            if egress:
                spec["egress"] = [{"toEndpoints": [peer]}]
            out.append({"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
                        "metadata": {"name": f"only-{zone}", "namespace": "ml"}, "spec": spec})
        else:
            spec = {"podSelector": {"matchLabels": {"zone": zone}}, "policyTypes": ["Ingress"],
                    "ingress": [{"from": [{"podSelector": peer}]}]}  # fmt: skip
            if egress:
                spec["policyTypes"].append("Egress")
                spec["egress"] = [{"to": [{"podSelector": peer}]}]
            out.append({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                        "metadata": {"name": f"only-{zone}", "namespace": "ml"}, "spec": spec})
    return out


def _lockdown_master() -> dict[str, Any]:
    return {"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
            "metadata": {"name": "lockdown-master", "namespace": "ml"},
            "spec": {"endpointSelector": {"matchLabels": {"training.kubeflow.org/job-role": "master"}},
                     "ingress": [{"fromEndpoints": [{"matchLabels": {"app": "nginx"}}]}]}}  # fmt: skip


@pytest.mark.parametrize(("manifests", "kind", "expected"), [
    # only the master's ingress denies: one block at the master, from the workers, on its port
    ([_lockdown_master()], "CiliumNetworkPolicy",
     [("spec", {JOB: "resnet", "training.kubeflow.org/job-role": "master"},
       ["ingress"])]),
    # zone policies on both directions: the coordinator port opened at the master's ingress and
    # the workers' egress; the collective range at the whole job both ways (the denied pods are
    # told apart only by the zone label, which moves with the job)
    (_zone_policies(cilium=True, egress=True), "CiliumNetworkPolicy",
     [("specs[0]", {JOB: "resnet", "training.kubeflow.org/job-role": "master"}, ["ingress"]),
      ("specs[1]", {JOB: "resnet", "training.kubeflow.org/replica-type": "worker"}, ["egress"]),
      ("specs[2]", {JOB: "resnet"}, ["ingress", "egress"])]),
    # only NetworkPolicies: NetworkPolicies, at exactly the pods in default deny there (every
    # pod of the job is, for some cross-zone peer on the collective range)
    (_zone_policies(cilium=False), "NetworkPolicy",
     [("0", {JOB: "resnet", "training.kubeflow.org/job-role": "master"}, ["Ingress"]),
      ("1", {JOB: "resnet"}, ["Ingress"])]),
])
def test_selectors_directions_and_kind(manifests: list[dict[str, Any]], kind: str,
                                       expected: list[tuple[str, dict[str, str], list[str]]]) -> None:
    state, policies = _load(manifests)
    job = next(j for j in find_jobs(state, SETTINGS.groups) if j.ref.name == "resnet")
    fix = propose_fix(job, state, policies, base=base_labels(job, {}), avoid=MIRROR)
    assert fix is not None and fix.kind == kind
    if kind == "NetworkPolicy":
        found = [(m["metadata"]["name"].rsplit("-", 1)[-1], m["spec"]["podSelector"]["matchLabels"],
                  m["spec"]["policyTypes"]) for m in fix.manifests]  # fmt: skip
    else:
        (manifest,) = fix.manifests
        specs = manifest.get("specs") or [manifest["spec"]]
        names = ["spec"] if "spec" in manifest else [f"specs[{i}]" for i in range(len(specs))]
        found = [(n, s["endpointSelector"]["matchLabels"],
                  [d for d in ("ingress", "egress") if d in s]) for n, s in zip(names, specs, strict=True)]  # fmt: skip
        assert all(s["enableDefaultDeny"] == {"ingress": False, "egress": False} for s in specs)
    assert found == expected
    result = blast_radius(Cluster(state, policies), Cluster(state, with_fix(policies, fix)),
                          settings=SETTINGS)  # fmt: skip
    assert result.flows and all(f.after.allowed for f in result.all_flows())


def test_the_jobs_own_label_must_be_on_all_its_pods() -> None:
    state, _ = _load([])
    job = next(j for j in find_jobs(state, SETTINGS.groups) if j.ref.name == "resnet")
    assert base_labels(job, {}) == {JOB: "resnet"}
    stray = next(p for p in state.pods if p.name.startswith("nginx"))
    with pytest.raises(PolicyFixError, match=f"its pods do not all carry {JOB}"):
        base_labels(dataclasses.replace(job, pods=(*job.pods, stray)), {})
