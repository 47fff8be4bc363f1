"""managedFields on the twin as the API server keeps them, through kubectl and the official client."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from agent.twin import managed_fields
from agent.twin.resources import lookup
from tests.twin.apiserver_harness import Twin, running_twin
from tests.twin.twin_fixtures import fast, pods, running, wait

DEPLOYMENTS = lookup("deployments", group="apps")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
ZONE = "topology.kubernetes.io/zone"


def manifest(name: str, *, zone: str = "zone-b", extra_label: bool = False) -> str:
    labels = {"app": name, **({"tier": "x"} if extra_label else {})}
    return yaml.safe_dump({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"nodeSelector": {ZONE: zone},
                                       "containers": [{"name": "c", "image": "img"}]}}},
    })


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    with running_twin(tmp_path_factory.mktemp("managed")) as t:
        yield t


@pytest.fixture(scope="module")
def api(twin: Twin) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=str(twin.kubeconfig))
    yield api_client
    api_client.close()


def entries(twin: Twin, name: str) -> dict[str, dict[str, Any]]:
    """The object's managedFields as kubectl shows them, by manager."""
    out = json.loads(twin.kubectl("get", "deploy", name, "-o", "json",
                                  "--show-managed-fields").stdout)
    return {e["manager"]: e for e in out["metadata"]["managedFields"]}


def owns(entry: dict[str, Any], *path: str) -> bool:
    node = entry["fieldsV1"]
    for element in path:
        if element not in node:
            return False
        node = node[element]
    return True


ZONE_PATH = ("f:spec", "f:template", "f:spec", "f:nodeSelector", f"f:{ZONE}")


def test_client_side_apply_records_its_manager_and_keeps_last_applied(twin: Twin) -> None:
    twin.kubectl("apply", "-f", "-", stdin=manifest("csa"))
    got = entries(twin, "csa")
    assert list(got) == ["kubectl-client-side-apply"]
    entry = got["kubectl-client-side-apply"]
    assert (entry["operation"], entry["apiVersion"], entry["fieldsType"]) == \
        ("Update", "apps/v1", "FieldsV1")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", entry["time"])
    assert owns(entry, *ZONE_PATH) and owns(entry, "f:spec", "f:replicas")
    assert owns(entry, "f:metadata", "f:annotations", f"f:{LAST_APPLIED}")
    assert entry["fieldsV1"]["f:spec"]["f:selector"] == {}  # an atomic struct
    live = twin.store.get(DEPLOYMENTS, "csa", namespace="default")
    applied = json.loads(live["metadata"]["annotations"][LAST_APPLIED])
    assert applied["spec"]["template"]["spec"]["nodeSelector"] == {ZONE: "zone-b"}


def test_each_kubectl_command_writes_under_its_own_manager(
    twin: Twin, monkeypatch: pytest.MonkeyPatch
) -> None:
    twin.kubectl("create", "-f", "-", stdin=manifest("cmds"))
    twin.kubectl("patch", "deploy", "cmds", "-p",
                 json.dumps({"spec": {"template": {"spec": {"nodeSelector": {ZONE: "zone-a"}}}}}))
    twin.kubectl("label", "deploy", "cmds", "pinned=yes")
    monkeypatch.setenv("KUBE_EDITOR", "sed -i s/replicas:.1/replicas:\\ 2/")
    twin.kubectl("edit", "deploy", "cmds")
    got = entries(twin, "cmds")
    assert set(got) == {"kubectl-create", "kubectl-patch", "kubectl-label", "kubectl-edit"}
    assert owns(got["kubectl-patch"], *ZONE_PATH)
    assert not owns(got["kubectl-create"], *ZONE_PATH)  # the patch took the field
    assert owns(got["kubectl-label"], "f:metadata", "f:labels", "f:pinned")
    assert owns(got["kubectl-edit"], "f:spec", "f:replicas")
    assert not owns(got["kubectl-create"], "f:spec", "f:replicas")


def test_the_python_client_writes_as_its_user_agent_or_its_field_manager(
    twin: Twin, api: client.ApiClient
) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", yaml.safe_load(manifest("py")))
    apps.patch_namespaced_deployment("py", "default",
                                     {"spec": {"template": {"spec": {"nodeSelector": {
                                         ZONE: "zone-a"}}}}}, field_manager="zonemedic")
    got = entries(twin, "py")
    assert set(got) == {"OpenAPI-Generator", "zonemedic"}
    assert owns(got["zonemedic"], *ZONE_PATH)


def test_server_side_apply_conflicts_then_forces_then_prunes(twin: Twin) -> None:
    twin.kubectl("apply", "--server-side", "-f", "-", stdin=manifest("ssa", extra_label=True))
    assert entries(twin, "ssa")["kubectl"]["operation"] == "Apply"
    twin.kubectl("patch", "deploy", "ssa", "-p",
                 json.dumps({"spec": {"template": {"spec": {"nodeSelector": {ZONE: "zone-a"}}}}}))
    done = twin.kubectl("apply", "--server-side", "-f", "-", stdin=manifest("ssa"), check=False)
    assert done.returncode == 1
    assert ('Apply failed with 1 conflict: conflict with "kubectl-patch" using apps/v1: '
            f".spec.template.spec.nodeSelector.{ZONE}") in done.stderr
    twin.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=manifest("ssa"))
    live = twin.store.get(DEPLOYMENTS, "ssa", namespace="default")
    assert live["spec"]["template"]["spec"]["nodeSelector"] == {ZONE: "zone-b"}
    assert "tier" not in live["metadata"]["labels"]  # applied before, not now, owned by nobody else
    got = entries(twin, "ssa")
    assert "kubectl-patch" not in got  # its only field moved to the applier
    assert owns(got["kubectl"], *ZONE_PATH)


def test_apply_conflict_over_the_client_is_a_409_with_causes(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", yaml.safe_load(manifest("cause")),
                                      field_manager="argocd-controller")
    body = {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "cause", "namespace": "default"}, "spec": {"replicas": 5}}
    with pytest.raises(ApiException) as err:
        apps.patch_namespaced_deployment("cause", "default", body, field_manager="ci",
                                         _content_type="application/apply-patch+yaml")
    status = json.loads(err.value.body)
    assert err.value.status == 409 and status["reason"] == "Conflict"
    assert status["details"]["causes"] == [{"reason": "FieldManagerConflict",
                                            "message": 'conflict with "argocd-controller" '
                                                       "using apps/v1",
                                            "field": ".spec.replicas"}]


def test_a_no_op_write_keeps_the_entry_time_and_stores_nothing(twin: Twin) -> None:
    twin.kubectl("apply", "-f", "-", stdin=manifest("noop"))
    before = twin.store.get(DEPLOYMENTS, "noop", namespace="default")
    twin.kubectl("apply", "-f", "-", stdin=manifest("noop"))
    after = twin.store.get(DEPLOYMENTS, "noop", namespace="default")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["metadata"]["managedFields"] == before["metadata"]["managedFields"]


@pytest.mark.parametrize(
    ("field_manager", "user_agent", "expect"),
    [
        ("kubectl-edit", "kubectl/v1.32.0 (linux/amd64) kubernetes/abc", "kubectl-edit"),
        (None, "kubectl/v1.32.0 (linux/amd64) kubernetes/abc", "kubectl"),
        (None, "OpenAPI-Generator/31.0.0/python", "OpenAPI-Generator"),
        (None, "argocd-application-controller/v2.9", "argocd-application-controller"),
        (None, "bad\x00name/1", "badname"),
        (None, "x" * 200, "x" * 128),
    ],
)
def test_manager_from_a_request(field_manager: str | None, user_agent: str, expect: str) -> None:
    assert managed_fields.manager_from(field_manager, user_agent) == expect


def test_the_twin_controllers_write_under_their_component_names() -> None:
    with running(fast("seed-degraded")) as cluster:
        deployment = yaml.safe_load(manifest("ctl"))
        del deployment["spec"]["template"]["spec"]["nodeSelector"]
        deployment["metadata"]["namespace"] = "ml"
        cluster.store.create(DEPLOYMENTS, deployment)
        wait(cluster, lambda: any(p["status"].get("phase") == "Running"
                                  for p in pods(cluster, selector="app=ctl")))
        (pod,) = pods(cluster, selector="app=ctl")
        managers = {(e["manager"], e.get("subresource", ""))
                    for e in pod["metadata"]["managedFields"]}
        assert ("kube-controller-manager", "") in managers
        assert ("kubelet", "status") in managers
