"""Benchmark: one explanation in the agent at 150,000 pods and 1,000 policies, and a what-if.

The policies are `bench/policy_check.py`'s 1,000 (zone-boundary CNPs, service NetworkPolicies and
CNPs, clusterwide CCNPs with deny rules); the pods are 18,750 PyTorchJobs of 8 (150,000) over its
50 namespaces. `explain` is timed as `GET /api/explain` runs it (`LiveExplainer.explain` over the
pipeline's parsed view: the state, the policy set with its warm caches, the facts' pods by
namespace), for 300 random worker -> master flows, first asked (cold) and asked again; target p95
<= 50 ms. Figures go to bench/results.json. `--quick`: 15,000 pods.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.model.cluster import ClusterState, ContainerPort, Namespace, Pod, PodPhase
from agent.policy import PolicySet, parse_policy
from agent.policy.explanation import parse_query
from agent.runtime.explainer import LiveExplainer
from agent.settings import DiagnosisSettings
from agent.topology.facts import ClusterFacts
from bench.policy_check import NAMESPACES, ZONES, manifests
from bench.results import Figure, Results, percentile, quick_mode

PODS = 150_000
PER_JOB = 8
ASKED = 300


def pods(total: int) -> list[Pod]:
    out = []
    port = (ContainerPort(23456, "pytorchjob-port"),)
    for j in range(total // PER_JOB):
        ns = NAMESPACES[j % len(NAMESPACES)]
        for r in range(PER_JOB):
            role = "master" if r == 0 else "worker"
            labels = {
                "training.kubeflow.org/job-name": f"job-{j}",
                "training.kubeflow.org/replica-type": role,
                "training.kubeflow.org/replica-index": str(0 if r == 0 else r - 1),
                "zone": ZONES[(j + (r == 0 and j % 4 == 0)) % 3],
                "tier": f"t{j % 40}",
                "pod-template-hash": f"{j:x}",
            }
            out.append(Pod(ns, f"job-{j}-{role}-{max(r - 1, 0)}", labels, node_name="n",
                           phase=PodPhase.RUNNING, ports=port, service_account="trainer"))
    return out


def main() -> int:
    quick, _ = quick_mode(sys.argv[1:])
    total = 15_000 if quick else PODS
    all_pods = pods(total)
    namespaces = {ns: Namespace(ns, {"env": "prod" if i % 5 else "sandbox",
                                     "kubernetes.io/metadata.name": ns})
                  for i, ns in enumerate(NAMESPACES)}  # fmt: skip
    state = ClusterState(namespaces=namespaces, pods=tuple(all_pods))
    by_ns: dict[str, list[Pod]] = {}
    for pod in all_pods:
        by_ns.setdefault(pod.namespace, []).append(pod)
    facts = ClusterFacts(mirror_keys=("zone",), pods_in={k: tuple(v) for k, v in by_ns.items()})
    policies = PolicySet(parse_policy(m) for m in manifests())
    explainer = LiveExplainer(lambda: (state, policies, facts), settings=DiagnosisSettings(),
                              ready=lambda: True)  # fmt: skip
    rng = random.Random(7)
    jobs = total // PER_JOB
    queries = []
    for _ in range(ASKED):
        j = rng.randrange(jobs)
        ns = NAMESPACES[j % len(NAMESPACES)]
        queries.append(parse_query(source=f"{ns}/job-{j}-worker-{rng.randrange(PER_JOB - 1)}",
                                   destination=f"{ns}/job-{j}-master-0", port="23456/TCP"))
    figures = {}
    for label in ("first asked", "asked again"):
        times = []
        for query in queries:
            t0 = time.perf_counter()
            explainer.explain(query)
            times.append((time.perf_counter() - t0) * 1000)
        figures[label] = times
        print(f"explain ({label}) at {total:,} pods, {len(policies.policies)} policies: "
              f"median {percentile(times, 0.5):.2f} ms, p95 {percentile(times, 0.95):.2f} ms, "
              f"p99 {percentile(times, 0.99):.2f} ms")
    out = Results("explain_latency", quick=quick)
    sizes = {"pods": total, "policies": len(policies.policies)}
    for label, times in figures.items():
        out.add(Figure(f"explain one flow ({label})", "ms", percentile(times, 0.5),
                       p95=percentile(times, 0.95), p99=percentile(times, 0.99),
                       target=50.0, target_on="p95", sizes=sizes))
    out.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
