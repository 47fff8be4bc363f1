"""kubectl's imperative commands against the whole twin: they send Kubernetes protobuf bodies for
built-in kinds (create namespace, deployment, job, configmap, secret), use the scale subresource
(scale) and a strategic merge patch (rollout restart); the controllers then act on the result."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.twin import kubeconfig
from agent.twin.cluster import TwinCluster
from agent.twin.protobuf import CONTENT_TYPE, MAGIC
from agent.twin.resources import lookup
from tests.twin.apiserver_harness import Twin
from tests.twin.twin_fixtures import fast, wait

REPLICASETS = lookup("replicasets", group="apps")


@pytest.fixture
def cluster() -> Iterator[TwinCluster]:
    with TwinCluster(fast("healthy")) as running_cluster:
        yield running_cluster


@pytest.fixture
def twin(cluster: TwinCluster, tmp_path: Path) -> Twin:
    server = cluster.serve_api()
    path = kubeconfig.write(tmp_path / "kubeconfig", server.url)
    return Twin(cluster.store, server, path, tmp_path / "cache")


def running(twin: Twin, selector: str) -> int:
    found = twin.store.list(lookup("pods"), namespace="demo", label_selector=selector)[0]
    live = [p for p in found if not p["metadata"].get("deletionTimestamp")]
    return sum(p["status"].get("phase") == "Running" for p in live)


def test_create_scale_and_restart_with_kubectl(cluster: TwinCluster, twin: Twin) -> None:
    assert twin.kubectl("create", "namespace", "demo").stdout == "namespace/demo created\n"
    twin.kubectl("create", "deployment", "web", "--image=nginx:1.27", "--replicas=2",
                 "--port=8080", "-n", "demo")  # fmt: skip
    twin.kubectl("create", "job", "once", "--image=busybox", "-n", "demo", "--", "echo", "hi")
    twin.kubectl("create", "configmap", "cfg", "--from-literal=a=b", "-n", "demo")
    twin.kubectl("create", "secret", "generic", "s", "--from-literal=token=t0p", "-n", "demo")

    deployment = json.loads(twin.kubectl("get", "deployment", "web", "-n", "demo",
                                         "-o", "json").stdout)  # fmt: skip
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "nginx:1.27" and container["name"] == "nginx"
    assert [p["containerPort"] for p in container["ports"]] == [8080]
    job = json.loads(twin.kubectl("get", "job", "once", "-n", "demo", "-o", "json").stdout)
    (worker,) = job["spec"]["template"]["spec"]["containers"]
    assert worker["command"] == ["echo", "hi"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    cfg = json.loads(twin.kubectl("get", "configmap", "cfg", "-n", "demo", "-o", "json").stdout)
    assert cfg["data"] == {"a": "b"}
    secret = json.loads(twin.kubectl("get", "secret", "s", "-n", "demo", "-o", "json").stdout)
    assert secret["data"] == {"token": "dDBw"} and secret["type"] == "Opaque"

    wait(cluster, lambda: running(twin, "app=web") == 2)
    assert twin.kubectl("scale", "deployment/web", "--replicas=3", "-n", "demo").stdout == (
        "deployment.apps/web scaled\n")  # fmt: skip
    wait(cluster, lambda: running(twin, "app=web") == 3)
    scale = json.loads(twin.kubectl("get", "--raw",
                                    "/apis/apps/v1/namespaces/demo/deployments/web/scale").stdout)  # fmt: skip
    assert scale["kind"] == "Scale" and scale["spec"] == {"replicas": 3}
    assert scale["status"]["selector"] == "app=web"

    before = {r["metadata"]["name"] for r in twin.store.list(REPLICASETS, namespace="demo")[0]}
    twin.kubectl("rollout", "restart", "deployment/web", "-n", "demo")
    wait(cluster, lambda: len(twin.store.list(REPLICASETS, namespace="demo")[0]) == 2)
    after = {r["metadata"]["name"] for r in twin.store.list(REPLICASETS, namespace="demo")[0]}
    (fresh,) = after - before
    wait(cluster, lambda: running(twin, f"pod-template-hash={fresh.rsplit('-', 1)[1]}") == 3)


def test_a_kind_the_twin_cannot_decode_is_415_naming_the_media_type(twin: Twin) -> None:
    type_meta = b"\x0a\x0fkubeflow.org/v1\x12\x0aPyTorchJob"  # apiVersion, kind
    envelope = b"\x0a" + bytes([len(type_meta)]) + type_meta + b"\x12\x00"
    request = urllib.request.Request(
        twin.server.url + "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs",
        data=MAGIC + envelope,
        method="POST",
        headers={"Content-Type": CONTENT_TYPE},
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    status = json.loads(err.value.read())
    err.value.close()
    assert err.value.code == 415
    assert status["kind"] == "Status" and status["reason"] == "UnsupportedMediaType"
    assert CONTENT_TYPE in status["message"] and "PyTorchJob" in status["message"]
