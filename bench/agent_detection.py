"""Benchmark: detection latency, last pod bound -> incident stored, on the twin; and the same split
seen by the shipped Prometheus alert, side by side.

The agent runs in-process (leader election on, SQLite, default 500 ms debounce) against the twin
over real HTTP. Each round creates a PyTorchJob that the twin's scheduler splits across zones
(seed-blocked's job, renamed) while the agent runs, records when its last pod was bound (the twin
store's own watch), then waits until the incident is visible in the database (polled every 2 ms
on a connection of its own) and, in the first case, until the alert `TrainingJobSplitAcrossZones`
of deploy/prometheus/rules.yaml fires on a real Prometheus scraping the same twin's exporters
(`/api/v1/alerts` polled every 50 ms). Then it deletes the job. Cases: the seed cluster alone,
and with 2,000 other (single-pod, healthy) PyTorchJobs in the cluster, bound before the agent
starts. Prometheus uses a test copy of the rules with `for: 5s` instead of the shipped `for: 2m`,
and a 1 s scrape and evaluation interval (the shipped `for` would add 115 s to every figure;
Alertmanager's group_wait, 30 s by default, comes on top and is not counted).
Target (issue 13): agent p95 <= 100 ms in both cases, from the last zone-mirroring label written
(the bind when the job's policies read none). A third case (issue 21) runs the `trainjob`
scenario's Kubeflow Trainer v2 TrainJob instead (torch, a dataset initializer then four GPU nodes
spread over two zones, no zone-mirroring label, no Prometheus): its pods are its JobSet's batch
Jobs', and the gang is complete when the JobSet's `numNodes` node pods are bound (target: last
node bound -> incident stored, p95 <= 100 ms). `--quick`: 3 rounds, no 2,000-job case.

Changes and their measured effect (2-core machine, shared):
- before: every change waited for the 500 ms debounce window: median 501 ms, p95 510 ms
  (20 rounds, seed cluster alone).
- the cache flags the watch event that binds a job's last expected pod (`Change.gang_complete`)
  and the detector hands it over at once, without the window: median 5.1 ms, p95 10.1 ms on the
  seed cluster; 15.3 / 19.3 ms with 2,000 other jobs (load average ~3, before the incremental
  mirror); the alert fired after 6,975 ms median (x1,378; x24,098 with the shipped `for: 2m`).
- with the incremental mirror (`bench/agent_steady.py`): 7.1 / 11.8 ms on the seed cluster,
  9.9 / 12.0 ms with 2,000 other jobs; alert 6,984 ms (x979; x17,100 with `for: 2m`).
- the right verdict first (issue 19, 2e6c0ea; found by `git bisect run` on `--quick`: 14.0 ms at
  its parent, 2,032 ms at it): a job is recorded only on a verdict no zone-mirroring label still
  to come can change. seed-blocked's policies select on `netpol.example.com/zone`, which the twin's
  kubelet stamps at pod start (`pod_start_seconds`: 2 s after the bind), so last bind -> stored is
  that wait plus the agent's part; before, the incident was stored ~10 ms after the bind as
  `zone_split_degraded` and changed to `zone_split_blocked` 2 s later. The 100 ms target is now on
  last label written -> incident stored (the label's watch event is diagnosed at once).
Usage: `python bench/agent_detection.py [--quick] [ROUNDS]`.
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.results import Figure, Results, percentile, quick_mode  # noqa: E402

ALERT = "TrainingJobSplitAcrossZones"
ALERT_FOR = "5s"


def test_rules(path: Path) -> Path:
    """A copy of the shipped rules with the split alert's `for:` shortened to ALERT_FOR."""
    doc = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules.yaml").read_text())
    found = False
    for group in doc["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == ALERT:
                rule["for"] = ALERT_FOR
                found = True
    if not found:
        raise SystemExit(f"{ALERT} is not in deploy/prometheus/rules.yaml")
    path.write_text(yaml.safe_dump(doc))
    return path


def with_other_jobs(scenario: Any, count: int) -> Any:
    """The scenario plus `count` single-pod CPU PyTorchJobs in namespace `batch`, on extra nodes
    of a third zone (so they neither compete with nor split like the seed job)."""
    if not count:
        return scenario
    template = scenario.nodes[-1]
    nodes = list(scenario.nodes)
    for i in range(max(1, count // 50)):
        node = copy.deepcopy(template)
        name = f"cpu-c-{i}"
        node["metadata"]["name"] = name
        node["metadata"]["labels"] |= {"kubernetes.io/hostname": name,
                                       "topology.kubernetes.io/zone": "us-east-1c"}
        node["spec"]["providerID"] = f"twin://us-east-1c/{name}"
        for section in ("capacity", "allocatable"):
            node["status"][section] |= {"cpu": "256", "memory": "1024Gi", "pods": "110"}
        nodes.append(node)
    jobs = [
        {
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": f"other-{i}", "namespace": "batch"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "OnFailure",
                     "template": {"spec": {"containers": [{
                         "name": "pytorch", "image": "registry.example.com/etl:1",
                         "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}}},
        }
        for i in range(count)
    ]
    namespaces = [*scenario.namespaces, {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": "batch", "labels": {"team": "etl"}}}]
    return replace(scenario, nodes=nodes, namespaces=namespaces, objects=[*scenario.objects, *jobs])


def firing_alerts(url: str) -> set[str]:
    with urllib.request.urlopen(f"{url}/api/v1/alerts", timeout=5) as resp:
        data = json.loads(resp.read())
    return {
        a["labels"].get("created_by_name", "")
        for a in data["data"]["alerts"]
        if a["labels"].get("alertname") == ALERT and a["state"] == "firing"
    }


def run_case(*, rounds: int, others: int, prometheus: bool,
             scenario_name: str = "seed-blocked", kind: str = "PyTorchJob") -> dict[str, list[float]]:
    from sqlalchemy import create_engine, text

    from agent.model.workload import workload_named
    from agent.runtime.app import Agent
    from agent.runtime.root import Injected, Root
    from agent.settings import load_settings
    from agent.store.migrate import upgrade_on_start
    from agent.twin.cluster import TwinCluster
    from agent.twin.kubeconfig import write as write_kubeconfig
    from agent.twin.resources import lookup
    from agent.twin.scenario import load_scenario
    from tests.support.prometheus import running_prometheus

    scenario = load_scenario(scenario_name)
    job = next(o for o in scenario.objects if o.get("kind") == kind)
    scenario = replace(scenario, objects=[o for o in scenario.objects if o.get("kind") != kind])
    descriptor = workload_named(kind)
    assert descriptor is not None, kind
    scenario = with_other_jobs(scenario, others)
    mirror = scenario.model.pod_zone_label  # the label the twin's kubelet stamps at pod start
    binds: dict[str, float] = {}
    labelled: dict[str, float] = {}
    lock = threading.Lock()

    def on_pod(event: Any) -> None:
        obj = event.object
        name = obj["metadata"]["name"]
        if (obj.get("spec") or {}).get("nodeName"):
            with lock:
                binds.setdefault(name, time.time())
        if mirror and (obj["metadata"].get("labels") or {}).get(mirror):
            with lock:
                labelled.setdefault(name, time.time())

    out: dict[str, list[float]] = {"agent": [], "agent_decided": [], "alert": [], "labels": [],
                                   "from_label": [], "from_label_decided": []}
    pods = lookup("pods")
    with tempfile.TemporaryDirectory() as tmp:
        cluster = TwinCluster(scenario)
        unsubscribe = cluster.store.subscribe(pods, on_pod)
        cluster.start()
        api = cluster.serve_api()
        if others:
            started = time.monotonic()
            settled = cluster.wait_until(
                lambda: sum(1 for p in cluster.store.list(pods, namespace="batch")[0]
                            if p["spec"].get("nodeName")) >= others,
                timeout=600, interval=1.0,
            )
            print(f"  {others} other jobs bound in {time.monotonic() - started:.0f} s"
                  f"{'' if settled else ' (NOT all: timed out)'}", flush=True)
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
        agent = Agent(Root(settings, store=store, injected=Injected(remediation=False)))
        agent.start()
        reader = create_engine(f"sqlite:///{tmp}/zm.db")
        target = cluster.metrics.url.split("://", 1)[1].rstrip("/")
        prom_cm = running_prometheus(Path(tmp), scrape_targets=[target], scrape_interval="1s",
                                     rule_files=[test_rules(Path(tmp) / "rules.yaml")]) if prometheus else None
        prom = prom_cm.__enter__() if prom_cm is not None else None
        jobs = lookup(descriptor.plural, group=descriptor.group)
        try:
            if prom is not None:
                up_by = time.monotonic() + 60
                while not prom.targets_up():
                    if time.monotonic() > up_by:
                        raise SystemExit("prometheus never scraped the twin")
                    time.sleep(0.2)
            time.sleep(1.0)  # the agent's start-up diagnosis is done; leadership settled
            for i in range(rounds):
                name = f"bench-{i}"
                obj = copy.deepcopy(job)
                obj["metadata"]["name"] = name
                cluster.apply(obj)
                deadline = time.monotonic() + 60
                stored = fired = None
                with reader.connect() as conn:
                    while time.monotonic() < deadline:
                        now = time.time()
                        if stored is None and conn.execute(
                            text("SELECT 1 FROM incidents WHERE job_name = :n"), {"n": name}
                        ).first():
                            stored = now
                        conn.rollback()
                        if prom is not None and stored is not None and name in firing_alerts(prom.url):
                            fired = time.time()
                        if stored is not None and (prom is None or fired is not None):
                            break
                        time.sleep(0.002 if stored is None else 0.05)
                if stored is None or (prom is not None and fired is None):
                    raise SystemExit(f"round {i}: incident {stored} / alert {fired} missing after 60 s")
                decided = store.list_incidents(_query(name)).incidents[0].opened_at.timestamp()
                with lock:
                    last = max(t for pod, t in binds.items() if pod.startswith(f"{name}-"))
                    label = max((t for pod, t in labelled.items() if pod.startswith(f"{name}-")),
                                default=None)
                out["agent"].append(stored - last)
                out["agent_decided"].append(decided - last)
                if label is not None:
                    out["labels"].append(label - last)
                    out["from_label"].append(stored - label)
                    out["from_label_decided"].append(decided - label)
                if fired is not None:
                    out["alert"].append(fired - last)
                cluster.store.delete(jobs, name, namespace="ml")
                cluster.wait_until(
                    lambda n=name: not [
                        p for p in cluster.store.list(pods, namespace="ml")[0]
                        if p["metadata"]["name"].startswith(f"{n}-")
                    ],
                    timeout=30,
                )
        finally:
            if prom_cm is not None:
                prom_cm.__exit__(None, None, None)
            agent.stop()
            store.close()
            reader.dispose()
            unsubscribe()
            cluster.stop()
    return out


def _query(name: str) -> Any:
    from agent.model.incident import IncidentQuery

    return IncidentQuery(namespace="ml", name=name, limit=5)


def main() -> int:
    quick, args = quick_mode(sys.argv[1:])
    rounds = int(args[0]) if args else (3 if quick else 20)
    cases = [(0, True, "seed-blocked"), (0, False, "trainjob")]
    if not quick:
        cases.insert(1, (2000, False, "seed-blocked"))
    results = Results("agent_detection", quick=quick)
    for others, prometheus, scenario in cases:
        kind = "TrainJob" if scenario == "trainjob" else "PyTorchJob"
        print(f"case: {scenario} ({kind}), {others} other jobs, {rounds} rounds"
              f"{', with Prometheus' if prometheus else ''}", flush=True)
        got = run_case(rounds=rounds, others=others, prometheus=prometheus,
                       scenario_name=scenario, kind=kind)
        ms = [x * 1000 for x in got["agent"]]
        if kind == "TrainJob":
            print(f"  agent: last TrainJob node bound -> incident stored: median "
                  f"{statistics.median(ms):.1f} ms, p95 {percentile(ms, 0.95):.1f} ms, max "
                  f"{max(ms):.1f} ms (decided: median "
                  f"{statistics.median(got['agent_decided']) * 1000:.1f} ms)")
            results.add(Figure("last pod bound -> incident stored (TrainJob, torch, 4 nodes)", "ms",
                               statistics.median(ms), p95=percentile(ms, 0.95), target=100.0,
                               target_on="p95", sizes={"rounds": rounds, "other_jobs": others},
                               note="the trainjob scenario: pods of the TrainJob's JobSet's batch "
                                    "Jobs; gang = numNodes node pods (the initializer outside)"))
            continue
        label = "seed cluster" if not others else f"{others:,} other jobs"
        print(f"  agent: last pod bound -> incident stored: median {statistics.median(ms):.1f} ms, "
              f"p95 {percentile(ms, 0.95):.1f} ms, max {max(ms):.1f} ms "
              f"(decided: median {statistics.median(got['agent_decided']) * 1000:.1f} ms)")
        sizes = {"rounds": rounds, "other_jobs": others}
        results.add(Figure(f"last pod bound -> incident stored ({label})", "ms",
                           statistics.median(ms), p95=percentile(ms, 0.95), sizes=sizes,
                           note="visible to another connection, polled every 2 ms; includes the "
                                "twin's wait for the zone labels below"))
        if got["labels"]:
            waited = [x * 1000 for x in got["labels"]]
            own = [x * 1000 for x in got["from_label"]]
            print(f"  twin: last pod bound -> its zone-mirroring label written: median "
                  f"{statistics.median(waited):.1f} ms; agent: last label written -> incident stored: "
                  f"median {statistics.median(own):.1f} ms, p95 {percentile(own, 0.95):.1f} ms, max "
                  f"{max(own):.1f} ms (decided: median "
                  f"{statistics.median(got['from_label_decided']) * 1000:.1f} ms)")
            results.add(Figure(f"last pod bound -> its zone-mirroring label written, twin ({label})",
                               "ms", statistics.median(waited), p95=percentile(waited, 0.95),
                               sizes=sizes, note="the twin's kubelet stamps it at pod start "
                                                 "(pod_start_seconds: 2)"))
            results.add(Figure(f"last zone-mirroring label written -> incident stored ({label})", "ms",
                               statistics.median(own), p95=percentile(own, 0.95), target=100.0,
                               target_on="p95", sizes=sizes,
                               note="the first verdict no label still to come can change"))
        if got["alert"]:
            alert = [x * 1000 for x in got["alert"]]
            ratio = statistics.median(alert) / max(statistics.median(ms), 0.001)
            print(f"  Prometheus alert {ALERT} (for: {ALERT_FOR}, scrape/eval 1 s): median "
                  f"{statistics.median(alert):.0f} ms, p95 {percentile(alert, 0.95):.0f} ms; "
                  f"ratio alert/agent (medians) x{ratio:.0f}; with the shipped for: 2m add 115 s "
                  f"(x{(statistics.median(alert) + 115_000) / max(statistics.median(ms), 0.001):.0f})")
            results.add(Figure(f"last pod bound -> {ALERT} firing (for: {ALERT_FOR}, 1 s scrape/eval)",
                               "ms", statistics.median(alert), p95=percentile(alert, 0.95),
                               sizes=sizes, note="test copy of deploy/prometheus/rules.yaml"))
            results.add(Figure("alert / agent latency ratio (medians, for: 5s)", "x", ratio,
                               target=300.0, better="higher", sizes=sizes))
            results.add(Figure("alert / agent latency ratio (medians, shipped for: 2m)", "x",
                               (statistics.median(alert) + 115_000) / max(statistics.median(ms), 0.001),
                               target=300.0, better="higher", sizes=sizes,
                               note="measured with for: 5s, plus the 115 s the shipped for: 2m adds"))
    results.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
