"""Benchmark: detection latency, from the last pod's binding to the incident stored, on the twin.

The agent runs in-process (leader election on, SQLite, default 500 ms debounce) against the twin
over real HTTP. Each round creates a PyTorchJob that the twin's scheduler splits across zones
(seed-blocked's job, renamed), records when its last pod was bound (the twin store's own watch),
waits for the incident in the database, then deletes the job. Prints median, p95 and max.
Usage: `python bench/agent_detection.py [ROUNDS] [POD_START_SECONDS]` (defaults 20 and 2: the
seed scenario's timing; with 0.5 the twin's label stamping lands inside the debounce window and
restarts it, the worst case).
"""

from __future__ import annotations

import copy
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    # seconds from binding to the twin's kubelet start, which also stamps the zone-mirroring label
    # (a diagnosis-relevant change that restarts the debounce window when it lands inside it)
    pod_start = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    from agent.model.incident import IncidentQuery
    from agent.runtime.app import Agent
    from agent.runtime.pipeline import AgentPipeline
    from agent.settings import load_settings
    from agent.store.migrate import upgrade_on_start
    from agent.twin.cluster import TwinCluster
    from agent.twin.kubeconfig import write as write_kubeconfig
    from agent.twin.resources import lookup
    from agent.twin.scenario import load_scenario

    scenario = load_scenario("seed-blocked")
    job = next(o for o in scenario.objects if o.get("kind") == "PyTorchJob")
    scenario = replace(
        scenario,
        objects=[o for o in scenario.objects if o.get("kind") != "PyTorchJob"],
        model=replace(scenario.model, pod_start_seconds=pod_start),
    )
    binds: dict[str, float] = {}
    lock = threading.Lock()

    def on_pod(event: Any) -> None:
        obj = event.object
        if (obj.get("spec") or {}).get("nodeName"):
            with lock:
                binds.setdefault(obj["metadata"]["name"], time.time())

    latencies: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        cluster = TwinCluster(scenario)
        unsubscribe = cluster.store.subscribe(lookup("pods"), on_pod)
        cluster.start()
        api = cluster.serve_api()
        kube = write_kubeconfig(Path(tmp) / "kubeconfig", api.url)
        base = load_settings(None, {})
        settings = replace(
            base,
            cluster_name="bench",
            data_dir=tmp,
            playbooks_dir=str(ROOT / "playbooks"),
            kubernetes=replace(base.kubernetes, kubeconfig=str(kube)),
            database=replace(base.database, url=f"sqlite:///{tmp}/zm.db"),
            http=replace(base.http, host="127.0.0.1", port=0),
            leader_election=replace(
                base.leader_election, namespace="default",
                lease_duration=timedelta(seconds=3), renew_deadline=timedelta(seconds=2),
                retry_period=timedelta(milliseconds=500),
            ),
        )
        store = upgrade_on_start(settings)
        agent = Agent(settings, pipeline_factory=lambda parts: AgentPipeline(parts, store))
        agent.start()
        pytorchjobs = lookup("pytorchjobs")
        try:
            for i in range(rounds):
                name = f"bench-{i}"
                obj = copy.deepcopy(job)
                obj["metadata"]["name"] = name
                cluster.apply(obj)
                deadline = time.monotonic() + 60
                incident = None
                while time.monotonic() < deadline and incident is None:
                    found = store.list_incidents(IncidentQuery(namespace="ml", name=name, limit=5))
                    incident = next(iter(found.incidents), None)
                    time.sleep(0.01)
                if incident is None:
                    print(f"round {i}: no incident within 60 s")
                    return 1
                with lock:
                    last = max(t for pod, t in binds.items() if pod.startswith(f"{name}-"))
                latencies.append(incident.opened_at.timestamp() - last)
                cluster.store.delete(pytorchjobs, name, namespace="ml")
                cluster.wait_until(
                    lambda n=name: not [
                        p for p in cluster.store.list(lookup("pods"), namespace="ml")[0]
                        if p["metadata"]["name"].startswith(f"{n}-")
                    ],
                    timeout=30,
                )
        finally:
            agent.stop()
            store.close()
            unsubscribe()
            cluster.stop()
    latencies.sort()
    p95 = latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))]
    print(
        f"detection latency (last pod bound -> incident stored), {len(latencies)} rounds, "
        f"debounce 500 ms, pod start {pod_start:g} s: median {statistics.median(latencies) * 1000:.0f} ms, "
        f"p95 {p95 * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
