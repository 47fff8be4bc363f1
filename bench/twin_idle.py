"""Benchmark: CPU the twin uses at idle with a 100-node scenario (target: < 10% of one core).

Starts the whole twin (API server, scheduler, kubelet, operators, dataplane, training runtime,
metrics endpoint) on `generated:nodes=100,zones=3,jobs=10`, waits until every pod runs and the
controllers are idle, then measures this process's CPU time over a quiet window, and again while
something scrapes /metrics every second (what Prometheus does). Prints the figures, writes them to
bench/results.json and exits 0. `--quick`: 3 s windows instead of 10 s.
"""

from __future__ import annotations

import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.twin.cluster import TwinCluster
from agent.twin.resources import lookup
from agent.twin.scenario import load_scenario
from bench.results import Figure, Results, quick_mode

SCENARIO = "generated:nodes=100,zones=3,jobs=10"
WINDOW = 10.0


def cpu_share(seconds: float, action: object = None) -> float:
    start_cpu, start = time.process_time(), time.monotonic()
    while time.monotonic() - start < seconds:
        if callable(action):
            action()
        time.sleep(1.0)
    return (time.process_time() - start_cpu) / (time.monotonic() - start) * 100


def main() -> int:
    quick, _ = quick_mode(sys.argv[1:])
    window = 3.0 if quick else WINDOW
    scenario = load_scenario(SCENARIO)
    started = time.monotonic()
    with TwinCluster(scenario, speed=10) as cluster:
        cluster.serve_api()
        pods = lookup("pods")

        expected = sum(
            int(spec.get("replicas", 1))
            for obj in scenario.objects
            if obj["kind"] == "PyTorchJob"
            for spec in obj["spec"]["pytorchReplicaSpecs"].values()
        )

        def settled() -> bool:
            items = cluster.store.list(pods)[0]
            running = [p for p in items if p["status"].get("phase") == "Running"]
            return len(running) == expected and cluster.idle()

        if not cluster.wait_until(settled, timeout=120, interval=0.5):
            print("pods did not settle within 120 s", file=sys.stderr)
        count = len(cluster.store.list(pods)[0])
        setup = time.monotonic() - started
        time.sleep(2.0)
        idle = cpu_share(window)

        def scrape() -> None:
            with urllib.request.urlopen(cluster.metrics.url + "/metrics", timeout=10) as resp:
                resp.read()

        scraped = cpu_share(window, scrape)
    print(f"twin idle ({SCENARIO}, {count} pods): setup {setup:.1f} s")
    print(f"  idle CPU: {idle:.2f}% of one core (target < 10%)")
    print(f"  with a 1 s /metrics scrape: {scraped:.2f}% of one core")
    out = Results("twin_idle", quick=quick)
    sizes = {"nodes": 100, "pods": count}
    out.add(Figure("twin idle CPU", "% of a core", idle, target=10.0, sizes=sizes))
    out.add(Figure("twin CPU with a 1 s /metrics scrape", "% of a core", scraped, sizes=sizes))
    out.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
