"""What remediation asks of the cluster, through the official client over HTTP against the twin:
optimistic-lock merge patches on Kubeflow jobs, server-side dry runs, suspend and resume, a
Deployment rollout, batch Job deletion (Foreground and Background) and re-creation, and cordoned
nodes the scheduler keeps pods off."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from agent.twin import kubeconfig
from agent.twin.cluster import TwinCluster
from agent.twin.resources import lookup
from tests.twin.twin_fixtures import all_running, fast, pods, wait

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
JOB = "llm-finetune"
ZONE = "topology.kubernetes.io/zone"
PYTORCHJOBS = lookup("pytorchjobs")
BATCH_JOBS = lookup("jobs", group="batch")
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


class Apis:
    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)


def started(cluster: TwinCluster, tmp_path: Path) -> Iterator[Apis]:
    server = cluster.serve_api()
    api = config.new_client_from_config(
        config_file=str(kubeconfig.write(tmp_path / "kubeconfig", server.url))
    )
    try:
        yield Apis(api)
    finally:
        api.close()


@pytest.fixture
def seed(tmp_path: Path) -> Iterator[tuple[TwinCluster, Apis]]:
    with TwinCluster(fast("seed-degraded")) as cluster:
        wait(cluster, all_running(cluster, 5))
        for apis in started(cluster, tmp_path):
            yield cluster, apis


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[TwinCluster, Apis]]:
    with TwinCluster(fast("lab")) as cluster:
        wait(cluster, all_running(cluster, 5, "ml-lab"))
        for apis in started(cluster, tmp_path):
            yield cluster, apis


def condition(obj: dict[str, Any], kind: str) -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return str(cond["status"])
    return None


def test_merge_patch_with_a_stale_resource_version_is_409(seed: tuple[TwinCluster, Apis]) -> None:
    cluster, apis = seed
    job = apis.custom.get_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, JOB)
    stale = job["metadata"]["resourceVersion"]
    apis.custom.patch_namespaced_custom_object(
        GROUP, VERSION, "ml", PLURAL, JOB, {"metadata": {"labels": {"touched": "yes"}}}
    )
    with pytest.raises(ApiException) as err:
        apis.custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, JOB, {
            "metadata": {"resourceVersion": stale}, "spec": {"runPolicy": {"suspend": True}}})  # fmt: skip
    assert err.value.status == 409 and '"reason":"Conflict"' in err.value.body.replace(" ", "")
    assert cluster.store.get(PYTORCHJOBS, JOB, namespace="ml")["spec"]["runPolicy"] == {
        "suspend": False}  # fmt: skip
    current = apis.custom.get_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, JOB)
    patched = apis.custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, JOB, {
        "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
        "spec": {"runPolicy": {"suspend": True}}})  # fmt: skip
    assert patched["spec"]["runPolicy"]["suspend"] is True
    assert int(patched["metadata"]["resourceVersion"]) > int(current["metadata"]["resourceVersion"])


def test_dry_run_all_answers_as_if_applied_and_stores_nothing(
    seed: tuple[TwinCluster, Apis],
) -> None:
    cluster, apis = seed
    before = cluster.store.get(PYTORCHJOBS, JOB, namespace="ml")
    fix = {"spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {"Master": {"template": {
        "spec": {"nodeSelector": {ZONE: "us-east-1a"}, "tolerations": [GPU_TOLERATION]}}}}}}  # fmt: skip
    answer = apis.custom.patch_namespaced_custom_object(
        GROUP, VERSION, "ml", PLURAL, JOB, fix, dry_run="All"
    )
    master = answer["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert master["nodeSelector"] == {ZONE: "us-east-1a"} and answer["spec"]["runPolicy"]["suspend"]
    assert answer["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert cluster.store.get(PYTORCHJOBS, JOB, namespace="ml") == before

    job = {"metadata": {"name": "extra", "namespace": "ml"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}  # fmt: skip
    created = apis.batch.create_namespaced_job("ml", job, dry_run="All")
    assert created.metadata.name == "extra" and created.metadata.uid
    with pytest.raises(ApiException) as err:
        apis.batch.read_namespaced_job("extra", "ml")
    assert err.value.status == 404

    rv = cluster.store.resource_version
    pod = pods(cluster)[0]["metadata"]["name"]
    deleted = apis.core.delete_namespaced_pod(pod, "ml", dry_run="All", _preload_content=False)
    answer = orjson.loads(deleted.data)
    deleted.release_conn()
    assert deleted.status == 200 and answer["metadata"]["name"] == pod
    # a bound pod would be given its grace period: the answer carries the deletionTimestamp
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 30
    assert answer["metadata"]["deletionTimestamp"]
    apis.custom.delete_namespaced_custom_object(
        GROUP, VERSION, "ml", PLURAL, JOB, dry_run="All", propagation_policy="Foreground"
    )
    assert cluster.store.resource_version == rv  # nothing written
    assert cluster.store.get(PYTORCHJOBS, JOB, namespace="ml") == before
    assert len(pods(cluster)) == 5


def test_suspend_deletes_every_pod_then_resume_recreates_them_from_the_patched_template(
    seed: tuple[TwinCluster, Apis],
) -> None:
    cluster, apis = seed
    fix = {"spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {"Master": {"template": {
        "spec": {"nodeSelector": {ZONE: "us-east-1a"}, "tolerations": [GPU_TOLERATION]}}}}}}  # fmt: skip
    apis.custom.patch_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, JOB, fix)

    def suspended() -> bool:
        job = apis.custom.get_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, JOB)
        left = apis.core.list_namespaced_pod("ml").items  # Terminating pods included
        return condition(job, "Suspended") == "True" and not left

    wait(cluster, suspended)
    apis.custom.patch_namespaced_custom_object(
        GROUP, VERSION, "ml", PLURAL, JOB, {"spec": {"runPolicy": {"suspend": False}}}
    )
    wait(cluster, all_running(cluster, 5))
    nodes = {n.metadata.name: n.metadata.labels[ZONE] for n in apis.core.list_node().items}
    placed = {nodes[p.spec.node_name] for p in apis.core.list_namespaced_pod("ml").items}
    assert placed == {"us-east-1a"}
    job = apis.custom.get_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, JOB)
    assert condition(job, "Suspended") == "False"


def test_a_deployment_template_patch_rolls_its_pods(lab: tuple[TwinCluster, Apis]) -> None:
    cluster, apis = lab
    selector = "role=coordinator"
    (old,) = apis.core.list_namespaced_pod("ml-lab", label_selector=selector).items
    apis.apps.patch_namespaced_deployment("rendezvous", "ml-lab", {"spec": {"template": {
        "metadata": {"labels": {"zone": "zone-a"}},
        "spec": {"nodeSelector": {ZONE: "zone-a"}, "tolerations": [GPU_TOLERATION]}}}})  # fmt: skip

    def rolled() -> bool:
        found = apis.core.list_namespaced_pod("ml-lab", label_selector=selector).items
        return [p.metadata.name for p in found] != [old.metadata.name] and len(found) == 1 and (
            found[0].status.phase == "Running")

    wait(cluster, rolled)
    (new,) = apis.core.list_namespaced_pod("ml-lab", label_selector=selector).items
    assert new.metadata.labels["zone"] == "zone-a" and new.spec.node_name.startswith("gpu-a-")


@pytest.mark.parametrize("propagation", ["Foreground", "Background"])
def test_a_batch_job_deleted_then_created_again_with_a_new_template(
    lab: tuple[TwinCluster, Apis], propagation: str
) -> None:
    cluster, apis = lab
    old = apis.batch.read_namespaced_job("llm-workers", "ml-lab")
    old_pods = {p.metadata.name for p in apis.core.list_namespaced_pod(
        "ml-lab", label_selector="role=worker").items}  # fmt: skip
    apis.batch.delete_namespaced_job("llm-workers", "ml-lab", propagation_policy=propagation)
    if propagation == "Foreground":
        # the Job stays, terminating, until its pods are gone
        held = cluster.store.get(BATCH_JOBS, "llm-workers", namespace="ml-lab")
        assert held["metadata"]["deletionTimestamp"]
        assert "foregroundDeletion" in held["metadata"]["finalizers"]

    def gone() -> bool:
        left = apis.core.list_namespaced_pod("ml-lab", label_selector="role=worker").items
        jobs = apis.batch.list_namespaced_job("ml-lab").items
        return not left and not jobs

    wait(cluster, gone)
    template = old.spec.template
    template.metadata.labels = {k: v for k, v in template.metadata.labels.items()
                                if k in ("app", "role", "zone")}  # fmt: skip
    template.spec.node_selector = {"gpu": "true", ZONE: "zone-a"}
    body = client.V1Job(
        metadata=client.V1ObjectMeta(name="llm-workers", labels=old.metadata.labels),
        spec=client.V1Job(spec=client.V1JobSpec(
            template=template, parallelism=old.spec.parallelism,
            completions=old.spec.completions)).spec,
    )  # fmt: skip
    apis.batch.create_namespaced_job("ml-lab", body)
    wait(cluster, all_running(cluster, 5, "ml-lab"))
    new_pods = apis.core.list_namespaced_pod("ml-lab", label_selector="role=worker").items
    assert len(new_pods) == 4 and not old_pods & {p.metadata.name for p in new_pods}
    assert all(p.spec.node_selector == {"gpu": "true", ZONE: "zone-a"} for p in new_pods)


def test_cordoned_nodes_take_no_new_pod(lab: tuple[TwinCluster, Apis]) -> None:
    cluster, apis = lab
    for node in apis.core.list_node(label_selector=f"{ZONE}=zone-a").items:
        apis.core.patch_node(node.metadata.name, {"spec": {"unschedulable": True}})
    apis.apps.patch_namespaced_deployment("rendezvous", "ml-lab", {"spec": {"template": {
        "spec": {"nodeSelector": {ZONE: "zone-a"}, "tolerations": [GPU_TOLERATION]}}}})  # fmt: skip

    def pending_with_reason() -> bool:
        found = apis.core.list_namespaced_pod("ml-lab", label_selector="role=coordinator").items
        fresh = [p for p in found if p.metadata.deletion_timestamp is None
                 and not p.spec.node_name]  # fmt: skip
        return any(
            c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
            and "node(s) were unschedulable" in (c.message or "")
            for p in fresh for c in p.status.conditions or ()
        )

    wait(cluster, pending_with_reason)
    # the workers already running on the cordoned nodes keep running (cordon does not evict)
    workers = apis.core.list_namespaced_pod("ml-lab", label_selector="role=worker").items
    assert len(workers) == 4 and all(p.status.phase == "Running" for p in workers)
    for node in apis.core.list_node(label_selector=f"{ZONE}=zone-a").items:
        apis.core.patch_node(node.metadata.name, {"spec": {"unschedulable": False}})

    def moved() -> bool:
        found = apis.core.list_namespaced_pod("ml-lab", label_selector="role=coordinator").items
        return len(found) == 1 and bool(found[0].spec.node_name) and found[0].spec.node_name.startswith("gpu-a-")

    wait(cluster, moved)


@pytest.mark.parametrize("stale", ["uid", "resourceVersion"])
def test_a_delete_whose_preconditions_name_another_object_is_409_and_deletes_nothing(
    lab: tuple[TwinCluster, Apis], stale: str
) -> None:
    """DeleteOptions.preconditions as kube-apiserver's registry checks them: the uid (another
    object now holds the name) or the resourceVersion (changed since read), worded as it words
    them; a dry run checks them too."""
    cluster, apis = lab
    job = apis.batch.read_namespaced_job("llm-workers", "ml-lab")
    uid, rv = job.metadata.uid, job.metadata.resource_version
    given = {"uid": "2f1c0c1e-0000-4000-8000-000000000000", "resource_version": rv} if stale == "uid" \
        else {"uid": uid, "resource_version": "1"}
    for dry_run in (["All"], None):
        with pytest.raises(ApiException) as caught:
            apis.batch.delete_namespaced_job(
                "llm-workers", "ml-lab", propagation_policy="Foreground",
                body=client.V1DeleteOptions(preconditions=client.V1Preconditions(**given), dry_run=dry_run),
            )  # fmt: skip
        status = orjson.loads(caught.value.body)
        assert caught.value.status == 409 and status["reason"] == "Conflict"
        assert status["details"] == {"name": "llm-workers", "group": "batch", "kind": "Job"}
        if stale == "uid":
            assert status["message"] == (
                f'Operation cannot be fulfilled on Job.batch "llm-workers": the UID in the '
                f"precondition ({given['uid']}) does not match the UID in record ({uid}). The "
                "object might have been deleted and then recreated")
        else:
            assert status["message"] == (
                'Operation cannot be fulfilled on Job.batch "llm-workers": the ResourceVersion in '
                f"the precondition (1) does not match the ResourceVersion in record ({rv}). The "
                "object might have been modified")
    held = cluster.store.get(BATCH_JOBS, "llm-workers", namespace="ml-lab")
    assert held["metadata"]["uid"] == uid and not held["metadata"].get("deletionTimestamp")
    # the right ones delete it
    apis.batch.delete_namespaced_job("llm-workers", "ml-lab", body=client.V1DeleteOptions(
        preconditions=client.V1Preconditions(uid=uid, resource_version=held["metadata"]["resourceVersion"])))
    left = cluster.store.list(BATCH_JOBS, namespace="ml-lab")[0]
    assert not left or left[0]["metadata"].get("deletionTimestamp")
