"""Deployment -> ReplicaSet -> pods, and a rollout on a template change."""

from __future__ import annotations

from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from tests.twin.twin_fixtures import fast, pods, running, wait

DEPLOYMENTS = lookup("deployments", group="apps")
REPLICASETS = lookup("replicasets", group="apps")

WEB = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "ml"},
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "web:1"}]},
        },
    },
}


def web_pods(cluster):  # type: ignore[no-untyped-def]
    return [
        p for p in pods(cluster, selector="app=web") if not p["metadata"].get("deletionTimestamp")
    ]


def test_deployment_creates_a_replicaset_and_pods_then_rolls_out() -> None:
    with running(fast("seed-degraded")) as cluster:
        cluster.store.create(DEPLOYMENTS, WEB)
        wait(
            cluster,
            lambda: (
                len(web_pods(cluster)) == 3
                and all(p["status"]["phase"] == "Running" for p in web_pods(cluster))
            ),
        )
        (rs,) = cluster.store.list(REPLICASETS, namespace="ml")[0]
        assert rs["metadata"]["name"].startswith("web-")
        tag = rs["metadata"]["labels"]["pod-template-hash"]
        assert all(p["metadata"]["name"].startswith(f"web-{tag}-") for p in web_pods(cluster))
        wait(
            cluster,
            lambda: (
                cluster.store.get(DEPLOYMENTS, "web", namespace="ml")
                .get("status", {})
                .get("readyReplicas")
                == 3
            ),
        )
        cluster.store.patch(DEPLOYMENTS, "web", {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "web:2"}]}}}},
                            namespace="ml", patch_type=PatchType.MERGE)  # fmt: skip
        wait(cluster, lambda: len(web_pods(cluster)) == 3 and all(
            p["spec"]["containers"][0]["image"] == "web:2" and p["status"]["phase"] == "Running" for p in web_pods(cluster)))  # fmt: skip
        sets = {
            r["metadata"]["name"]: r["spec"]["replicas"]
            for r in cluster.store.list(REPLICASETS, namespace="ml")[0]
        }
        assert sorted(sets.values()) == [0, 3]
        cluster.store.patch(
            DEPLOYMENTS,
            "web",
            {"spec": {"replicas": 1}},
            namespace="ml",
            patch_type=PatchType.MERGE,
        )
        wait(cluster, lambda: len(web_pods(cluster)) == 1)
