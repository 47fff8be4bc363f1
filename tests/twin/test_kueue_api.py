"""Kueue's kinds over the twin's HTTP API: kubectl tables with upstream's printer columns, the
official client deactivating a Workload, discovery with and without Kueue, RBAC for them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from agent.twin import kubeconfig
from agent.twin.access import Access
from agent.twin.cluster import TwinCluster
from tests.support.waiting import wait
from tests.twin.apiserver_harness import running_twin
from tests.twin.twin_fixtures import all_running, fast

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
GROUP, VERSION = "kueue.x-k8s.io", "v1beta1"
SERVICE_ACCOUNT = [
    {"apiVersion": "v1", "kind": "ServiceAccount",
     "metadata": {"name": "agent", "namespace": "zonemedic"}},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "workload-reader"},
     "rules": [{"apiGroups": [GROUP], "resources": ["workloads", "clusterqueues"],
                "verbs": ["get", "list", "watch"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "agent-reads-workloads"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                 "name": "workload-reader"},
     "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": "zonemedic"}]},
]  # fmt: skip


@pytest.fixture(scope="module")
def kueue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TwinCluster, Path, Access]]:
    tmp = tmp_path_factory.mktemp("kueue")
    with TwinCluster(fast("kueue")) as cluster:
        access = cluster.serve_api_as(SERVICE_ACCOUNT)
        assert cluster.wait_until(all_running(cluster, 5), timeout=20)
        yield cluster, access.kubeconfig(tmp / "admin.kubeconfig", admin=True), access


def kubectl(path: Path, *args: str, check: bool = True) -> str:
    env = {**os.environ, "KUBECONFIG": str(path), "KUBECACHEDIR": str(path.parent / "cache"),
           "HOME": str(path.parent)}  # fmt: skip
    done = subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=30,
                          check=False)  # fmt: skip
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
    return done.stdout if check else done.stderr


def rows(text: str) -> list[list[str]]:
    """Table lines split on runs of two or more spaces (headers may hold one space)."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.strip().splitlines()]


def test_kubectl_gets_kueues_kinds_with_upstreams_printer_columns(
    kueue: tuple[TwinCluster, Path, Access],
) -> None:
    _, path, _ = kueue
    wide = wait(lambda: (t := rows(kubectl(path, "get", "cq", "-o", "wide")))[1][-1] == "1" and t,
                timeout=10, what="the ClusterQueue counting the admitted Workload")  # fmt: skip
    assert wide == [["NAME", "COHORT", "STRATEGY", "PENDING WORKLOADS", "ADMITTED WORKLOADS"],
                    ["cluster-queue", "BestEffortFIFO", "0", "1"]]  # fmt: skip
    out = kubectl(path, "get", "workloads,clusterqueues,localqueues,resourceflavors,topologies",
                  "-A")
    blocks = [rows(b) for b in out.strip().split("\n\n")]
    assert [b[0] for b in blocks] == [
        ["NAMESPACE", "NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"],
        ["NAMESPACE", "NAME", "COHORT", "PENDING WORKLOADS"],
        ["NAMESPACE", "NAME", "CLUSTERQUEUE", "PENDING WORKLOADS", "ADMITTED WORKLOADS"],
        ["NAMESPACE", "NAME", "AGE"],
        ["NAMESPACE", "NAME", "AGE"],
    ]
    workload, cluster_queue, local_queue, flavor, topology = (b[1] for b in blocks)
    assert workload[0] == "ml" and workload[1].startswith(
        "workload.kueue.x-k8s.io/pytorchjob-llm-finetune-")
    assert workload[2:5] == ["user-queue", "cluster-queue", "True"]
    assert cluster_queue == ["clusterqueue.kueue.x-k8s.io/cluster-queue", "0"]
    assert local_queue == ["ml", "localqueue.kueue.x-k8s.io/user-queue", "cluster-queue", "0", "1"]
    assert flavor[0] == "resourceflavor.kueue.x-k8s.io/default-flavor"
    assert topology[0] == "topology.kueue.x-k8s.io/default"
    assert kubectl(path, "get", "wl", "-n", "ml", "-o", "name").startswith(
        "workload.kueue.x-k8s.io/pytorchjob-llm-finetune-")
    assert "workloads" in kubectl(path, "api-resources", "--api-group", GROUP)


def test_the_official_client_deactivates_a_workload_and_kubectl_shows_it(
    kueue: tuple[TwinCluster, Path, Access],
) -> None:
    cluster, path, _ = kueue
    api = config.new_client_from_config(config_file=str(path))
    try:
        custom = client.CustomObjectsApi(api)
        [found] = custom.list_namespaced_custom_object(GROUP, VERSION, "ml", "workloads")["items"]
        name = found["metadata"]["name"]
        assert found["spec"]["active"] is True
        custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", "workloads", name,
                                              {"spec": {"active": False}})  # fmt: skip

        def evicted() -> dict[str, Any] | None:
            got: dict[str, Any] = custom.get_namespaced_custom_object(
                GROUP, VERSION, "ml", "workloads", name)
            reserved = {c["type"]: c for c in got["status"]["conditions"]}.get("QuotaReserved")
            return got if reserved and reserved["status"] == "False" else None

        got = wait(evicted, timeout=20, what="the Workload evicted and its quota released")
        assert {c["type"]: c["reason"] for c in got["status"]["conditions"]}["Evicted"] == (
            "Deactivated")
        table = rows(kubectl(path, "get", "workloads", "-n", "ml"))
        assert table[1][1:3] == ["user-queue", "False"]  # nothing reserved: RESERVED IN empty
        custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", "workloads", name,
                                              {"spec": {"active": True}})  # fmt: skip
        assert cluster.wait_until(all_running(cluster, 5), timeout=20)
    finally:
        api.close()


def test_a_service_account_reads_workloads_only_as_its_role_allows(
    kueue: tuple[TwinCluster, Path, Access],
) -> None:
    _, path, access = kueue
    agent = access.kubeconfig(path.parent / "agent.kubeconfig")
    assert "pytorchjob-llm-finetune-" in kubectl(agent, "get", "workloads", "-n", "ml")
    assert kubectl(agent, "auth", "can-i", "patch", "workloads.kueue.x-k8s.io", "-n", "ml",
                   check=False) == ""  # fmt: skip
    api = config.new_client_from_config(config_file=str(agent))
    try:
        custom = client.CustomObjectsApi(api)
        [found] = custom.list_namespaced_custom_object(GROUP, VERSION, "ml", "workloads")["items"]
        with pytest.raises(ApiException) as refused:
            custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", "workloads",
                                                  found["metadata"]["name"],
                                                  {"spec": {"active": False}})  # fmt: skip
        assert refused.value.status == 403
        assert json.loads(refused.value.body)["message"] == (
            f'workloads.kueue.x-k8s.io "{found["metadata"]["name"]}" is forbidden: User '
            '"system:serviceaccount:zonemedic:agent" cannot patch resource "workloads" in API '
            'group "kueue.x-k8s.io" in the namespace "ml"')
        with pytest.raises(ApiException) as refused:
            custom.list_namespaced_custom_object(GROUP, VERSION, "ml", "localqueues")
        assert refused.value.status == 403
    finally:
        api.close()


def test_a_cluster_without_kueue_does_not_serve_its_kinds(tmp_path: Path) -> None:
    with running_twin(tmp_path) as twin:
        assert "workloads" not in twin.kubectl("api-resources").stdout
        done = twin.kubectl("get", "workloads", "-A", check=False)
        assert done.returncode != 0
        assert 'the server doesn\'t have a resource type "workloads"' in done.stderr
        twin.store.install_group(GROUP)  # discovery is read per request: no restart needed
        fresh = kubeconfig.write(tmp_path / "fresh", twin.server.url)
        listed = twin.kubectl("get", "workloads", "-A", "--kubeconfig", str(fresh),
                              "--cache-dir", str(tmp_path / "fresh-cache"))
        assert "No resources found" in listed.stderr
