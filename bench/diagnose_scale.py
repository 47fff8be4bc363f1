"""Benchmark: load and diagnose a synthetic cluster, then a cluster twice as large.

Generates a JSON snapshot (`kind: List`) of N nodes in 3 zones, pods, Kubeflow training jobs and
network policies (base: 5,000 nodes, 150,000 pods, 2,000 jobs, 1,000 policies), then, in a fresh
subprocess per size (so peak RSS is per size), measures the load (read + parse) time, the diagnosis
time of all jobs (policy set + topology + verdicts; best of 3 fresh runs, first run shown too)
and peak RSS (`resource.getrusage`). Prints the
figures and the diagnosis-time ratio of the doubled cluster. Targets (2-core machine): diagnosis
<= 2 s, load <= 20 s, peak RSS <= 1.5 GB, doubling <= 2.3x. Exit 0 always (a benchmark, not a test);
targets missed are flagged in the output.

Figures go to bench/results.json. `--quick`: `--scale 0.05`.
Usage: python bench/diagnose_scale.py [--quick] [--scale 1.0] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ZONES = ("zone-a", "zone-b", "zone-c")
REPEAT = 3  # diagnosis runs per size; the best is reported (the machine is shared), and the first
KINDS = (
    ("PyTorchJob", "pytorchjob-controller", "master", "pytorchjob-port", 23456, 0.55),
    ("TFJob", "tfjob-controller", "chief", "tfjob-port", 2222, 0.15),
    ("MPIJob", "mpijob-controller", "launcher", "ssh", 22, 0.15),
    ("XGBoostJob", "xgboostjob-controller", "master", "xgboostjob-port", 9999, 0.15),
)


def _node(i: int) -> dict[str, Any]:
    zone = ZONES[i % 3]
    gpu = i % 5 < 3
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{i}",
            "labels": {
                "kubernetes.io/hostname": f"node-{i}",
                "topology.kubernetes.io/zone": zone,
                "node.kubernetes.io/instance-type": "p4d.24xlarge" if gpu else "m6i.8xlarge",
            },
        },
        "spec": {},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
    }
    if gpu:
        node["status"]["allocatable"]["nvidia.com/gpu"] = "8"
        node["spec"]["taints"] = [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
        ]
    return node


def _pod(
    *,
    name: str,
    ns: str,
    labels: dict[str, str],
    node: str | None,
    gpus: int,
    ports: list[dict[str, Any]],
    owner: dict[str, Any] | None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "4", "memory": "16Gi"}}
    if gpus:
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/train:1.0",
                    "resources": resources,
                    "ports": ports,
                }
            ],
            "restartPolicy": "OnFailure",
        },
        "status": {"phase": "Running" if node else "Pending"},
    }
    if owner is not None:
        pod["metadata"]["ownerReferences"] = [owner]
    if node is not None:
        pod["spec"]["nodeName"] = node
    return pod


def generate(
    *, nodes: int, pods: int, jobs: int, policies: int, seed: int = 7, per_job: int | None = None
) -> list[dict[str, Any]]:
    """The synthetic cluster's objects (deterministic for a seed). Two thirds of the pods are in
    training jobs, unless `per_job` fixes the pods of each job (the rest are service pods)."""
    rng = random.Random(seed)
    items: list[dict[str, Any]] = [_node(i) for i in range(nodes)]
    namespaces = [f"team-{i}" for i in range(max(1, jobs // 20))]
    for ns in namespaces:
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
            }
        )
    gpu_nodes = {
        z: [f"node-{i}" for i in range(nodes) if i % 5 < 3 and ZONES[i % 3] == z] for z in ZONES
    }
    cpu_nodes = {
        z: [f"node-{i}" for i in range(nodes) if i % 5 >= 3 and ZONES[i % 3] == z] for z in ZONES
    }
    if per_job is None:
        per_job = max(2, int(pods * 2 / 3) // jobs)
    weights = [k[5] for k in KINDS]
    count = 0
    for j in range(jobs):
        kind, operator, coord_type, port_name, port, _ = rng.choices(KINDS, weights)[0]
        ns = namespaces[j % len(namespaces)]
        name = f"job-{j}"
        home = ZONES[j % 3]
        split = j % 4 == 0  # a quarter of the jobs have their coordinator in another zone
        owner = {
            "apiVersion": "kubeflow.org/v1",
            "kind": kind,
            "name": name,
            "uid": f"uid-{j}",
            "controller": True,
        }
        items.append(
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": kind,
                "metadata": {"name": name, "namespace": ns, "labels": {}},
                "spec": {"runPolicy": {"cleanPodPolicy": "None"}},
                "status": {"conditions": [{"type": "Running", "status": "True"}]},
            }
        )
        for r in range(per_job):
            coordinator = r == 0
            rtype = coord_type if coordinator else "worker"
            index = 0 if coordinator else r - 1
            zone = ZONES[(j + 1) % 3] if coordinator and split else home
            pool = cpu_nodes[zone] if coordinator and kind != "PyTorchJob" else gpu_nodes[zone]
            node = pool[(j * 7 + r) % len(pool)]
            pending = j % 50 == 1 and r == per_job - 1
            labels = {
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/operator-name": operator,
                "training.kubeflow.org/replica-type": rtype,
                "training.kubeflow.org/replica-index": str(index),
                "zone": zone,
            }
            if coordinator:
                labels["training.kubeflow.org/job-role"] = "master"
            items.append(
                _pod(
                    name=f"{name}-{rtype}-{index}",
                    ns=ns,
                    labels=labels,
                    node=None if pending else node,
                    gpus=0 if coordinator and kind != "PyTorchJob" else 1,
                    ports=[{"name": port_name, "containerPort": port, "protocol": "TCP"}],
                    owner=owner,
                )
            )
            count += 1
    services = max(1, policies // 2)
    i = 0
    while count < pods:
        ns = namespaces[i % len(namespaces)]
        zone = ZONES[i % 3]
        svc = f"svc-{i % services}"
        pool = cpu_nodes[zone]
        items.append(
            _pod(
                name=f"{svc}-{i:07d}",
                ns=ns,
                labels={"app": svc, "pod-template-hash": f"{i % 977:x}", "zone": zone},
                node=pool[i % len(pool)],
                gpus=0,
                ports=[{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                owner={
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{svc}-rs",
                    "uid": f"rs-{i % services}",
                    "controller": True,
                },
            )
        )
        count += 1
        i += 1
    made = 0
    for ns in namespaces:  # zone-boundary CNPs on the mirroring label, as in the field
        for zone in ZONES:
            if made >= policies:
                break
            items.append(
                {
                    "apiVersion": "cilium.io/v2",
                    "kind": "CiliumNetworkPolicy",
                    "metadata": {"name": f"{zone}-only", "namespace": ns},
                    "spec": {
                        "endpointSelector": {"matchLabels": {"zone": zone}},
                        "ingress": [
                            {"fromEndpoints": [{"matchLabels": {"zone": zone}}]},
                            {
                                "fromEndpoints": [{"matchLabels": {"app": "prometheus"}}],
                                "toPorts": [{"ports": [{"port": "9090", "protocol": "TCP"}]}],
                            },
                        ],
                    },
                }
            )
            made += 1
    k = 0
    while made < policies:  # service policies: NetworkPolicies and CNPs on app labels
        ns = namespaces[k % len(namespaces)]
        if k % 2 == 0:
            items.append(
                {
                    "apiVersion": "networking.k8s.io/v1",
                    "kind": "NetworkPolicy",
                    "metadata": {"name": f"svc-{k}-ingress", "namespace": ns},
                    "spec": {
                        "podSelector": {"matchLabels": {"app": f"svc-{k % services}"}},
                        "ingress": [
                            {
                                "from": [
                                    {
                                        "podSelector": {
                                            "matchLabels": {"app": f"svc-{(k + 1) % services}"}
                                        }
                                    }
                                ],
                                "ports": [{"port": 8080, "protocol": "TCP"}],
                            }
                        ],
                    },
                }
            )
        else:
            items.append(
                {
                    "apiVersion": "cilium.io/v2",
                    "kind": "CiliumNetworkPolicy",
                    "metadata": {"name": f"svc-{k}-egress", "namespace": ns},
                    "spec": {
                        "endpointSelector": {
                            "matchExpressions": [
                                {"key": "app", "operator": "In", "values": [f"svc-{k % services}"]}
                            ]
                        },
                        "egress": [
                            {
                                "toEndpoints": [
                                    {"matchLabels": {"app": f"svc-{(k + 3) % services}"}}
                                ],
                                "toPorts": [{"ports": [{"port": "8080", "protocol": "TCP"}]}],
                            },
                            {"toEntities": ["kube-apiserver", "world"]},
                        ],
                    },
                }
            )
        made += 1
        k += 1
    return items


def peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM). Not `getrusage().ru_maxrss`: Linux carries the
    parent's high-water mark over a (v)fork + exec into it, so a child spawned by a large parent
    would report the parent's memory."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(path: Path) -> dict[str, Any]:
    """Load and diagnose one snapshot file in this process; figures in seconds and MB."""
    from agent.commands.diagnose import load_snapshot
    from agent.diagnosis.diagnose import diagnose_cluster
    from agent.policy import PolicySet
    from agent.settings import DiagnosisSettings

    wall, cpu = time.perf_counter(), time.process_time()
    snapshot = load_snapshot([path])  # what `zonemedic diagnose` runs: read, parse, gc freeze
    load = (time.perf_counter() - wall, time.process_time() - cpu)
    runs = []
    for _ in range(REPEAT):  # each run builds its policy set and caches from scratch
        wall, cpu = time.perf_counter(), time.process_time()
        result = diagnose_cluster(
            snapshot.state, PolicySet(snapshot.policies), settings=DiagnosisSettings()
        )
        runs.append((time.perf_counter() - wall, time.process_time() - cpu))
    verdicts: dict[str, int] = {}
    for f in result.findings:
        verdicts[f.verdict] = verdicts.get(f.verdict, 0) + 1
    return {
        "pods": len(snapshot.state.pods),
        "nodes": len(snapshot.state.nodes),
        "policies": len(snapshot.policies),
        "jobs": len(result.findings),
        "load_s": load[0],
        "load_cpu_s": load[1],
        "diagnose_first_s": runs[0][0],
        "diagnose_s": min(r[0] for r in runs),
        "diagnose_cpu_s": min(r[1] for r in runs),
        "peak_rss_mb": peak_rss_mb(),
        "verdicts": verdicts,
    }


def _run_child(path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--measure", str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(out.stdout))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--keep", type=Path, help="write the snapshots here and keep them")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="--scale 0.05")
    args = parser.parse_args()
    if args.quick:
        args.scale = 0.05
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    base = {"nodes": 5000, "pods": 150_000, "jobs": 2000, "policies": 1000}
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="zonemedic-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = []
    for factor in (1, 2):
        size = {k: int(v * args.scale * factor) for k, v in base.items()}
        path = workdir / f"cluster-x{factor}.json"
        t0 = time.perf_counter()
        items = generate(**size)
        path.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        del items
        gen = time.perf_counter() - t0
        r = _run_child(path)
        results.append(r)
        print(
            f"x{factor}: {r['nodes']} nodes, {r['pods']} pods, {r['jobs']} jobs diagnosed, "
            f"{r['policies']} policies ({path.stat().st_size / 1e6:.0f} MB JSON, generated in {gen:.1f} s)"
        )
        print(
            f"    load {r['load_s']:.2f} s (CPU {r['load_cpu_s']:.2f} s)   diagnosis"
            f" {r['diagnose_s']:.2f} s (CPU {r['diagnose_cpu_s']:.2f} s; best of {REPEAT},"
            f" first run {r['diagnose_first_s']:.2f} s)   peak RSS {r['peak_rss_mb']:.0f} MB"
        )
        print(f"    verdicts {r['verdicts']}")
        if not args.keep:
            path.unlink()
    ratio = results[1]["diagnose_s"] / results[0]["diagnose_s"]
    ratio_cpu = results[1]["diagnose_cpu_s"] / results[0]["diagnose_cpu_s"]
    print(f"doubling the cluster: diagnosis x{ratio:.2f} (CPU time x{ratio_cpu:.2f})")
    if args.scale == 1.0:
        first = results[0]
        # wall clock, and CPU time (what an idle machine's wall clock would be: single-threaded)
        checks = [
            ("diagnosis <= 2 s", first["diagnose_s"] <= 2.0, first["diagnose_cpu_s"] <= 2.0),
            ("load <= 20 s", first["load_s"] <= 20.0, first["load_cpu_s"] <= 20.0),
            ("peak RSS <= 1.5 GB", first["peak_rss_mb"] <= 1536, first["peak_rss_mb"] <= 1536),
            ("doubling <= 2.3x", ratio <= 2.3, ratio_cpu <= 2.3),
        ]
        for label, ok_wall, ok_cpu in checks:
            print(
                f"    {'ok  ' if ok_wall else 'MISS'} wall   {'ok  ' if ok_cpu else 'MISS'} CPU   {label}"
            )
    if not args.keep:
        workdir.rmdir()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.results import Figure, Results

    out = Results("diagnose_scale", quick=args.quick)
    full = args.scale == 1.0
    for factor, r in zip((1, 2), results, strict=True):
        sizes = {"pods": r["pods"], "nodes": r["nodes"], "jobs": r["jobs"], "policies": r["policies"]}
        label = f"{r['pods']:,} pods"
        out.add(Figure(f"offline load (JSON) {label}", "s", r["load_s"],
                       target=20.0 if full and factor == 1 else None, sizes=sizes))
        out.add(Figure(f"offline diagnosis of all jobs {label} (best of {REPEAT})", "s",
                       r["diagnose_s"], target=2.0 if full and factor == 1 else None, sizes=sizes,
                       note=f"CPU {r['diagnose_cpu_s']:.2f} s"))
        out.add(Figure(f"offline peak RSS {label}", "MB", r["peak_rss_mb"],
                       target=1536.0 if full and factor == 1 else None, sizes=sizes))
    out.add(Figure("offline diagnosis, doubling the cluster", "x", ratio,
                   target=2.3 if full else None, note=f"CPU x{ratio_cpu:.2f}"))
    out.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
