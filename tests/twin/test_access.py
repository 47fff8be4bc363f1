"""The agent's own RBAC in the twin: deploy/'s ServiceAccount, ClusterRole and bindings loaded into
the authorizer; the official client and kubectl with the ServiceAccount's token get exactly those
rights, and a forbidden request is answered 403 with the real server's Status."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from agent.errors import InputError
from agent.twin.access import Access, bound_service_account, read_manifests
from agent.twin.cluster import TwinCluster
from tests.twin.apiserver_harness import Twin
from tests.twin.twin_fixtures import all_running, fast

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "base"
AGENT_USER = "system:serviceaccount:zonemedic:zonemedic"


def deploy_rbac() -> list[dict[str, Any]]:
    """deploy/'s RBAC manifests, in the namespace its kustomization puts them."""
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    return read_manifests(
        [DEPLOY / "serviceaccount.yaml", DEPLOY / "rbac.yaml"],
        namespace=kustomization["namespace"],
    )


@pytest.fixture
def twin(tmp_path: Path) -> Iterator[tuple[TwinCluster, Access, Path]]:
    with TwinCluster(fast("seed-blocked")) as cluster:
        access = cluster.serve_api_as(deploy_rbac())
        assert cluster.wait_until(all_running(cluster, 5), timeout=15)
        yield cluster, access, access.kubeconfig(tmp_path / "agent.kubeconfig")


def status_of(err: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(err.body)
    return body


def test_the_agent_token_is_the_service_account_deploy_binds() -> None:
    assert bound_service_account(deploy_rbac()).name == AGENT_USER


def test_allowed_verbs_pass_and_a_forbidden_one_is_403_naming_verb_resource_and_user(
    twin: tuple[TwinCluster, Access, Path],
) -> None:
    _, _, path = twin
    api = config.new_client_from_config(config_file=str(path))
    try:
        core = client.CoreV1Api(api)
        pods = core.list_namespaced_pod("ml").items  # get/list/watch on pods: granted
        assert len(pods) == 5
        assert {n.metadata.name for n in core.list_node().items}
        with pytest.raises(ApiException) as err:
            core.delete_namespaced_pod(pods[0].metadata.name, "ml")
        assert err.value.status == 403
        status = status_of(err.value)
        assert status["kind"] == "Status" and status["reason"] == "Forbidden"
        assert status["code"] == 403
        assert status["message"] == (
            f'pods "{pods[0].metadata.name}" is forbidden: User "{AGENT_USER}" cannot delete '
            'resource "pods" in API group "" in the namespace "ml"'
        )
        assert len(core.list_namespaced_pod("ml").items) == 5  # nothing was deleted
        with pytest.raises(ApiException) as err:
            core.list_namespaced_service("ml")
        assert err.value.status == 403
        assert 'cannot list resource "services"' in status_of(err.value)["message"]
    finally:
        api.close()


def test_the_leader_lease_is_granted_only_in_the_agents_namespace(
    twin: tuple[TwinCluster, Access, Path],
) -> None:
    _, _, path = twin
    api = config.new_client_from_config(config_file=str(path))
    lease = {"metadata": {"name": "zonemedic-leader"}, "spec": {"holderIdentity": "a"}}
    try:
        coordination = client.CoordinationV1Api(api)
        made = coordination.create_namespaced_lease("zonemedic", lease)
        assert made.spec.holder_identity == "a"
        with pytest.raises(ApiException) as err:
            coordination.create_namespaced_lease("default", lease)
        assert err.value.status == 403
        assert status_of(err.value)["message"].endswith(
            'cannot create resource "leases" in API group "coordination.k8s.io" in the '
            'namespace "default"'
        )
    finally:
        api.close()


def test_the_agent_reads_and_replaces_only_its_own_lease(
    twin: tuple[TwinCluster, Access, Path],
) -> None:
    """The Role names the one Lease (leader_election.name): get and update pass on it, another
    Lease of the namespace is 403, and nobody lists leases."""
    _, _, path = twin
    api = config.new_client_from_config(config_file=str(path))
    try:
        coordination = client.CoordinationV1Api(api)
        for name in ("zonemedic-leader", "someone-else"):
            coordination.create_namespaced_lease(
                "zonemedic", {"metadata": {"name": name}, "spec": {"holderIdentity": "a"}}
            )
        mine = coordination.read_namespaced_lease("zonemedic-leader", "zonemedic")
        mine.spec.holder_identity = "b"
        assert coordination.replace_namespaced_lease(
            "zonemedic-leader", "zonemedic", mine
        ).spec.holder_identity == "b"
        for call in (
            lambda: coordination.read_namespaced_lease("someone-else", "zonemedic"),
            lambda: coordination.list_namespaced_lease("zonemedic"),
        ):
            with pytest.raises(ApiException) as err:
                call()
            assert err.value.status == 403
    finally:
        api.close()


def test_rbac_created_through_the_api_takes_effect(
    twin: tuple[TwinCluster, Access, Path], tmp_path: Path
) -> None:
    cluster, access, path = twin
    kubectl = Twin(cluster.store, access.server, path, tmp_path / "cache").kubectl
    assert kubectl("auth", "can-i", "delete", "pods", "-n", "ml", check=False).stdout == "no\n"
    admin = access.kubeconfig(tmp_path / "admin.kubeconfig", admin=True)
    grant = (
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n"
        "metadata: {name: pod-deleter, namespace: ml}\n"
        "rules: [{apiGroups: [''], resources: [pods], verbs: [delete]}]\n---\n"
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n"
        "metadata: {name: pod-deleter, namespace: ml}\n"
        "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-deleter}\n"
        "subjects: [{kind: ServiceAccount, name: zonemedic, namespace: zonemedic}]\n"
    )
    kubectl("apply", "-f", "-", stdin=grant, kubeconfig=admin)
    assert kubectl("auth", "can-i", "delete", "pods", "-n", "ml").stdout == "yes\n"
    assert kubectl("auth", "can-i", "delete", "pods", "-n", "default",
                   check=False).stdout == "no\n"  # fmt: skip
    kubectl("delete", "pod", "-n", "ml", "llm-finetune-worker-0", "--wait=false")


def test_manifests_must_bind_exactly_one_service_account() -> None:
    with pytest.raises(InputError) as err:
        bound_service_account([{"kind": "ClusterRole", "metadata": {"name": "x"}}])
    assert "found: none" in str(err.value)
    two = [
        {"kind": "RoleBinding", "metadata": {"name": "a", "namespace": "n"},
         "subjects": [{"kind": "ServiceAccount", "name": "a"},
                      {"kind": "ServiceAccount", "name": "b", "namespace": "m"}]},
    ]  # fmt: skip
    with pytest.raises(InputError) as err:
        bound_service_account(two)
    assert "m/b, n/a" in str(err.value)
