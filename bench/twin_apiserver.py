"""Benchmark: the twin's API server — a 150,000-pod list, and write-to-watcher latency.

1. Loads 150,000 realistic pods into a store (in-process), then times `GET /api/v1/pods` to the
   last byte: raw over http.client, and through the kubernetes client's
   `list_pod_for_all_namespaces(_preload_content=False)`. Target: <= 5 s each.
2. A fresh twin: writers create pods over HTTP at 1,000 writes/s for 5 s while one HTTP watch
   stream receives them; latency = watcher receipt - write request start. Target: median <= 50 ms.

Standalone: prints its figures, writes them to bench/results.json and exits 0 (a missed target
is reported, not an error). `--quick`: 15,000 pods and 1 s of writes.
"""

from __future__ import annotations

import gc
import http.client
import statistics
import sys
import threading
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any
from urllib.parse import urlsplit

import orjson
from kubernetes import client, config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.twin import kubeconfig
from agent.twin.apiserver import ApiServer
from agent.twin.resources import lookup
from agent.twin.store import Store

PODS = lookup("pods")
NAMESPACES = lookup("namespaces")
LIST_PODS = 150_000
WRITE_RATE = 1_000
WRITE_SECONDS = 5.0
WRITERS = 4


def realistic_pod(i: int) -> dict[str, Any]:
    job = f"job-{i // 16}"
    return {
        "metadata": {
            "name": f"{job}-worker-{i % 16}",
            "namespace": f"team-{i % 50}",
            "labels": {
                "training.kubeflow.org/job-name": job,
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": str(i % 16),
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
            },
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                 "name": job, "uid": f"00000000-0000-0000-0000-{i // 16:012d}",
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "nodeName": f"gpu-node-{i % 2000}",
            "containers": [{
                "name": "pytorch",
                "image": "registry.example.com/train/bert:1.4.2",
                "ports": [{"name": "pytorchjob-port", "containerPort": 23456}],
                "env": [{"name": "MASTER_ADDR", "value": f"{job}-master-0"},
                        {"name": "WORLD_SIZE", "value": "16"}],
                "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi"},
                              "requests": {"nvidia.com/gpu": "8", "cpu": "64",
                                           "memory": "512Gi"}},
            }],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                             "effect": "NoSchedule"}],
        },
        "status": {
            "phase": "Running",
            "podIP": f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}",
            "hostIP": f"192.168.{(i % 2000) // 250}.{(i % 2000) % 250}",
            "conditions": [{"type": "Ready", "status": "True"},
                           {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "pytorch", "ready": True, "restartCount": 0,
                                   "image": "registry.example.com/train/bert:1.4.2"}],
        },
    }


def _conn(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)


def bench_list() -> tuple[float, float, float, int]:
    store = Store(history_limit=1_000)
    for ns in range(50):
        store.create(NAMESPACES, {"metadata": {"name": f"team-{ns}"}})
    started = time.perf_counter()
    # Setup, not measured: the cyclic GC rescans millions of live dicts while they are loaded.
    gc.disable()
    for i in range(LIST_PODS):
        store.create(PODS, realistic_pod(i))
    gc.enable()
    gc.freeze()  # the stored pods are long-lived; a separate client process would not scan them
    load = time.perf_counter() - started
    print(f"loaded {LIST_PODS} pods in-process in {load:.1f} s")
    with ApiServer(store) as server, TemporaryDirectory() as tmp:
        conn = _conn(server.url)
        started = time.perf_counter()
        conn.request("GET", "/api/v1/pods")
        resp = conn.getresponse()
        body = resp.read()
        raw = time.perf_counter() - started
        size = len(body)
        parsed = orjson.loads(body)
        assert len(parsed["items"]) == LIST_PODS
        del parsed, body
        conn.close()
        path = kubeconfig.write(Path(tmp) / "kubeconfig", server.url)
        api = config.new_client_from_config(config_file=str(path))
        core = client.CoreV1Api(api)
        started = time.perf_counter()
        resp = core.list_pod_for_all_namespaces(_preload_content=False)
        data = resp.data
        via_client = time.perf_counter() - started
        assert len(data) == size
        # Client-side decode, not part of serving; GC paused as a lean client would.
        gc.disable()
        started = time.perf_counter()
        count = len(orjson.loads(data)["items"])
        decode = time.perf_counter() - started
        gc.enable()
        assert count == LIST_PODS
        api.close()
    store.close()
    return raw, via_client, decode, size


def bench_watch_latency() -> list[float]:
    store = Store()
    sent: dict[str, float] = {}
    latencies: list[float] = []
    with ApiServer(store) as server:
        url = server.url
        rv = store.resource_version
        conn = _conn(url)
        conn.request("GET", f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}")
        resp = conn.getresponse()
        total = int(WRITE_RATE * WRITE_SECONDS)
        done = threading.Event()

        def watch() -> None:
            seen = 0
            for line in resp:
                now = time.perf_counter()
                event = orjson.loads(line)
                name = event["object"]["metadata"]["name"]
                if event["type"] == "ADDED":
                    latencies.append(now - sent[name])
                    seen += 1
                    if seen == total:
                        break
            done.set()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()

        def write(w: int) -> None:
            c = _conn(url)
            interval = WRITERS / WRITE_RATE
            start = time.perf_counter()
            for n in range(total // WRITERS):
                due = start + n * interval
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                name = f"w{w}-{n}"
                sent[name] = time.perf_counter()
                c.request("POST", "/api/v1/namespaces/default/pods",
                          body=orjson.dumps({"metadata": {"name": name},
                                             "spec": {"containers": [{"name": "c",
                                                                      "image": "i"}]}}),
                          headers={"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                assert r.status == 201
            c.close()

        started = time.perf_counter()
        writers = [threading.Thread(target=write, args=(w,), daemon=True)
                   for w in range(WRITERS)]
        for t in writers:
            t.start()
        for t in writers:
            t.join()
        elapsed = time.perf_counter() - started
        done.wait(timeout=60)
        conn.close()
        print(f"wrote {total} pods over HTTP in {elapsed:.2f} s "
              f"({total / elapsed:.0f} writes/s achieved)")
    store.close()
    return latencies


def main() -> int:
    global LIST_PODS, WRITE_SECONDS
    from bench.results import Figure, Results, percentile, quick_mode

    quick, _ = quick_mode(sys.argv[1:])
    if quick:
        LIST_PODS, WRITE_SECONDS = 15_000, 1.0
    raw, via_client, decode, size = bench_list()
    print(f"list {LIST_PODS} pods ({size / 1e6:.0f} MB JSON): raw HTTP {raw:.2f} s; "
          f"kubernetes client (_preload_content=False) {via_client:.2f} s "
          f"(client-side orjson decode of that body: {decode:.2f} s more)")
    latencies = bench_watch_latency()
    ms = sorted(x * 1000 for x in latencies)
    median = statistics.median(ms)
    p99 = ms[int(len(ms) * 0.99) - 1]
    print(f"write -> watcher latency at {WRITE_RATE} writes/s: median {median:.1f} ms, "
          f"p99 {p99:.1f} ms, max {ms[-1]:.1f} ms ({len(ms)} events)")
    ok = raw <= 5 and via_client <= 5 and median <= 50
    print("targets: list <= 5 s, median latency <= 50 ms:", "met" if ok else "MISSED")
    out = Results("twin_apiserver", quick=quick)
    sizes = {"pods": LIST_PODS, "json_mb": round(size / 1e6)}
    target = None if quick else 5.0
    out.add(Figure("GET /api/v1/pods, raw HTTP", "s", raw, target=target, sizes=sizes))
    out.add(Figure("GET /api/v1/pods, kubernetes client", "s", via_client, target=target, sizes=sizes))
    out.add(Figure("write -> HTTP watcher latency", "ms", median, p95=percentile(ms, 0.95),
                   target=50.0, note=f"{WRITE_RATE} writes/s", sizes={"writes_per_s": WRITE_RATE}))
    out.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
