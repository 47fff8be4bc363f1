"""Every plan passes the twin API server's server-side dry run (dryRun=All), sent by the official
client as a JSON merge patch: the answer carries the patched templates, the stored object is
unchanged. Group plans: the Deployment patch and the recreated Job's create body."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from agent.model.workload import JobKind
from agent.remediation.plan import LiveObjects, Plan
from agent.remediation.planner import plan_remediation
from tests.remediation.builders import (
    KINDS,
    batch_job,
    cluster_nodes,
    deployment,
    finding,
    job,
    job_pods,
    pod,
)
from tests.support.objects import ZONE, replicaset
from tests.twin.apiserver_harness import running_twin

MERGE_PATCH = "application/merge-patch+json"
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation")


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.ApiClient]:
    with running_twin(tmp_path_factory.mktemp("twin")) as twin:
        api_client = config.new_client_from_config(config_file=str(twin.kubeconfig))
        core = client.CoreV1Api(api_client)
        core.create_namespace({"metadata": {"name": "ml"}})
        try:
            yield api_client
        finally:
            api_client.close()


def create_body(obj: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(obj)
    body.pop("status", None)
    for key in SERVER_FIELDS:
        body["metadata"].pop(key, None)
    return body


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_kubeflow_plan_passes_server_side_dry_run(api: client.ApiClient, kind: str) -> None:
    custom = client.CustomObjectsApi(api)
    api_version = KINDS[kind][0]
    version = api_version.split("/")[1]
    plural = {"PyTorchJob": "pytorchjobs", "TFJob": "tfjobs", "MPIJob": "mpijobs",
              "MPIJob/v2beta1": "mpijobs", "XGBoostJob": "xgboostjobs", "PaddleJob": "paddlejobs",
              "JAXJob": "jaxjobs"}[kind]  # fmt: skip
    name = f"dry-{kind.lower().replace('/', '-')}"
    stored = custom.create_namespaced_custom_object(
        "kubeflow.org", version, "ml", plural, create_body(job(kind, name))
    )
    pods = job_pods(kind, name)
    result = plan_remediation(
        finding(KINDS[kind][4], name),
        LiveObjects(job=stored, pods=pods, nodes=cluster_nodes(), bound_pods=pods),
    )
    assert isinstance(result, Plan), result
    (target,) = result.targets
    assert (target.group, target.version, target.plural) == ("kubeflow.org", version, plural)
    patch = result.job_patch(resource_version=stored["metadata"]["resourceVersion"], suspend=True)
    answer = custom.patch_namespaced_custom_object(
        "kubeflow.org", version, "ml", plural, name, patch, dry_run="All", _content_type=MERGE_PATCH
    )
    assert answer["spec"]["runPolicy"]["suspend"] is True
    for spec in answer["spec"][KINDS[kind][1]].values():
        assert spec["template"]["spec"]["nodeSelector"][ZONE] == "zone-a"
    assert target.state_of(answer).value == "planned"
    again = custom.get_namespaced_custom_object("kubeflow.org", version, "ml", plural, name)
    assert again["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert target.state_of(again).value == "original"
    # a stale resourceVersion is refused (the optimistic lock the executor relies on)
    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object(
            "kubeflow.org", version, "ml", plural, name,
            result.job_patch(resource_version="1", suspend=True), dry_run="All",
            _content_type=MERGE_PATCH,
        )  # fmt: skip
    assert info.value.status == 409


def test_group_plan_passes_server_side_dry_run(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    batch = client.BatchV1Api(api)
    dep = apps.create_namespaced_deployment(
        "ml", create_body(deployment("coord", labels={"zone": "zone-b"}))
    ).to_dict()
    dep_dict = api.sanitize_for_serialization(apps.read_namespaced_deployment("coord", "ml"))
    workloads = [
        dep_dict,
        replicaset("coord-1", "coord"),
        batch_job("gpu-b", labels={"zone": "zone-b"}, parallelism=1),
    ]
    pods = [
        pod("coord-1-x", node_name="cpu-b-0", labels={"zone": "zone-b"},
            owner=("apps/v1", "ReplicaSet", "coord-1")),
        pod("gpu-b-1", node_name="cpu-b-1", gpus=1, labels={"zone": "zone-b"},
            owner=("batch/v1", "Job", "gpu-b")),
    ]  # fmt: skip
    assert dep["metadata"]["name"] == "coord"
    result = plan_remediation(
        finding(JobKind.GROUP, "lab"),
        LiveObjects(job=None, pods=pods, nodes=cluster_nodes(), bound_pods=pods, workloads=workloads),
        mirror_keys=("zone",),
    )
    assert isinstance(result, Plan), result
    rollout = next(t for t in result.targets if t.kind == "Deployment")
    patch = rollout.template_patch()
    patch["metadata"] = {"resourceVersion": dep_dict["metadata"]["resourceVersion"]}
    answer = api.sanitize_for_serialization(
        apps.patch_namespaced_deployment("coord", "ml", patch, dry_run="All", _content_type=MERGE_PATCH)
    )
    assert answer["spec"]["template"]["metadata"]["labels"]["zone"] == "zone-a"
    assert rollout.state_of(answer).value == "planned"
    recreate = next(t for t in result.targets if t.kind == "Job")
    assert recreate.manifest is not None
    created = api.sanitize_for_serialization(
        batch.create_namespaced_job("ml", copy.deepcopy(dict(recreate.manifest)), dry_run="All")
    )
    assert created["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "true", ZONE: "zone-a"}
    assert created["metadata"]["name"] == "gpu-b"
    assert batch.list_namespaced_job("ml").items == []  # dry run: nothing stored
