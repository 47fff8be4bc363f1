"""A steady-state sweep asks nothing of the API server (0 list requests: it reads the watch cache)
and at most 3 queries of Prometheus, whatever the number of jobs: counted on the twin's request
audit (/twin/stats) and by a counting proxy in front of a real Prometheus."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.runtime.root import Root
from agent.settings import load_settings
from agent.store.migrate import upgrade_on_start
from agent.twin import apiserver, kubeconfig
from agent.twin.resources import lookup
from agent.twin.store import Store
from tests.support.prometheus import requires_prometheus, running_prometheus
from tests.support.proxy import CountingProxy

pytestmark = [pytest.mark.prometheus, requires_prometheus]


def seed(store: Store, jobs: int) -> None:
    store.create(lookup("namespaces"), {"metadata": {"name": "ml"}})
    for z in "ab":
        store.create(lookup("nodes"), {"metadata": {"name": f"n-{z}", "labels": {"topology.kubernetes.io/zone": z}},
                                       "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    for j in range(jobs):
        store.create(lookup("pytorchjobs"), {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                             "metadata": {"name": f"job-{j}", "namespace": "ml"},
                                             "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 2}}}},
                     namespace="ml")
        for r, node in (("master-0", "n-b" if j % 2 else "n-a"), ("worker-0", "n-a"), ("worker-1", "n-a")):
            store.create(lookup("pods"), {"metadata": {
                "name": f"job-{j}-{r}", "namespace": "ml",
                "labels": {"training.kubeflow.org/job-name": f"job-{j}",
                           "training.kubeflow.org/replica-type": r.split("-")[0]},
                "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": f"job-{j}",
                                     "uid": f"u{j}", "controller": True}]},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
                "status": {"phase": "Running"}}, namespace="ml")


def stats(url: str, *, reset: bool = False) -> Any:
    request = urllib.request.Request(f"{url}/twin/stats{'/reset' if reset else ''}",
                                     data=b"" if reset else None, method="POST" if reset else "GET")
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read() or b"{}")


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[CountingProxy]:
    with running_prometheus(tmp_path) as prom:
        proxy = CountingProxy(prom.url)
        try:
            yield proxy
        finally:
            proxy.stop()


@pytest.mark.parametrize("jobs", [2, 40])
def test_sweep_lists_nothing_and_queries_prometheus_at_most_three_times(
    jobs: int, tmp_path: Path, prometheus: CountingProxy
) -> None:
    store = Store()
    seed(store, jobs)
    server = apiserver.serve(store)
    base = load_settings(None, {})
    settings = replace(
        base,
        cluster_name="budget",
        data_dir=str(tmp_path),
        kubernetes=replace(base.kubernetes, kubeconfig=str(kubeconfig.write(tmp_path / "kubeconfig", server.url))),
        database=replace(base.database, url=f"sqlite:///{tmp_path}/zm.db"),
        prometheus=replace(base.prometheus, url=prometheus.url),
    )
    root = Root(settings, playbooks=[])
    clients = root.clients()
    db = upgrade_on_start(settings)
    clients.source.start()
    try:
        assert clients.source.wait_synced(20)
        pipeline = root.sweep_pipeline(db)
        pipeline.sweep(None)  # the first sweep records the incidents; the steady state follows
        assert stats(server.url)["requests"].get("list pods", 0) >= 1  # the audit sees lists
        stats(server.url, reset=True)
        prometheus.reset()
        summary = pipeline.sweep(None)
        requests = stats(server.url)["requests"]
    finally:
        clients.source.stop()
        db.close()
        server.stop()
        store.close()
    assert summary["jobs"] == jobs
    assert summary["by_verdict"].get("zone_split_degraded", 0) + summary["by_verdict"].get("zone_split_blocked", 0) == jobs // 2
    assert not {k: n for k, n in requests.items() if not k.startswith("watch ")}, requests
    assert 1 <= prometheus.queries <= 3
