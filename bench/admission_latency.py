"""Benchmark: the admission webhook's latency at 150,000 pods and 1,000 policies, over HTTPS from
another process.

The cluster is `bench/policy_check.py`'s 1,000 policies (zone-boundary CNPs, service policies,
clusterwide CCNPs with deny rules) over its 50 namespaces, and 150,000 bound pods (18,750
PyTorchJobs of 8) on 2,400 8-GPU nodes in three zones (GPU-tainted), about 85% of the GPUs
taken; the view is the watch cache's parsed view as the pipeline hands it to the webhook
(`ClusterState`, the `PolicySet`, the `ClusterFacts`), handed out anew every half second by a
thread beside the requests as the agent's is (new maps of the same objects: an unchanged
cluster). The webhook (`agent.admission.webhook`, mode
enforce, no store: its records are written off the answer's path by a background writer) serves
on a loopback port over TLS with a certificate the agent's own code made. Another process (a
`multiprocessing` spawn) posts `REQUESTS` AdmissionReviews for new PyTorchJobs (a CPU master and
7 one-GPU workers, across the namespaces, each with its own name; their templates carry a
zone-mirroring label that lies) on one keep-alive HTTPS connection, as kube-apiserver reuses its
connections, verifying the CA, and times each from the request written to the answer read. Most
are placed (the patch returned); those in a `sandbox` namespace whose tier a clusterwide policy
guards have a flow denied in every zone and pass unchanged (`no_zone`), after the same search.
Target: p99 <= 5 ms. The serving thread's CPU time per answer (`time.thread_time`, the decision
and the JSON, not the TLS) is a second figure: what the wall time is on an idle machine, less
the loopback round trip; the wall time above it on a loaded machine is waiting for a CPU.
Figures go to bench/results.json.
`--quick`: 15,000 pods on 240 nodes.
"""

from __future__ import annotations

import gc
import http.client
import json
import multiprocessing
import ssl
import sys
import tempfile
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.admission.certificates import ServingContext, make_certificate, write_pair
from agent.admission.decision import View
from agent.admission.review import review_request
from agent.admission.server import AdmissionServer
from agent.admission.webhook import Webhook
from agent.model.cluster import ClusterState, ContainerPort, Namespace, Node, Pod, PodPhase, Taint
from agent.policy import PolicySet, parse_policy
from agent.settings import ADMISSION_PATH, DiagnosisSettings, Settings
from agent.topology.facts import cluster_facts
from bench.policy_check import NAMESPACES, ZONES, manifests
from bench.results import Figure, Results, percentile, quick_mode

PODS = 150_000
PER_JOB = 8
NODES_PER_1000_PODS = 16  # 150,000 pods on 2,400 nodes
GPUS = 8
REQUESTS = 2000
WARMUP = 50
REFRESH = 0.5  # seconds between views, as the agent's admission view is refreshed
GPU_TAINT = Taint("nvidia.com/gpu", "NoSchedule", "present")


def cluster(total: int) -> tuple[ClusterState, list[str]]:
    nodes = {}
    count = total * NODES_PER_1000_PODS // 1000
    per_node = total / count
    names = []
    for i in range(count):
        name = f"node-{i}"
        names.append(name)
        nodes[name] = Node(name, {"topology.kubernetes.io/zone": ZONES[i % 3],
                                  "kubernetes.io/hostname": name},
                           gpu_allocatable=GPUS, taints=(GPU_TAINT,))  # fmt: skip
    port = (ContainerPort(23456, "pytorchjob-port"),)
    pods = []
    for j in range(total // PER_JOB):
        ns = NAMESPACES[j % len(NAMESPACES)]
        node = names[int((j * PER_JOB) // per_node)]
        zone = nodes[node].zone
        for r in range(PER_JOB):
            role = "master" if r == 0 else "worker"
            labels = {"training.kubeflow.org/job-name": f"job-{j}",
                      "training.kubeflow.org/replica-type": role,
                      "training.kubeflow.org/replica-index": str(0 if r == 0 else r - 1),
                      "zone": zone or "", "tier": f"t{j % 40}"}  # fmt: skip
            # the workers of every 8th job hold a GPU each: about 85% of the GPUs taken
            gpus = 1 if r and j % 8 == 0 else 0
            pods.append(Pod(ns, f"job-{j}-{role}-{max(r - 1, 0)}", labels, node_name=node,
                            phase=PodPhase.RUNNING, ports=port, service_account="trainer",
                            gpu_request=gpus))  # fmt: skip
    namespaces = {ns: Namespace(ns, {"env": "prod" if i % 5 else "sandbox",
                                     "kubernetes.io/metadata.name": ns})
                  for i, ns in enumerate(NAMESPACES)}  # fmt: skip
    return ClusterState(nodes=nodes, namespaces=namespaces, pods=tuple(pods)), names


def new_job(i: int) -> tuple[dict[str, Any], str]:
    ns = NAMESPACES[i % len(NAMESPACES)]
    labels = {"zone": ZONES[1], "tier": f"t{i % 40}"}
    container = {"name": "pytorch", "image": "registry.example.com/llm:1",
                 "ports": [{"name": "pytorchjob-port", "containerPort": 23456}]}  # fmt: skip
    worker = {**container, "resources": {"requests": {"cpu": "4", "memory": "32Gi",
                                                      "nvidia.com/gpu": "1"},
                                         "limits": {"nvidia.com/gpu": "1"}}}  # fmt: skip
    obj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": f"new-{i}", "namespace": ns},
           "spec": {"pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": {"metadata": {"labels": labels},
                                                      "spec": {"containers": [container]}}},
               "Worker": {"replicas": 7, "template": {"metadata": {"labels": labels},
                                                      "spec": {"containers": [worker]}}}}}}  # fmt: skip
    return obj, ns


def client(port: int, ca_file: str, count: int, out: Any) -> None:
    """The other process: `count` reviews on one keep-alive HTTPS connection, each timed."""
    context = ssl.create_default_context(cafile=ca_file)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
    times, placed = [], 0
    bodies = []
    for i in range(count):
        obj, ns = new_job(i)
        bodies.append(json.dumps(review_request(obj, uid=f"req-{i}", group="kubeflow.org",
                                                version="v1", kind="PyTorchJob",
                                                resource="pytorchjobs", namespace=ns)).encode())
    headers = {"Content-Type": "application/json"}
    for body in bodies:
        started = time.perf_counter()
        conn.request("POST", ADMISSION_PATH, body=body, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        times.append((time.perf_counter() - started) * 1000)
        if answer.status == 200 and b'"patchType":"JSONPatch"' in data:
            placed += 1
    conn.close()
    out.put({"times": times, "placed": placed})


def main() -> int:
    quick, _ = quick_mode(sys.argv[1:])
    total = 15_000 if quick else PODS
    state, _ = cluster(total)
    policies = PolicySet(parse_policy(m) for m in manifests())
    facts = cluster_facts(state.nodes, state.pods)
    gc.freeze()  # as the agent does once its cache is loaded (agent.sources.gcpause)
    latest = [View(state, policies, facts)]
    stop = threading.Event()

    def refresh() -> None:
        """A new view every half second, as the agent's admission view is taken: new maps of
        the same node, namespace and pod objects, the facts' maps copied (the mirror's
        snapshot of an unchanged cluster), on a thread of its own beside the requests."""
        while not stop.wait(REFRESH):
            now = latest[0]
            fresh = replace(now.state, nodes=dict(now.state.nodes), namespaces=dict(now.state.namespaces))
            latest[0] = View(fresh, policies, replace(
                now.facts, gpu_used=dict(now.facts.gpu_used), pods_in=dict(now.facts.pods_in),
                zone_free=dict(now.facts.zone_free)))  # fmt: skip

    refresher = threading.Thread(target=refresh, name="bench-view", daemon=True)
    refresher.start()
    settings = Settings(diagnosis=DiagnosisSettings(pod_zone_label="zone"))
    counted: dict[str, int] = {}
    webhook = Webhook(settings, view=lambda: latest[0], ready=lambda: True, store=None,
                      count=lambda o: counted.__setitem__(o, counted.get(o, 0) + 1),
                      observe=lambda _s: None, now=lambda: datetime.now(UTC))  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-admission-") as tmp:
        certificate = make_certificate(["127.0.0.1"], now=datetime.now(UTC))
        serving = ServingContext(*write_pair(certificate, Path(tmp) / "tls"))
        ca_file = Path(tmp) / "ca.crt"
        ca_file.write_text(certificate.ca_pem)
        cpu: list[float] = []

        def handle(body: bytes) -> tuple[int, bytes]:
            started = time.thread_time()
            answer = webhook.handle(body)
            cpu.append((time.thread_time() - started) * 1000)
            return answer

        server = AdmissionServer(handle, host="127.0.0.1", port=0, context=serving.context)
        server.start()
        try:
            spawn = multiprocessing.get_context("spawn")
            results = spawn.Queue()
            process = spawn.Process(target=client, args=(server.port, str(ca_file),
                                                         REQUESTS + WARMUP, results))  # fmt: skip
            process.start()
            found = results.get(timeout=600)
            process.join(timeout=60)
        finally:
            server.stop()
            stop.set()
            refresher.join(timeout=5)
    times = found["times"][WARMUP:]
    assert found["placed"] == counted.get("placed"), (found["placed"], counted)
    shown = ", ".join(f"{n} {o}" for o, n in sorted(counted.items()))
    median, p95, p99 = (percentile(times, q) for q in (0.5, 0.95, 0.99))
    print(f"admission webhook over HTTPS at {total:,} pods, {len(policies.policies)} policies, "
          f"{len(state.nodes):,} nodes: median {median:.2f} ms, p95 {p95:.2f} ms, p99 {p99:.2f} ms "
          f"({REQUESTS} requests after {WARMUP}; outcomes: {shown})")
    out = Results("admission_latency", quick=quick)
    out.add(Figure("webhook answer over HTTPS (a new 8-pod PyTorchJob)", "ms", median,
                   p95=p95, p99=p99, target=5.0, target_on="p99",
                   sizes={"pods": total, "policies": len(policies.policies),
                          "nodes": len(state.nodes)}))  # fmt: skip
    used = cpu[WARMUP:]
    cpu_median, cpu_p99 = percentile(used, 0.5), percentile(used, 0.99)
    print(f"the webhook's CPU per answer (its thread, load-independent): median {cpu_median:.2f} ms, "
          f"p99 {cpu_p99:.2f} ms")
    out.add(Figure("webhook CPU per answer (the serving thread's CPU time)", "ms", cpu_median,
                   p95=percentile(used, 0.95), p99=cpu_p99,
                   sizes={"pods": total, "policies": len(policies.policies),
                          "nodes": len(state.nodes)}))  # fmt: skip
    out.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
