"""Benchmark: PolicySet.check throughput against a 1,000-policy set (not a test; run by make bench).

Generates 1,000 policies over 50 namespaces (zone-boundary CNPs on a zone-mirroring label, service
NetworkPolicies and CNPs, clusterwide CCNPs with deny rules and namespace-label peers), and the
pods of 2,000 PyTorchJobs (1 master + 7 workers each, every pod a distinct Endpoint differing in
`replica-index`). Prints parse and build time and calls/s for: cold checks (every pair a new
projected identity), warm checks over every ordered pod pair of every job (the diagnosis's load),
and checks with fresh Endpoint objects each call. Figures go to bench/results.json. Exits 0.
`--quick`: 200 jobs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.model.network import Endpoint, PortRange, Protocol
from agent.policy import PolicySet, parse_policy
from bench.results import Figure, Results, quick_mode

ZONES = ("zone-a", "zone-b", "zone-c")
NAMESPACES = [f"team-{i:02d}" for i in range(50)]
POLICIES = 1000
JOBS = 2000
WORKERS = 7


def manifests() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for ns in NAMESPACES:  # 150 zone-boundary CNPs
        for zone in ZONES:
            out.append({
                "apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
                "metadata": {"name": f"{zone}-only", "namespace": ns},
                "spec": {"endpointSelector": {"matchLabels": {"zone": zone}},
                         "ingress": [{"fromEndpoints": [{"matchLabels": {"zone": zone}}]},
                                     {"fromEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "monitoring", "app": "prometheus"}}],
                                      "toPorts": [{"ports": [{"port": "9090", "protocol": "TCP"}]}]}]},
            })
    for i in range(20):  # 20 clusterwide policies with deny rules
        out.append({
            "apiVersion": "cilium.io/v2", "kind": "CiliumClusterwideNetworkPolicy",
            "metadata": {"name": f"guard-{i}"},
            "spec": {"endpointSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": [f"t{i}"]}]},
                     "ingressDeny": [{"fromEndpoints": [{"matchLabels": {"io.cilium.k8s.namespace.labels.env": "sandbox"}}]}],
                     "egress": [{"toEntities": ["cluster"]}],
                     "egressDeny": [{"toEndpoints": [{"matchLabels": {"quarantine": "true"}}],
                                     "toPorts": [{"ports": [{"port": "1024", "endPort": 65535}]}]}]},
        })
    k = 0
    while len(out) < POLICIES:  # service policies
        ns = NAMESPACES[k % len(NAMESPACES)]
        if k % 2 == 0:
            out.append({
                "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": f"svc-{k}", "namespace": ns},
                "spec": {"podSelector": {"matchLabels": {"app": f"svc-{k}"}},
                         "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": f"svc-{k + 1}"}}},
                                               {"namespaceSelector": {"matchLabels": {"env": "prod"}}}],
                                      "ports": [{"port": "http"}]}]},
            })
        else:
            out.append({
                "apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
                "metadata": {"name": f"svc-{k}", "namespace": ns},
                "spec": {"endpointSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": [f"svc-{k}"]}]},
                         "egress": [{"toEndpoints": [{"matchLabels": {"app": f"svc-{k + 3}"}}],
                                     "toPorts": [{"ports": [{"port": "8080", "protocol": "TCP"}]}]}]},
            })
        k += 1
    return out


def jobs() -> list[list[Endpoint]]:
    out = []
    for j in range(JOBS):
        ns = NAMESPACES[j % len(NAMESPACES)]
        ns_labels = {"env": "prod" if j % 5 else "sandbox"}
        pods = []
        for r in range(WORKERS + 1):
            role = "master" if r == 0 else "worker"
            labels = {
                "training.kubeflow.org/job-name": f"job-{j}",
                "training.kubeflow.org/replica-type": role,
                "training.kubeflow.org/replica-index": str(0 if r == 0 else r - 1),
                "zone": ZONES[(j + (r == 0 and j % 4 == 0)) % 3],
                "tier": f"t{j % 40}",
            }
            pods.append(Endpoint(ns, labels, ns_labels, "trainer",
                                 {("pytorchjob-port", Protocol.TCP): 23456}))
        out.append(pods)
    return out


def main() -> int:
    global JOBS
    quick, _ = quick_mode(sys.argv[1:])
    if quick:
        JOBS = 200
    raw = manifests()
    t0 = time.perf_counter()
    parsed = [parse_policy(m) for m in raw]
    t1 = time.perf_counter()
    policies = PolicySet(parsed)
    t2 = time.perf_counter()
    parse_ms = (t1 - t0) * 1000
    print(f"parse {len(parsed)} policies: {(t1 - t0) * 1000:.1f} ms; build set: {(t2 - t1) * 1000:.1f} ms")

    all_jobs = jobs()
    ranges = (PortRange.single(23456), PortRange(1024, 65535))

    # Cold: the first pair of each job in each range (new projected identities every job).
    t0 = time.perf_counter()
    cold = 0
    denied = 0
    for pods in all_jobs:
        for ports in ranges:
            denied += not policies.check(pods[1], pods[0], ports).allowed
            cold += 1
    t1 = time.perf_counter()
    cold_rate = cold / (t1 - t0)
    print(f"cold checks: {cold} in {(t1 - t0) * 1000:.1f} ms = {cold / (t1 - t0):,.0f} calls/s ({denied} denied)")

    # Warm: every ordered pod pair of every job, both ranges (the diagnosis's load).
    t0 = time.perf_counter()
    calls = 0
    check = policies.check
    for pods in all_jobs:
        for ports in ranges:
            for a in pods:
                for b in pods:
                    if a is not b:
                        check(a, b, ports)
                        calls += 1
    t1 = time.perf_counter()
    t_warm = t1 - t0
    print(f"warm checks (every ordered pod pair of {JOBS} jobs): {calls:,} in {t1 - t0:.2f} s = {calls / (t1 - t0):,.0f} calls/s")

    # Fresh Endpoint objects per call (projection recomputed, verdict cache hit).
    sample = [pods[1] for pods in all_jobs[:500]]
    t0 = time.perf_counter()
    for e in sample:
        fresh = Endpoint(e.namespace, dict(e.labels), dict(e.namespace_labels), e.service_account, dict(e.named_ports))
        check(fresh, all_jobs[0][0], ranges[0])
    t1 = time.perf_counter()
    print(f"fresh-endpoint checks: {len(sample)} in {(t1 - t0) * 1000:.1f} ms = {len(sample) / (t1 - t0):,.0f} calls/s")
    out = Results("policy_check", quick=quick)
    sizes = {"policies": len(parsed), "jobs": JOBS, "pods_per_job": WORKERS + 1}
    out.add(Figure("parse policies", "ms", parse_ms, sizes=sizes))
    out.add(Figure("cold checks", "calls/s", cold_rate, better="higher", sizes=sizes))
    out.add(Figure("warm checks, every pod pair of every job", "calls/s", calls / (t_warm), better="higher", sizes=sizes))
    out.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
