"""Discovery documents and errors served over HTTP (raw, as any client sees them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import urllib3

from tests.twin.apiserver_harness import Twin, running_twin


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    with running_twin(tmp_path_factory.mktemp("discovery")) as t:
        yield t


def get(twin: Twin, path: str, **headers: str) -> tuple[int, Any]:
    resp = urllib3.request("GET", twin.server.url + path, headers=headers, retries=False)
    return resp.status, orjson.loads(resp.data)


def test_version_and_groups(twin: Twin) -> None:
    status, version = get(twin, "/version")
    assert status == 200 and version["major"] == "1" and version["minor"] == "32"
    _, apis = get(twin, "/apis")
    groups = {g["name"]: g for g in apis["groups"]}
    assert {"apps", "batch", "kubeflow.org", "cilium.io", "networking.k8s.io",
            "coordination.k8s.io", "rbac.authorization.k8s.io"} <= set(groups)
    kubeflow = groups["kubeflow.org"]
    assert [v["version"] for v in kubeflow["versions"]] == ["v1", "v2beta1"]
    assert kubeflow["preferredVersion"]["version"] == "v1"


def test_resource_lists(twin: Twin) -> None:
    _, core = get(twin, "/api/v1")
    by_name = {r["name"]: r for r in core["resources"]}
    assert by_name["pods"]["shortNames"] == ["po"] and by_name["pods"]["namespaced"]
    assert by_name["pods/binding"]["verbs"] == ["create"]
    assert by_name["nodes"]["namespaced"] is False
    _, v2 = get(twin, "/apis/kubeflow.org/v2beta1")
    assert [r["name"] for r in v2["resources"]] == ["mpijobs", "mpijobs/status"]
    _, group = get(twin, "/apis/cilium.io")
    assert group["kind"] == "APIGroup"


@pytest.mark.parametrize(
    ("path", "code", "reason"),
    [
        ("/api/v1/namespaces/default/pods/missing", 404, "NotFound"),
        ("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/missing", 404, "NotFound"),
        ("/apis/nope.io/v1/things", 404, "NotFound"),
        ("/api/v1/pods?labelSelector=a%20in%20(b", 400, "BadRequest"),
        ("/api/v1/pods?fieldSelector=spec.bogus%3Dx", 400, "BadRequest"),
        ("/api/v1/pods?limit=abc", 400, "BadRequest"),
        ("/api/v1/pods?continue=garbage", 400, "BadRequest"),
    ],
)
def test_errors_are_status_objects(twin: Twin, path: str, code: int, reason: str) -> None:
    status, body = get(twin, path)
    assert status == code
    assert body["kind"] == "Status" and body["reason"] == reason and body["code"] == code


def test_table_for_kubectl(twin: Twin) -> None:
    status, table = get(twin, "/api/v1/namespaces",
                        Accept="application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
    assert status == 200 and table["kind"] == "Table"
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names == ["Name", "Status", "Age"]
    assert [r["cells"][0] for r in table["rows"]] == [
        "default", "kube-node-lease", "kube-public", "kube-system"]


def test_unknown_twin_endpoint(twin: Twin, tmp_path: Path) -> None:
    status, body = get(twin, "/twin/nothing")
    assert status == 404 and body["reason"] == "NotFound"


def test_refused_request_bodies_are_drained_on_keep_alive(twin: Twin) -> None:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(twin.server.url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    body = b'{"metadata": {"labels": {"a": "b"}}}'
    conn.request("PATCH", "/api/v1/namespaces/default", body=body,
                 headers={"Content-Type": "text/plain"})
    first = conn.getresponse()
    assert first.status == 415 and orjson.loads(first.read())["reason"] == "UnsupportedMediaType"
    conn.request("GET", "/api/v1/namespaces/default")  # same connection
    second = conn.getresponse()
    assert second.status == 200
    assert orjson.loads(second.read())["metadata"]["name"] == "default"
    conn.close()
