"""kubectl v1.32, as a subprocess, against the twin's API server over real HTTP."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.twin import kubeconfig
from agent.twin.auth import AUTHENTICATED, UserInfo, load_rbac
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from tests.twin.apiserver_harness import Twin, running_twin

PODS = lookup("pods")
PYTORCH = lookup("pytorchjobs")

RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: job-viewer}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [kubeflow.org]
  resources: [pytorchjobs]
  verbs: [get, list, watch, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-views}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: job-viewer}
subjects:
- {kind: User, name: alice}
"""

MANIFEST = """
apiVersion: v1
kind: Namespace
metadata: {name: ml}
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: bert, namespace: ml, labels: {team: nlp}}
spec:
  pytorchReplicaSpecs:
    Master: {replicas: 1, template: {spec: {containers: [{name: pytorch, image: img}]}}}
    Worker: {replicas: 2, template: {spec: {containers: [{name: pytorch, image: img}]}}}
---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: deny-all, namespace: ml}
spec: {endpointSelector: {}}
"""


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    tmp = tmp_path_factory.mktemp("kubectl")
    with running_twin(tmp, tokens={"alice-token": UserInfo("alice", (AUTHENTICATED,))}) as t:
        load_rbac(t.store, yaml.safe_load_all(RBAC))
        t.kubectl("create", "-f", "-", stdin=MANIFEST)
        job = t.store.get(PYTORCH, "bert", namespace="ml")
        ref = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert",
               "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        for role, index in (("master", 0), ("worker", 0), ("worker", 1)):
            t.store.create(PODS, {
                "metadata": {"name": f"bert-{role}-{index}", "namespace": "ml",
                             "labels": {"training.kubeflow.org/job-name": "bert",
                                        "training.kubeflow.org/replica-type": role},
                             "ownerReferences": [ref]},
                "spec": {"containers": [{"name": "pytorch", "image": "img"}]},
            })
        t.store.create(PODS, {"metadata": {"name": "web", "namespace": "default",
                                           "labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
        yield t


@pytest.fixture(scope="module")
def alice_config(twin: Twin) -> Path:
    return kubeconfig.write(twin.kubeconfig.parent / "alice.kubeconfig", twin.server.url,
                            token="alice-token", user="alice", ca_pem=twin.server.ca_pem)


def test_get_all_namespaces_as_json(twin: Twin) -> None:
    out = json.loads(twin.kubectl("get", "pods", "-A", "-o", "json").stdout)
    assert out["kind"] == "List"
    where = sorted((p["metadata"]["namespace"], p["metadata"]["name"]) for p in out["items"])
    assert ("default", "web") in where and ("ml", "bert-master-0") in where


def test_get_with_set_based_label_selector(twin: Twin) -> None:
    out = twin.kubectl("get", "pods", "-n", "ml", "-l",
                       "training.kubeflow.org/replica-type in (master,ps)", "-o", "name").stdout
    assert out.split() == ["pod/bert-master-0"]
    out = twin.kubectl("get", "pods", "-A", "-l", "app notin (db),!training.kubeflow.org/job-name",
                       "-o", "name").stdout
    assert out.split() == ["pod/web"]


def test_get_custom_resources_and_short_names(twin: Twin) -> None:
    out = twin.kubectl("get", "pytorchjobs", "-n", "ml").stdout
    assert out.splitlines()[0].split()[0] == "NAME" and "bert" in out
    assert "deny-all" in twin.kubectl("get", "cnp", "-n", "ml").stdout
    resources = twin.kubectl("api-resources").stdout
    assert "pytorchjobs" in resources and "ciliumnetworkpolicies" in resources
    cnp_line = next(line for line in resources.splitlines()
                    if line.startswith("ciliumnetworkpolicies "))
    assert "cnp" in cnp_line.split()[1].split(",")


def test_get_pods_table_has_real_columns(twin: Twin) -> None:
    header = twin.kubectl("get", "pods", "-n", "ml").stdout.splitlines()[0].split()
    assert header == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]


def test_patch_merge_and_json_on_a_pytorchjob(twin: Twin) -> None:
    twin.kubectl("patch", "pytorchjob", "bert", "-n", "ml", "--type=merge",
                 "-p", '{"spec":{"runPolicy":{"suspend":true}}}')
    twin.kubectl("patch", "pytorchjob", "bert", "-n", "ml", "--type=json",
                 "-p", '[{"op":"replace","path":"/spec/pytorchReplicaSpecs/Worker/replicas",'
                       '"value":4}]')
    job = twin.store.get(PYTORCH, "bert", namespace="ml")
    assert job["spec"]["runPolicy"]["suspend"] is True
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4


def test_strategic_patch_on_a_pytorchjob_fails_like_a_real_cluster(twin: Twin) -> None:
    done = twin.kubectl("patch", "pytorchjob", "bert", "-n", "ml", "--type=strategic",
                        "-p", '{"spec":{"runPolicy":{"suspend":false}}}', check=False)
    assert done.returncode == 1
    assert "application/strategic-merge-patch+json is not supported" in done.stderr
    assert "application/merge-patch+json" in done.stderr


def test_strategic_patch_on_a_pod_merges_containers_by_name(twin: Twin) -> None:
    twin.kubectl("patch", "pod", "web", "--type=strategic",
                 "-p", '{"spec":{"containers":[{"name":"sidecar","image":"envoy"}]}}')
    pod = twin.store.get(PODS, "web", namespace="default")
    assert [c["name"] for c in pod["spec"]["containers"]] == ["c", "sidecar"]


def test_label_and_annotate(twin: Twin) -> None:
    twin.kubectl("label", "pod", "web", "tier=frontend")
    twin.kubectl("annotate", "pytorchjob", "bert", "-n", "ml", "zonemedic.io/note=split")
    assert twin.store.get(PODS, "web", namespace="default")["metadata"]["labels"]["tier"] == \
        "frontend"
    job = twin.store.get(PYTORCH, "bert", namespace="ml")
    assert job["metadata"]["annotations"]["zonemedic.io/note"] == "split"
    done = twin.kubectl("label", "pod", "web", "tier=backend", check=False)
    assert done.returncode == 1 and "already has a value" in done.stderr


def _reader(proc: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)


def test_watch_sees_added_modified_deleted(twin: Twin) -> None:
    env_args = ("get", "pods", "-n", "default", "-w", "--output-watch-events")
    import os
    env = {**os.environ, "KUBECONFIG": str(twin.kubeconfig), "KUBECACHEDIR": str(twin.cache_dir),
           "HOME": str(twin.cache_dir)}
    proc = subprocess.Popen(["kubectl", *env_args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_reader, args=(proc, lines), daemon=True).start()
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 20
        # The initial list prints the existing pod; then the writes below stream in.
        while not any("web" in s for s in seen) and time.monotonic() < deadline:
            seen.append(lines.get(timeout=20))
        twin.store.create(PODS, {"metadata": {"name": "watched", "namespace": "default"},
                                 "spec": {"containers": [{"name": "c", "image": "i"}]}})
        twin.store.patch(PODS, "watched", {"metadata": {"labels": {"x": "1"}}},
                         namespace="default", patch_type=PatchType.MERGE)
        twin.store.delete(PODS, "watched", namespace="default")
        events: list[str] = []
        while "DELETED" not in events and time.monotonic() < deadline:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if "watched" in line:
                events.append(line.split()[0])
        assert events == ["ADDED", "MODIFIED", "DELETED"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


def test_create_from_file_and_delete_cascades(twin: Twin, tmp_path: Path) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "gpt", "namespace": "ml"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1}}},
    }))
    assert "pytorchjob.kubeflow.org/gpt created" in twin.kubectl("create", "-f",
                                                                 str(manifest)).stdout
    job = twin.store.get(PYTORCH, "gpt", namespace="ml")
    twin.store.create(PODS, {"metadata": {"name": "gpt-worker-0", "namespace": "ml",
                                          "ownerReferences": [{
                                              "apiVersion": "kubeflow.org/v1",
                                              "kind": "PyTorchJob", "name": "gpt",
                                              "uid": job["metadata"]["uid"]}]},
                             "spec": {"containers": [{"name": "c", "image": "i"}]}})
    again = twin.kubectl("create", "-f", str(manifest), check=False)
    assert again.returncode == 1 and "AlreadyExists" in again.stderr
    twin.kubectl("delete", "-f", str(manifest))
    names = twin.kubectl("get", "pods", "-n", "ml", "-o", "name").stdout.split()
    assert "pod/gpt-worker-0" not in names and "pod/bert-worker-0" in names


def test_delete_with_orphan_cascade_keeps_pods(twin: Twin) -> None:
    twin.store.create(PYTORCH, {"metadata": {"name": "solo", "namespace": "ml"}, "spec": {}})
    job = twin.store.get(PYTORCH, "solo", namespace="ml")
    twin.store.create(PODS, {"metadata": {"name": "solo-worker-0", "namespace": "ml",
                                          "ownerReferences": [{
                                              "apiVersion": "kubeflow.org/v1",
                                              "kind": "PyTorchJob", "name": "solo",
                                              "uid": job["metadata"]["uid"]}]},
                             "spec": {}})
    twin.kubectl("delete", "pytorchjob", "solo", "-n", "ml", "--cascade=orphan")
    pod: dict[str, Any] = twin.store.get(PODS, "solo-worker-0", namespace="ml")
    assert "ownerReferences" not in pod["metadata"]


def test_auth_can_i_for_admin_and_restricted_user(twin: Twin, alice_config: Path) -> None:
    assert twin.kubectl("auth", "can-i", "delete", "nodes").stdout.strip() == "yes"
    assert twin.kubectl("auth", "can-i", "list", "pods", "-n", "ml",
                        kubeconfig=alice_config).stdout.strip() == "yes"
    denied = twin.kubectl("auth", "can-i", "delete", "pods", "-n", "ml",
                          kubeconfig=alice_config, check=False)
    assert denied.returncode == 1 and denied.stdout.strip() == "no"
    assert twin.kubectl("auth", "can-i", "patch", "pytorchjobs.kubeflow.org", "-n", "ml",
                        kubeconfig=alice_config).stdout.strip() == "yes"


def test_restricted_token_gets_forbidden_for_a_denied_verb(twin: Twin,
                                                           alice_config: Path) -> None:
    twin.kubectl("get", "pods", "-n", "ml", kubeconfig=alice_config)
    denied = twin.kubectl("delete", "pod", "bert-master-0", "-n", "ml",
                          kubeconfig=alice_config, check=False)
    assert denied.returncode == 1
    assert ('Error from server (Forbidden): pods "bert-master-0" is forbidden: User "alice" '
            'cannot delete resource "pods" in API group "" in the namespace "ml"') in denied.stderr
    assert twin.store.get(PODS, "bert-master-0", namespace="ml")


def test_bad_token_is_unauthorized(twin: Twin, tmp_path: Path) -> None:
    bad = kubeconfig.write(tmp_path / "bad", twin.server.url, token="wrong",
                           ca_pem=twin.server.ca_pem)
    done = twin.kubectl("get", "pods", kubeconfig=bad, check=False)
    assert done.returncode == 1 and "Unauthorized" in done.stderr


def test_apply_client_side_and_server_side(twin: Twin, tmp_path: Path) -> None:
    manifest = tmp_path / "cm.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: ml}\n"
                        "data: {a: '1'}\n")
    assert "configmap/cfg created" in twin.kubectl("apply", "-f", str(manifest)).stdout
    manifest.write_text(manifest.read_text().replace("'1'", "'2'"))
    assert "configmap/cfg configured" in twin.kubectl("apply", "-f", str(manifest)).stdout
    assert "serverside-applied" in twin.kubectl("apply", "--server-side", "-f",
                                                str(manifest)).stdout
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\n"
                   "metadata: {name: ssa, namespace: ml}\nspec: {runPolicy: {suspend: true}}\n")
    assert "serverside-applied" in twin.kubectl("apply", "--server-side", "-f", str(job)).stdout
    assert twin.store.get(PYTORCH, "ssa", namespace="ml")["spec"]["runPolicy"]["suspend"]


def test_system_namespaces_cannot_be_deleted(twin: Twin) -> None:
    done = twin.kubectl("delete", "namespace", "kube-system", check=False)
    assert done.returncode == 1
    assert 'namespaces "kube-system" is forbidden: this namespace may not be deleted' in \
        done.stderr


def test_get_nodes_columns_like_a_real_cluster(twin: Twin) -> None:
    twin.store.create(lookup("nodes"), {"metadata": {"name": "gpu-1", "labels": {
        "node-role.kubernetes.io/worker": ""}}, "status": {
        "conditions": [{"type": "Ready", "status": "True"}],
        "nodeInfo": {"kubeletVersion": "v1.32.0"}}})
    lines = twin.kubectl("get", "nodes").stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    row = lines[1].split()
    assert row[:3] == ["gpu-1", "Ready", "worker"] and row[4] == "v1.32.0"
