"""Kubernetes source against the twin over real HTTP: sync, live changes, and watch resilience.

The cache must equal the server's state (object by object, after slimming) after initial sync,
after live writes, and after recovering from fault injection: streams cut, a 410 storm (history
expired), 500s and 429s with Retry-After.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.settings import KubernetesSettings
from agent.sources.cache import ClusterCache
from agent.sources.kube import Informer, KubeSource
from agent.sources.kubeapi import KubeApi, build_api_client
from agent.sources.resources import RESOURCES
from agent.sources.slim import slimmer
from agent.twin import apiserver, kubeconfig
from agent.twin.resources import lookup
from agent.twin.store import Store
from tests.support import objects
from tests.support.objects import JOB_NAME

NODES = lookup("nodes")
PODS = lookup("pods")
PYTORCH = lookup("pytorchjobs")
CNP = lookup("ciliumnetworkpolicies")


@pytest.fixture
def twin(tmp_path: Path) -> Iterator[tuple[Any, Any, KubeApi]]:
    store = Store()
    server = apiserver.serve(store)
    path = kubeconfig.write(tmp_path / "kubeconfig", server.url)
    api = KubeApi(build_api_client(KubernetesSettings(kubeconfig=str(path))))
    try:
        yield store, server, api
    finally:
        server.stop()
        store.close()


def _worker(i: int, *, job: str = "resnet", node: str | None = None) -> dict[str, Any]:
    """Worker `i` of `job` as it is created (no status yet)."""
    return objects.pod(f"{job}-worker-{i}", ns="default", node_name=node, phase=None,
                       labels={JOB_NAME: job, "i": str(i)})


def _seed(store: Any, pods: int = 20) -> None:
    for z in ("a", "b"):
        store.create(NODES, {"metadata": {"name": f"n-{z}", "labels": {"topology.kubernetes.io/zone": z}}})
    for i in range(pods):
        store.create(PODS, _worker(i, node="n-a" if i % 2 else "n-b"))
    store.create(CNP, {"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy", "metadata": {"name": "p", "namespace": "default"}, "spec": {"endpointSelector": {}}})


def _differences(store: Any, source: KubeSource) -> list[str]:
    problems = []
    for informer in source.informers:
        r = informer.resource
        rt = lookup(r.plural, r.group, r.version)
        server_items, _ = store.list(rt)
        slim = slimmer(r)
        want = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): slim(o) for o in server_items}
        have = {k: source.cache.get(r.name, *k) for k in source.cache.keys(r.name)}
        if want != have:
            missing = sorted(set(want) - set(have))[:3]
            extra = sorted(set(have) - set(want))[:3]
            changed = sorted(k for k in set(want) & set(have) if want[k] != have[k])[:3]
            problems.append(f"{r.name}: missing {missing} extra {extra} changed {changed}")
    return problems


def _eventually(check: Callable[[], list[str]], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    last: list[str] = []
    while time.monotonic() < deadline:
        last = check()
        if not last:
            return
        time.sleep(0.1)
    raise AssertionError(f"cache never matched the server: {last}")


def test_sync_then_live_changes(twin: tuple[Any, Any, KubeApi]) -> None:
    store, _server, api = twin
    _seed(store)
    cache = ClusterCache()
    source = KubeSource(api, cache, watch_timeout=30)
    chosen = {r.name for r in source.start()}
    try:
        assert {"pods", "nodes", "pytorchjobs.v1.kubeflow.org", "mpijobs.v1.kubeflow.org"} <= chosen
        assert "mpijobs.v2beta1.kubeflow.org" not in chosen  # v1 serves mpijobs: one flavour
        assert source.wait_synced(20)
        assert _differences(store, source) == []
        store.patch(PODS, "resnet-worker-0", {"metadata": {"labels": {"training.kubeflow.org/job-name": "other"}}}, namespace="default", patch_type="application/merge-patch+json")
        store.delete(PODS, "resnet-worker-1", namespace="default", grace_period_seconds=0)
        store.patch(NODES, "n-a", {"metadata": {"labels": {"topology.kubernetes.io/zone": "c"}}}, patch_type="application/merge-patch+json")
        store.create(PYTORCH, {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "resnet", "namespace": "default"}, "spec": {"pytorchReplicaSpecs": {}}})
        _eventually(lambda: _differences(store, source))
        assert cache.get("nodes", "", "n-a")["metadata"]["labels"]["topology.kubernetes.io/zone"] == "c"  # type: ignore[index]
    finally:
        started = time.monotonic()
        source.stop()
        assert time.monotonic() - started < 5


def test_cache_recovers_from_cut_streams_410_storm_500s_and_429s(
    twin: tuple[Any, Any, KubeApi],
) -> None:
    store, server, api = twin
    _seed(store, pods=10)
    restarts: list[tuple[str, str]] = []
    cache = ClusterCache()
    source = KubeSource(api, cache, watch_timeout=30, on_restart=lambda r, why: restarts.append((r, why)))
    source.start()
    assert source.wait_synced(20)
    stop = threading.Event()

    def writer() -> None:
        i = 100
        while not stop.is_set():
            store.create(PODS, _worker(i, node="n-a"))
            store.patch(PODS, f"resnet-worker-{i}", {"metadata": {"labels": {"x": "y"}}}, namespace="default", patch_type="application/merge-patch+json")
            if i % 3 == 0:
                store.delete(PODS, f"resnet-worker-{i - 1}", namespace="default", grace_period_seconds=0)
            i += 1
            time.sleep(0.01)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        for round_ in range(6):
            time.sleep(0.3)
            server.close_watches()
            if round_ % 2 == 0:
                server.expire_history()
                server.close_watches()
            if round_ == 2:
                server.faults.fail(6, code=500)
            if round_ == 4:
                server.faults.fail(4, code=429, retry_after=1)
                server.close_watches()
    finally:
        stop.set()
        thread.join(5)
    try:
        _eventually(lambda: _differences(store, source), timeout=40)
        reasons = {why for _, why in restarts}
        assert "gone" in reasons, restarts
        assert "error" in reasons, restarts
    finally:
        source.stop()


def test_list_in_pages_matches_the_server(twin: tuple[Any, Any, KubeApi]) -> None:
    store, server, api = twin
    _seed(store, pods=23)
    cache = ClusterCache()
    pods = next(r for r in RESOURCES if r.name == "pods")
    informer = Informer(api, pods, cache, page_size=5)
    server.accounting.reset()
    informer.list()
    assert server.accounting.snapshot() == {"list pods": 5}  # 23 pods: 5 pages of <= 5
    stats = informer.list_stats
    assert (stats.pages, stats.items, stats.largest_page_items) == (5, 23, 5)
    assert stats.pages_per_second > 0
    server_items, _ = store.list(PODS)
    slim = slimmer(pods)
    assert {(o["metadata"]["namespace"], o["metadata"]["name"]): slim(o) for o in server_items} == {
        k: cache.get("pods", *k) for k in cache.keys("pods")
    }


def test_an_expired_continue_token_restarts_the_list(twin: tuple[Any, Any, KubeApi]) -> None:
    store, server, api = twin
    _seed(store, pods=23)
    cache = ClusterCache()
    pods = next(r for r in RESOURCES if r.name == "pods")
    informer = Informer(api, pods, cache, page_size=5)
    server.accounting.reset()
    server.faults.set_latency(0.2)  # every request waits: the history expires mid-list

    def expire_after_second_page() -> None:
        deadline = time.monotonic() + 20
        while server.accounting.snapshot().get("list pods", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        store.create(PODS, _worker(99, node="n-a"))  # a write, then the history is compacted:
        store.compact()  # the tokens handed out so far are too old (410 Expired)

    expirer = threading.Thread(target=expire_after_second_page)
    expirer.start()
    try:
        informer.list()
    finally:
        expirer.join()
        server.faults.clear()
    lists = server.accounting.snapshot()["list pods"]
    assert lists >= 2 + 5  # two pages, the expired one, then a whole new list of 24 pods
    assert informer.list_stats.items == cache.count("pods") == 24
    server_items, _ = store.list(PODS)
    slim = slimmer(pods)
    assert {(o["metadata"]["namespace"], o["metadata"]["name"]): slim(o) for o in server_items} == {
        k: cache.get("pods", *k) for k in cache.keys("pods")
    }


CONFIGMAPS = lookup("configmaps")


def _config_map(name: str, namespace: str, labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace}, "data": {"labels": labels}}


def test_only_kube_system_cilium_config_is_watched_whatever_the_namespace_filter(
    twin: tuple[Any, Any, KubeApi],
) -> None:
    from agent.settings import NamespaceFilter

    store, _server, api = twin
    _seed(store, pods=2)
    store.create(CONFIGMAPS, _config_map("cilium-config", "kube-system", "k8s:!team"),
                 namespace="kube-system")
    store.create(CONFIGMAPS, _config_map("other", "kube-system", "x"), namespace="kube-system")
    store.create(CONFIGMAPS, _config_map("cilium-config", "default", "y"), namespace="default")
    cache = ClusterCache(namespaces=NamespaceFilter(include=["default"]))
    source = KubeSource(api, cache, watch_timeout=30)
    source.start()
    try:
        assert source.wait_synced(20)
        assert cache.keys("configmaps.cilium-config") == {("kube-system", "cilium-config")}
        store.patch(CONFIGMAPS, "cilium-config", {"data": {"labels": "k8s:!app"}},
                    namespace="kube-system", patch_type="application/merge-patch+json")
        _eventually(lambda: [] if (cache.get("configmaps.cilium-config", "kube-system",
                                             "cilium-config") or {}).get("data", {}).get("labels")
                    == "k8s:!app" else ["not yet"])  # fmt: skip
    finally:
        source.stop()


def test_a_forbidden_cilium_config_counts_as_synced_and_empty(tmp_path: Path) -> None:
    from agent.twin.cluster import TwinCluster
    from tests.remediation.harness import deploy_rbac
    from tests.twin.twin_fixtures import fast

    documents = deploy_rbac()
    for doc in documents:
        if doc["kind"] == "ClusterRole":
            doc["rules"] = [r for r in doc["rules"] if "configmaps" not in r["resources"]]
    with TwinCluster(fast("healthy")) as cluster:
        access = cluster.serve_api_as(documents)
        path = access.kubeconfig(tmp_path / "kubeconfig")
        api = KubeApi(build_api_client(KubernetesSettings(kubeconfig=str(path))))
        cache = ClusterCache()
        source = KubeSource(api, cache, watch_timeout=30)
        source.start()
        try:
            assert source.wait_synced(20), cache.synced_resources()
            assert "configmaps.cilium-config" in cache.synced_resources()
            assert cache.count("configmaps.cilium-config") == 0
        finally:
            source.stop()
